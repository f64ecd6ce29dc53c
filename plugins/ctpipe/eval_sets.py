"""The evaluation items a dataset is decontaminated against: the task's held-out questions, and the
texts of the eval sets ``dataset.eval_sets`` names (any format :func:`sources.read` reads).

An item gives every text it holds: ``prompt``, ``question`` and ``problem`` (the MATH dataset's)
as strings, and a chat (``messages``, or a ``prompt`` in TRL's conversational layout) as its user
messages, one text, as a trace's chat is searched. A chat's system prompt is left out: eval sets
share one boilerplate prompt with production, and a short one would make every chat contaminated.
"""

from __future__ import annotations

import logging

from ctpipe import arith, dedup, sources
from ctpipe.config import DatasetConfig, TaskConfig

log = logging.getLogger(__name__)

FIELDS = ("prompt", "question", "problem", "messages")


def items(task: TaskConfig, dataset: DatasetConfig) -> tuple[str, ...]:
    """Every item's texts, each once and sorted: their order and repeats change no verdict, nor the version."""
    found = set(arith.splits(task).held_out_prompts())
    for uri in dataset.eval_sets:
        short: list[tuple[int, str]] = []  # (words, text) of those shorter than n words
        for item in sources.read(uri, "eval set"):
            texts = _texts(item.doc)
            if not texts:
                why = f" ({item.reason}: {item.detail})" if item.reason else ""
                raise sources.SourceError(f"eval set {uri!r} line {item.position}: no text in "
                                          f"{'/'.join(FIELDS)}{why}")
            found.update(texts)
            lengths = [(len(dedup.words(t)), t) for t in texts]
            short += [(n, t) for n, t in lengths if 0 < n < dataset.decontamination_ngram]  # "???": no words
        if short:  # "Why?" would quarantine every prompt holding the word
            log.warning("%d texts of eval set %s are shorter than %d words: a chat holding one whole is "
                        "contaminated (the shortest: %r)", len(short), uri, dataset.decontamination_ngram,
                        min(short)[1])
    return tuple(sorted(found))


def _texts(doc) -> list[str]:
    if isinstance(doc, str):  # a line of a bare string
        return [doc] if doc.strip() else []
    if not isinstance(doc, dict):
        return []
    out = []
    for field in FIELDS:
        value = doc.get(field)
        text = value if isinstance(value, str) else _user_text(value) if isinstance(value, list) else None
        if text and text.strip():
            out.append(text)
    return out


def _user_text(messages: list) -> str | None:
    """A chat's user messages as one text (a content of text parts, joined); None where it is no chat."""
    if not all(isinstance(m, dict) for m in messages):
        return None
    texts = []
    for m in messages:
        if m.get("role") != "user":
            continue
        content = m.get("content")
        parts = content if isinstance(content, list) else [content]
        texts += [p if isinstance(p, str) else p.get("text") for p in parts
                  if isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("text"), str))]
    return " ".join(texts)
