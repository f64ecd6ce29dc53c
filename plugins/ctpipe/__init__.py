import os

# The embedded default trains and evaluates a tiny model on the CPU, where torch picks its kernels by
# instruction set, and AVX-512 kernels sum in another order than AVX2 ones: the runs drift apart (the
# default base model's dev accuracy is 79% at step 2000 with AVX2 and 48% with AVX-512, where it ends
# at 54-62% and never settles). Pinning the AVX2 kernels, which every x86-64 machine of the last decade
# has, makes ATen's the same on all of them. The matrix products go through MKL, which still picks its
# kernels by processor: on the machines the README's figures come from it gives those figures, on
# another generation (an Emerald Rapids Xeon) another run of the same recipe (see BaseModelRecipe).
# It takes effect in processes that import ctpipe before torch, as every entry point here does, and in
# the processes they start (Airflow tasks, the local Ray head, Ray jobs, local serving).
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
