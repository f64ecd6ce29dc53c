"""Batched generation for the tiny model: transformers in-process, or vLLM's offline engine for the eval gate."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ctpipe import arith

BATCH = 256


def load(checkpoint: str | Path):
    """Model and tokenizer from a Hugging Face directory, in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    model.eval()
    return model, tokenizer


def generate(
    model,
    tokenizer,
    questions: Sequence[str],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
) -> list[str]:
    """One completion per question; greedy when ``temperature`` is 0."""
    import torch

    from ctpipe.tinymodel import render_prompt

    out: list[str] = []
    gen = torch.Generator().manual_seed(seed)
    for i in range(0, len(questions), BATCH):
        prompts = [render_prompt(tokenizer, q) for q in questions[i : i + BATCH]]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        kwargs: dict = {"max_new_tokens": max_new_tokens, "pad_token_id": tokenizer.pad_token_id}
        if temperature > 0:
            # generate() draws from torch's global RNG; seed it from our generator for reproducibility.
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
            kwargs |= {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        else:
            kwargs |= {"do_sample": False}
        with torch.inference_mode():
            ids = model.generate(**enc, **kwargs)
        new = ids[:, enc["input_ids"].shape[1] :]
        out.extend(tokenizer.batch_decode(new, skip_special_tokens=True))
    return out


def correct_flags(model, tokenizer, questions: Sequence[arith.Question], max_new_tokens: int) -> list[bool]:
    """Greedy answers, verified, one flag per question."""
    completions = generate(model, tokenizer, [q.prompt for q in questions], max_new_tokens=max_new_tokens)
    return [q.check(c) for c, q in zip(completions, questions)]


def accuracy(model, tokenizer, questions: Sequence[arith.Question], max_new_tokens: int) -> float:
    flags = correct_flags(model, tokenizer, questions, max_new_tokens)
    return sum(flags) / len(flags)


def generate_vllm(python: str, jobs_dir: Path, checkpoint: str | Path, questions: Sequence[str], *,
                  max_new_tokens: int, timeout_s: float = 1800) -> list[str]:
    """Greedy completions from ``jobs/generate_vllm.py`` run by ``python`` (an environment with vLLM).

    Prompts are rendered here with the checkpoint's chat template, so both engines see the same tokens.
    RuntimeError names the cause when vLLM fails.
    """
    import json
    import subprocess
    import tempfile

    from transformers import AutoTokenizer

    from ctpipe.tinymodel import render_prompt

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    with tempfile.TemporaryDirectory(prefix="ctpipe-vllm-") as tmp:
        src, out = Path(tmp) / "prompts.jsonl", Path(tmp) / "completions.jsonl"
        src.write_text("".join(json.dumps({"prompt": render_prompt(tokenizer, q)}) + "\n" for q in questions))
        cmd = [python, str(jobs_dir / "generate_vllm.py"), "--model", str(checkpoint), "--prompts", str(src),
               "--out", str(out), "--max-tokens", str(max_new_tokens)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"vLLM generation took over {timeout_s:.0f} s") from None
        if done.returncode != 0 or not out.exists():
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            raise RuntimeError(f"vLLM generation exited {done.returncode}: {tail}")
        completions = [json.loads(line)["completion"] for line in out.read_text().splitlines()]
    if len(completions) != len(questions):
        raise RuntimeError(f"vLLM returned {len(completions)} completions for {len(questions)} prompts")
    return completions
