"""What an eval set gives to decontaminate against."""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctpipe import arith, eval_sets, sources
from ctpipe.config import DatasetConfig, Settings, TaskConfig

HELD_OUT = arith.splits(TaskConfig()).held_out_prompts()


def items(tmp_path, *docs, name="eval.jsonl") -> list[str]:
    (tmp_path / name).write_text("".join(d if isinstance(d, str) else json.dumps(d) + "\n" for d in docs))
    return [t for t in eval_sets.items(TaskConfig(), DatasetConfig(eval_sets=[str(tmp_path / name)]))
            if t not in HELD_OUT]


def test_every_text_of_an_item_counts(tmp_path):
    """An item with an instruction and a question gives both; a chat (TRL's conversational layout, or
    messages) its user messages as one text, its system prompt left out; MATH's problem too."""
    chat = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Solve it:"},
            {"role": "assistant", "content": "Which?"}, {"role": "user", "content": [{"type": "text", "text": "x + 1 = 2"}]}]
    assert items(tmp_path, {"prompt": "Answer the following question.", "question": "What is the capital of Peru?"},
                 {"prompt": chat}, {"messages": chat[:2]}, {"problem": "Find x if 2x = 4.", "solution": "2"},
                 {"prompt": "   ", "question": "Who wrote Hamlet?"}) == sorted([
        "Answer the following question.", "What is the capital of Peru?", "Solve it: x + 1 = 2", "Solve it:",
        "Find x if 2x = 4.", "Who wrote Hamlet?"])


def test_order_and_repeats_change_nothing(tmp_path):
    a = items(tmp_path, {"prompt": "b"}, {"prompt": "a"}, {"prompt": "b"}, name="a.jsonl")
    assert a == items(tmp_path, {"prompt": "a"}, {"prompt": "b"}, name="b.jsonl") == ["a", "b"]


@pytest.mark.parametrize("line, why", [
    ('{"prompt": "ok"}\n{"answer": "no text"}\n', r"line 2: no text in prompt/question/problem/messages$"),
    ('{"prompt": "ok"}\n{"prompt": "cut\n', r"line 2: no text in prompt/question/problem/messages \(invalid_json: "),
    ('{"prompt": "   "}\n', r"line 1: no text"),
])
def test_an_item_with_no_text_fails_naming_its_line_and_why(tmp_path, line, why):
    with pytest.raises(sources.SourceError, match=why):
        items(tmp_path, line)


def test_eval_sets_in_other_formats_are_read(tmp_path):
    pq.write_table(pa.table({"question": ["Who wrote Hamlet?"]}), tmp_path / "eval.parquet")
    (tmp_path / "eval.csv").write_text("prompt\nWhat is the capital of Peru?\n")
    found = eval_sets.items(TaskConfig(), DatasetConfig(eval_sets=[str(tmp_path / "eval.parquet"), str(tmp_path / "eval.csv")]))
    assert {"Who wrote Hamlet?", "What is the capital of Peru?"} <= set(found)


def test_short_items_are_warned_of_with_the_shortest(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, "ctpipe.eval_sets"):
        items(tmp_path, {"prompt": "Why?"}, {"prompt": "What is the capital of Peru?"},
              {"prompt": " ".join(["word"] * 13)})
    assert "2 texts of eval set" in caplog.text and "shorter than 13 words" in caplog.text and "'Why?'" in caplog.text


def test_eval_sets_from_the_environment_are_separated_by_commas_or_a_json_list(monkeypatch):
    monkeypatch.setenv("CTPIPE_DATASET__EVAL_SETS", "/data/a.jsonl, s3://bucket/b.parquet")
    assert Settings().dataset.eval_sets == ["/data/a.jsonl", "s3://bucket/b.parquet"]
    monkeypatch.setenv("CTPIPE_DATASET__EVAL_SETS", '["/data/a,1.jsonl"]')
    assert Settings().dataset.eval_sets == ["/data/a,1.jsonl"]
