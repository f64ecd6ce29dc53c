"""The embedded default's base model, built here, deterministically, with no download.

A character-level tokenizer and a small Llama are pre-trained with plain SFT on
the arithmetic task, the learning rate annealed to zero, and the build checks
that dev accuracy has levelled off by the end. The result is cached under
``<home>/models/base-<hash>``; the hash covers the recipe and the task, so the
model is rebuilt only when either changes, and the same recipe gives the same
weights (one thread, fixed seeds).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import string
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ctpipe import arith
from ctpipe.atomic import atomic_dir
from ctpipe.config import BaseModelRecipe, TaskConfig

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

log = logging.getLogger(__name__)

# Bump when the build code changes in a way the recipe does not capture.
BUILD_VERSION = 2

PAD, UNK, BOS = "<pad>", "<unk>", "<bos>"
USER, ASSISTANT, SYSTEM, END = "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"
SPECIAL_TOKENS = (PAD, UNK, BOS, USER, ASSISTANT, SYSTEM, END)
CHARS = string.printable[:95]  # digits, letters, punctuation, space

CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}" + SYSTEM + "{{ m['content'] }}"
    "{% elif m['role'] == 'user' %}" + USER + "{{ m['content'] }}"
    "{% elif m['role'] == 'assistant' %}" + ASSISTANT + "{{ m['content'] }}" + END + "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)


def recipe_hash(recipe: BaseModelRecipe, task: TaskConfig) -> str:
    blob = json.dumps(
        {"v": BUILD_VERSION, "recipe": recipe.model_dump(mode="json"), "task": task.model_dump(mode="json")},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer with a chat template (TRL and vLLM both need one)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate((*SPECIAL_TOKENS, *CHARS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=END,
        additional_special_tokens=[USER, ASSISTANT, SYSTEM],
        padding_side="left",
        model_max_length=256,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def render_prompt(tokenizer, question: str) -> str:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )


def build_model(recipe: BaseModelRecipe, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_heads,
        head_dim=recipe.head_dim,
        max_position_embeddings=recipe.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config)


def _sft_batch(tokenizer, examples: list[tuple[str, str]]):
    """Tokens of (question, answer) pairs, with the loss only on the answer and its end token."""
    prompts = [render_prompt(tokenizer, question) for question, _ in examples]
    full = [p + answer + END for p, (_, answer) in zip(prompts, examples)]
    enc = tokenizer(full, return_tensors="pt", padding=True, add_special_tokens=False)
    labels = enc["input_ids"].clone()
    labels[enc["attention_mask"] == 0] = -100
    for i, p in enumerate(prompts):
        n_prompt = len(tokenizer(p, add_special_tokens=False)["input_ids"])
        pad = int((enc["attention_mask"][i] == 0).sum())
        labels[i, : pad + n_prompt] = -100
    return enc["input_ids"], enc["attention_mask"], labels


def pretrain(recipe: BaseModelRecipe, task: TaskConfig, out_dir: Path) -> dict:
    """SFT from scratch, cosine-annealed to zero; save to ``out_dir`` once dev accuracy has levelled off."""
    import math

    import torch

    from ctpipe.generation import accuracy

    torch.manual_seed(recipe.seed)
    # One thread keeps the float reduction order, and so the weights, the same on every machine, with
    # the AVX2 kernels that importing ctpipe pins (AVX-512 ones sum in another order).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tokenizer = build_tokenizer()
        model = build_model(recipe, tokenizer)
        opt = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=0.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / recipe.steps)))
        rng = random.Random(recipe.seed)
        dev = list(arith.splits(task).dev[: recipe.eval_questions])
        curve: dict[int, float] = {}
        t0 = time.monotonic()
        for step in range(1, recipe.steps + 1):
            model.train()
            batch = [(q.prompt, q.sample_answer(rng)) for q in arith.sample_train(task, recipe.batch_size, rng)]
            ids, mask, labels = _sft_batch(tokenizer, batch)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            if step % recipe.eval_every == 0 or step == recipe.steps:
                curve[step] = accuracy(model, tokenizer, dev, max_new_tokens=8)
                log.info("base model step %d loss %.4f dev accuracy %.3f", step, loss.item(), curve[step])
    finally:
        torch.set_num_threads(threads)
    plateau = settled(curve, recipe)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    info = {
        "steps": recipe.steps,
        "dev_accuracy": curve[recipe.steps],
        "plateau": list(plateau),
        "dev_accuracy_by_step": curve,
        "seconds": round(time.monotonic() - t0, 1),
    }
    (out_dir / "build.json").write_text(json.dumps(info, indent=2))
    return info


def settled(curve: dict[int, float], recipe: BaseModelRecipe) -> tuple[float, float]:
    """The dev accuracy range over the recipe's last ``plateau_fraction`` of steps; an error if it is too wide.

    >>> r = BaseModelRecipe(steps=1000, plateau_fraction=0.2, plateau_tolerance=0.03)
    >>> settled({600: 0.5, 800: 0.90, 900: 0.91, 1000: 0.92}, r)
    (0.9, 0.92)
    """
    tail = [acc for step, acc in curve.items() if step >= recipe.steps - int(recipe.steps * recipe.plateau_fraction)]
    if not tail or max(tail) - min(tail) > recipe.plateau_tolerance:
        span = f"{min(tail):.3f}..{max(tail):.3f}" if tail else "unmeasured"
        raise RuntimeError(
            f"the base model did not settle: dev accuracy {span} over the last {recipe.plateau_fraction:.0%} of "
            f"its {recipe.steps} steps exceeds plateau_tolerance={recipe.plateau_tolerance}; give the base_model "
            f"recipe more steps (or eval_every fewer, so the plateau is measured)"
        )
    return min(tail), max(tail)


def ensure_base_model(recipe: BaseModelRecipe, task: TaskConfig, models_dir: Path) -> Path:
    """The cached base model directory, built first if the recipe is new."""
    final = models_dir / f"base-{recipe_hash(recipe, task)}"
    if (final / "build.json").exists():
        return final
    with atomic_dir(final) as tmp:  # readers see a whole model or none; a concurrent identical build wins
        (tmp / "recipe.json").write_text(
            json.dumps({"recipe": recipe.model_dump(mode="json"), "task": task.model_dump(mode="json")}, indent=2)
        )
        info = pretrain(recipe, task, tmp)
        log.info("built base model %s: %s", final.name, info)
    return final
