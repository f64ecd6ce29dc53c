"""Batched generation with transformers for the tiny model (simulation and evaluation)."""

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
    """Greedy answers scored against the references, one flag per question."""
    completions = generate(model, tokenizer, [q.prompt for q in questions], max_new_tokens=max_new_tokens)
    return [arith.correctness(c, q.answer) == 1.0 for c, q in zip(completions, questions)]


def accuracy(model, tokenizer, questions: Sequence[arith.Question], max_new_tokens: int) -> float:
    flags = correct_flags(model, tokenizer, questions, max_new_tokens)
    return sum(flags) / len(flags)
