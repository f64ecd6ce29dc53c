"""The fast path of our schema's lines agrees with the exact one, line for line."""

from __future__ import annotations

import json

import pytest

from ctpipe import columns, traces

BASE = {
    "trace_id": "tr-1",
    "start_time": "2026-11-22T10:00:00+00:00",
    "end_time": "2026-11-22T10:00:01.5+00:00",
    "model": {"name": "assistant", "version": "v7"},
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 plus 3?"}],
    "completion": "5",
    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    "latency_ms": 900,
    "feedback": {"thumb": "up", "rating": None},
    "reference_answer": "5",
    "scores": [{"name": "judge", "value": 0.5, "source": "eval"}],
}


def line(**changes) -> bytes:
    doc = {**BASE, **changes}
    return json.dumps({k: v for k, v in doc.items() if v is not ...}, ensure_ascii=False).encode()


LINES = {
    "plain": line(),
    "offset and microseconds": line(start_time="2026-11-22T12:00:00.123456+02:00", end_time="2026-11-22T10:00:00.5Z"),
    "no feedback": line(feedback=...),
    "feedback null": line(feedback=None),
    "feedback empty": line(feedback={}),
    "rating": line(feedback={"rating": 4}),
    "rating too low": line(feedback={"rating": 0}),
    "thumb sideways": line(feedback={"thumb": "sideways"}),
    "no scores": line(scores=...),
    "scores null": line(scores=None),
    "score without source": line(scores=[{"name": "judge", "value": 1}]),
    "score source null": line(scores=[{"name": "judge", "value": 1, "source": None}]),
    "score without name": line(scores=[{"value": 1, "source": "eval"}]),
    "score value null, label": line(scores=[{"name": "tone", "value": None, "label": "kind", "source": "annotation"}]),
    "no reference": line(reference_answer=...),
    "extra fields": line(metadata={"feedback": 1}, user="u1"),
    "naive time": line(start_time="2026-11-22T10:00:00"),
    "end before start": line(end_time="2026-11-22T09:59:59+00:00"),
    "February 30th": line(start_time="2026-02-30T10:00:00Z"),
    "nanoseconds": line(start_time="2026-11-22T10:00:00.123456789Z"),
    "lower-case t": line(start_time="2026-11-22t10:00:00Z"),
    "empty id": line(trace_id=""),
    "numeric id": line(trace_id=7),
    "unnamed model": line(model={"name": "", "version": "v"}),
    "no messages": line(messages=[]),
    "unknown role": line(messages=[{"role": "bot", "content": "hi"}, {"role": "user", "content": "x"}]),
    "no user": line(messages=[{"role": "system", "content": "hi"}]),
    "null content": line(messages=[{"role": "user", "content": None}]),
    "blank completion": line(completion="  \t"),
    "ideographic blank": line(completion="\u3000"),
    "separator blank": line(completion="\x1c"),
    "unicode completion": line(completion="五"),
    "negative tokens": line(usage={"prompt_tokens": -1, "completion_tokens": 1, "total_tokens": 0}),
    "float tokens": line(usage={"prompt_tokens": 1.0, "completion_tokens": 1, "total_tokens": 2}),
    "no usage": line(usage=...),
    "negative latency": line(latency_ms=-1),
    "huge latency": b'{"trace_id":"t","latency_ms":1e999}',
    "duplicate key": line()[:-1] + b', "completion": "6"}',
    "bad utf-8": line(completion="BAD").replace(b"BAD", b"\xff"),
    "lone surrogate": line(completion="x").replace(b'"x"', b'"\\ud800"'),
    "not an object": b'["tr-1"]',
    "truncated": line()[:40],
}


def exact(raw: bytes) -> dict | None:
    try:
        rec = traces.decode(raw)
    except traces.InvalidTrace:
        return None
    return columns.from_records([("f", 1, rec)]).drop_columns(["source_file", "source_line"]).to_pylist()[0]


@pytest.mark.parametrize("name", LINES)
def test_a_line_the_fast_path_takes_is_the_row_the_exact_path_makes(name):
    raw = LINES[name]
    got = columns.parse_lines([raw])
    fast = got[0].to_pylist() if got is not None else []
    if fast:
        assert fast == [exact(raw)], name
    assert len(fast) <= 1


def test_every_line_of_a_block_gets_the_same_answer_together():
    lines = list(LINES.values())
    got = columns.parse_lines(lines)
    if got is not None:  # a block pyarrow refuses goes to the exact path whole, which is fine too
        table, index = got
        for row, i in zip(table.to_pylist(), index.tolist()):
            assert row == exact(lines[i])


def test_plain_records_take_the_fast_path():
    clean = [name for name in ("plain", "offset and microseconds", "no feedback", "feedback empty", "rating", "no scores",
                               "score value null, label", "no reference", "extra fields", "unicode completion")]
    table, index = columns.parse_lines([LINES[n] for n in clean])
    assert index.tolist() == list(range(len(clean)))


def test_microseconds_of_any_aware_datetime_are_exact():
    import pendulum

    from datetime import datetime, timedelta, timezone

    plain = datetime(2026, 11, 22, 12, 0, 0, 123457, tzinfo=timezone(timedelta(hours=2)))
    expected = 1_795_341_600_123_457
    assert columns.micros(plain) == expected
    assert columns.micros(pendulum.instance(plain)) == expected  # Airflow hands the interval as pendulum times
