"""Greedy completions with vLLM's offline engine, for the eval gate.

Usage (with the python of an environment that has vLLM, e.g. the one the local canary builds):

    python jobs/generate_vllm.py --model DIR --prompts IN.jsonl --out OUT.jsonl --max-tokens N

``IN.jsonl`` holds one ``{"prompt": <text already rendered with the chat template>}`` per line,
so both engines see the same tokens; ``OUT.jsonl`` gets one ``{"completion": ...}`` per line,
in the same order, written whole at the end. Exit codes: 0 done, 2 bad input, 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--prompts", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--max-tokens", type=int, required=True)
    args = p.parse_args(argv)
    try:
        with open(args.prompts) as f:
            prompts = [json.loads(line)["prompt"] for line in f if line.strip()]
    except (OSError, ValueError, KeyError) as e:
        print(f"--prompts={args.prompts!r}: {e}", file=sys.stderr)
        return 2

    # On CPU: float32 (the bf16 kernels need AVX512-BF16) and a small KV cache; otherwise vLLM
    # reserves most of the machine's memory. On a GPU vLLM picks its own dtype and cache.
    import torch

    on_gpu = torch.cuda.is_available()
    dtype = "auto" if on_gpu else "float32"
    if not on_gpu:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    from vllm import LLM, SamplingParams

    llm = LLM(model=args.model, dtype=dtype, seed=0, enforce_eager=dtype == "float32")
    outputs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=args.max_tokens))
    tmp = f"{args.out}.tmp"
    with open(tmp, "w") as f:
        for o in outputs:
            f.write(json.dumps({"completion": o.outputs[0].text}) + "\n")
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
