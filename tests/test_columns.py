"""The fast paths (our schema's lines and Parquet batches, OpenAI logs, OTLP exports) agree with the exact path, row for row."""

from __future__ import annotations

import json
from datetime import datetime

import numpy as np
import pyarrow as pa
import pytest

from ctpipe import columns, formats, sources, traces
from ctpipe.datasets import MESSAGES, SCORES
from tests.conftest import mutated
from tests.test_formats import (BEDROCK, GEMINI_RESPONSE, HELICONE, VERTEX, PORTKEY, RESPONSES_REQUEST, RESPONSES_RESPONSE,
                                SPEND_LOG, kv, otlp)

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


# An assistant's turn of tool calls and the tool's answer, as OpenAI's messages hold them.
CALLED = [{"role": "user", "content": "Weather in Oslo?"},
          {"role": "assistant", "content": "", "tool_calls": [
              {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]},
          {"role": "tool", "content": "4 C, rain", "tool_call_id": "c1"}]


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
    "an end past the year 9999 in UTC": line(end_time="9999-12-31T23:59:59-01:00"),
    "a start before the year 1 in UTC": line(start_time="0001-01-01T00:30:00+01:00"),
    "the year 0": line(start_time="0000-06-01T00:00:00Z"),
    "empty id": line(trace_id=""),
    "numeric id": line(trace_id=7),
    "unnamed model": line(model={"name": "", "version": "v"}),
    "no messages": line(messages=[]),
    "unknown role": line(messages=[{"role": "bot", "content": "hi"}, {"role": "user", "content": "x"}]),
    "no user": line(messages=[{"role": "system", "content": "hi"}]),
    "an assistant's last turn": line(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}]),
    "null content": line(messages=[{"role": "user", "content": None}]),
    "a tool call": line(messages=[*CALLED, {"role": "user", "content": "And tomorrow?"}]),
    "a function call": line(messages=[{"role": "assistant", "content": "", "function_call": {"name": "w"}},
                                      {"role": "user", "content": "So?"}]),
    "an earlier refusal": line(messages=[*BASE["messages"], {"role": "assistant", "content": "", "refusal": "I can't."},
                                         {"role": "user", "content": "Please?"}]),
    "audio": line(messages=[*BASE["messages"], {"role": "assistant", "content": "", "audio": {"id": "a1"}},
                            {"role": "user", "content": "Please?"}]),
    "a LangChain tool call": line(messages=[{"role": "assistant", "content": "", "additional_kwargs": {"tool_calls": [{"id": "c"}]}},
                                            {"role": "user", "content": "So?"}]),
    "a LangChain call that did not parse": line(messages=[{"role": "assistant", "content": "", "invalid_tool_calls": [{"id": "c"}]},
                                                          {"role": "user", "content": "So?"}]),
    "LangChain without calls": line(messages=[{"role": "assistant", "content": "", "additional_kwargs": {"tool_calls": []},
                                               "invalid_tool_calls": []}, {"role": "user", "content": "So?"}]),
    "tool calls null or empty": line(messages=[{"role": "assistant", "content": "", "tool_calls": None},
                                               {"role": "assistant", "content": "", "tool_calls": [], "function_call": {}},
                                               {"role": "user", "content": "So?"}]),
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
    return row_of(rec)


def row_of(rec: traces.TraceRecord) -> dict:
    """A record as the row the exact path makes of it (its place aside)."""
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
    clean = [name for name in ("plain", "offset and microseconds", "no feedback", "feedback null", "feedback empty", "rating",
                               "no scores", "scores null",
                               "score value null, label", "no reference", "extra fields", "unicode completion")]
    table, index = columns.parse_lines([LINES[n] for n in clean])
    assert index.tolist() == list(range(len(clean)))


def test_a_message_holding_tool_calls_audio_or_a_refusal_is_read_as_every_other_format_reads_it():
    """Our schema reads a prompt's messages as OpenAI's are read in every other format: tool calls
    refused (a chat read without them, an empty assistant turn, then a tool's answer to nothing, is
    not the one the model was served), audio refused, a refusal the text of its empty turn."""
    for name, reason in (("a tool call", "tool_call_in_prompt"), ("a function call", "tool_call_in_prompt"),
                         ("a LangChain tool call", "tool_call_in_prompt"),
                         ("a LangChain call that did not parse", "tool_call_in_prompt"), ("audio", "non_text_content")):
        assert columns.parse_lines([LINES[name]]) is None
        with pytest.raises(traces.InvalidTrace) as e:
            traces.decode(LINES[name])
        assert e.value.reason == reason and "`messages[" in e.value.detail
    assert columns.parse_lines([LINES["an earlier refusal"]]) is None
    assert exact(LINES["an earlier refusal"])["messages"][2] == {"role": "assistant", "content": "I can't."}
    assert batch_exact(BATCHES["an earlier refusal"])[0]["messages"][2] == {"role": "assistant", "content": "No."}
    assert columns.parse_batch(BATCHES["an earlier refusal"])[1].tolist() == [1]
    assert exact(LINES["tool calls null or empty"])["messages"][-1] == {"role": "user", "content": "So?"}
    assert exact(LINES["LangChain without calls"])["messages"][0] == {"role": "assistant", "content": ""}
    (row,) = batch_exact(BATCHES["a tool call"])[:1]
    assert row is None and columns.parse_batch(BATCHES["a tool call"])[1].tolist() == [1]
    assert columns.parse_batch(BATCHES["tool calls null"])[1].tolist() == [0, 1]


def test_microseconds_of_any_aware_datetime_are_exact():
    import pendulum

    from datetime import datetime, timedelta, timezone

    plain = datetime(2026, 11, 22, 12, 0, 0, 123457, tzinfo=timezone(timedelta(hours=2)))
    expected = 1_795_341_600_123_457
    assert columns.micros(plain) == expected
    assert columns.micros(pendulum.instance(plain)) == expected  # Airflow hands the interval as pendulum times


# OpenAI chat-completion logs: the fast path agrees with the reader (formats.from_openai) and the
# trace's validation, line for line.
OPENAI = {
    "request": {"model": "assistant", "messages": [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "What is 2 plus 3?"}]},
    "response": {"id": "chatcmpl-1", "object": "chat.completion", "created": 1795340000, "model": "assistant",
                 "system_fingerprint": "fp_1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "5"},
                                                             "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 19, "completion_tokens": 2, "total_tokens": 21}},
    "metadata": {"model_version": "v7", "thumb": "up"},
    "latency_ms": 41.5,
}


def openai_line(*changes: tuple[str, object]) -> bytes:
    """OPENAI with each (dotted path, value) set; value ... removes the key."""
    return line_of(OPENAI, changes)


def line_of(base: dict, changes: tuple[tuple[str, object], ...]) -> bytes:
    """``base`` as a JSON line with each (dotted path, value) of ``changes`` set; value ... removes the key."""
    doc = json.loads(json.dumps(base))
    for path, value in changes:
        *parents, last = path.split(".")
        at = doc
        for key in parents:
            at = at[int(key)] if isinstance(at, list) else at[key]
        if value is ...:
            del at[last]
        elif isinstance(at, list):
            at[int(last)] = value
        else:
            at[last] = value
    return json.dumps(doc, ensure_ascii=False).encode()


PREFILL = [{"role": "user", "content": "What is 2 plus 3?"}, {"role": "assistant", "content": "The sum is"}]
TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
OPENAI_LINES = {
    "plain": openai_line(),
    "no metadata": openai_line(("metadata", ...)),
    "metadata null": openai_line(("metadata", None)),
    "metadata empty": openai_line(("metadata", {})),
    "a stored completion's metadata": openai_line(("metadata", ...), ("response.metadata", {"thumb": "down", "rating": "2"})),
    "the request's metadata": openai_line(("metadata", None), ("request.metadata", {"thumb": "down"})),
    "version empty, fingerprint": openai_line(("metadata.model_version", "")),
    "no version, fingerprint null": openai_line(("metadata.model_version", ...), ("response.system_fingerprint", None)),
    "fingerprint empty": openai_line(("metadata.model_version", None), ("response.system_fingerprint", "")),
    "thumb sideways": openai_line(("metadata.thumb", "sideways")),
    "rating": openai_line(("metadata.rating", 4)),
    "rating too high": openai_line(("metadata.rating", 5.5)),
    "no usage": openai_line(("response.usage", ...)),
    "usage null": openai_line(("response.usage", None)),
    "usage empty": openai_line(("response.usage", {})),
    "usage without total": openai_line(("response.usage.total_tokens", ...)),
    "usage count null": openai_line(("response.usage.total_tokens", None)),
    "negative tokens": openai_line(("response.usage.prompt_tokens", -1)),
    "no latency": openai_line(("latency_ms", ...)),
    "latency null": openai_line(("latency_ms", None)),
    "negative latency": openai_line(("latency_ms", -1)),
    "whole latency": openai_line(("latency_ms", 900)),
    "half a microsecond": openai_line(("latency_ms", 0.0005)),
    "a microsecond and a half": openai_line(("latency_ms", 0.0015)),
    "latency of centuries": openai_line(("latency_ms", 1e16)),
    "created at the epoch": openai_line(("response.created", 0)),
    "created before the epoch": openai_line(("response.created", -86400)),
    "created in the year 3000": openai_line(("response.created", 32503680000)),
    "two choices": openai_line(("response.choices", [OPENAI["response"]["choices"][0]] * 2)),
    "three choices, indexed": openai_line(("response.choices", [
        {**OPENAI["response"]["choices"][0], "index": i, "message": {"role": "assistant", "content": str(5 + i)}}
        for i in (2, 0, 1)])),
    "two choices, unindexed": openai_line(("response.choices", [
        {"message": {"role": "assistant", "content": a}, "finish_reason": "stop"} for a in ("5", "five")])),
    "two choices, one indexed": openai_line(("response.choices", [
        {"message": {"role": "assistant", "content": "5"}, "finish_reason": "stop"},
        {"index": 7, "message": {"role": "assistant", "content": "6"}, "finish_reason": "length"}])),
    "two choices, no usage": openai_line(("response.choices", [OPENAI["response"]["choices"][0]] * 2), ("response.usage", ...)),
    "two choices, a count negative": openai_line(("response.choices", [OPENAI["response"]["choices"][0]] * 2),
                                                 ("response.usage.completion_tokens", -1)),
    "two choices, index null": openai_line(("response.choices", [{**OPENAI["response"]["choices"][0], "index": None}] * 2)),
    "two choices, index as text": openai_line(("response.choices", [{**OPENAI["response"]["choices"][0], "index": "a"}] * 2)),
    "two choices, one filtered": openai_line(("response.choices", [
        OPENAI["response"]["choices"][0], {**OPENAI["response"]["choices"][0], "finish_reason": "content_filter"}])),
    "two choices, one blank": openai_line(("response.choices", [
        OPENAI["response"]["choices"][0], {**OPENAI["response"]["choices"][0], "message": {"role": "assistant", "content": " "}}])),
    "two choices, one a tool call": openai_line(("response.choices", [
        OPENAI["response"]["choices"][0], {"index": 1, "message": {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}])),
    "no choices": openai_line(("response.choices", [])),
    "choices null": openai_line(("response.choices", None)),
    "choice null": openai_line(("response.choices", [None])),
    "answer null": openai_line(("response.choices.0.message", None)),
    "answer content null": openai_line(("response.choices.0.message.content", None)),
    "answer blank": openai_line(("response.choices.0.message.content", " \u3000")),
    "answer without role": openai_line(("response.choices.0.message.role", ...)),
    "no messages": openai_line(("request.messages", [])),
    "messages null": openai_line(("request.messages", None)),
    "a message null": openai_line(("request.messages.0", None)),
    "system content null": openai_line(("request.messages.0.content", None)),
    "system without content": openai_line(("request.messages.0.content", ...)),
    "user content null": openai_line(("request.messages.1.content", None)),
    "unknown role": openai_line(("request.messages.0.role", "bot")),
    "no role": openai_line(("request.messages.0.role", ...)),
    "no user": openai_line(("request.messages.1.role", "assistant")),
    "an assistant's last turn": openai_line(("request.messages", PREFILL)),
    "an assistant's last turn, continued": openai_line(("request.messages", PREFILL), ("request.continue_final_message", True)),
    "an assistant's last turn, a prefix": openai_line(("request.messages", [PREFILL[0], {**PREFILL[1], "prefix": True}])),
    "request null": openai_line(("request", None), ("messages", OPENAI["request"]["messages"])),
    "flat": json.dumps({**OPENAI["response"], "messages": OPENAI["request"]["messages"]}).encode(),
    "empty id": openai_line(("response.id", "")),
    "empty model": openai_line(("response.model", "")),
    "no model": openai_line(("response.model", ...)),
    "no created": openai_line(("response.created", ...)),
    "also OTLP": openai_line(("resourceSpans", [])),
    "also ours": openai_line(("trace_id", "t"), ("completion", "5")),
    "unicode": openai_line(("response.choices.0.message.content", "五")),
    "answer a tool call": openai_line(("response.choices.0.message.content", None), ("response.choices.0.message.tool_calls", [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}])),
    "answer a refusal": openai_line(("response.choices.0.message.content", None),
                                    ("response.choices.0.message.refusal", "I can't help with that.")),
    "answer filtered": openai_line(("response.choices.0.finish_reason", "content_filter")),
    "answer text and a tool call": openai_line(("response.choices.0.message.tool_calls", [TOOL_CALL]),
                                               ("response.choices.0.finish_reason", "tool_calls")),
    "finish reason null": openai_line(("response.choices.0.finish_reason", None)),
    "a tool call in the prompt": openai_line(("request.messages", [
        *OPENAI["request"]["messages"], {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"}, {"role": "user", "content": "Sure?"}])),
    "a function call in the prompt": openai_line(("request.messages", [
        *OPENAI["request"]["messages"], {"role": "assistant", "content": "", "function_call": TOOL_CALL["function"]},
        {"role": "function", "name": "add", "content": "5"}, {"role": "user", "content": "Sure?"}])),
    "no tool calls in the prompt": openai_line(("request.messages", [
        *OPENAI["request"]["messages"], {"role": "assistant", "content": "5", "tool_calls": []},
        {"role": "user", "content": "Sure?"}])),
    "Helicone's": json.dumps(HELICONE).encode(),  # the response under its own key: not a log the fast path reads
    "Portkey's": json.dumps(PORTKEY).encode(),  # its own time and latency: the reader's
    "Portkey's, failed, provider null": json.dumps({**PORTKEY, "ai_org": None, "response_status_code": 500}).encode(),
    "the Responses API's": json.dumps({"request": RESPONSES_REQUEST, "response": RESPONSES_RESPONSE}).encode(),
    "LiteLLM's spend log": json.dumps(SPEND_LOG).encode(),  # bodies as JSON text, its own times: the reader's
    "LiteLLM's spend log, bodies as objects": json.dumps({**SPEND_LOG, "proxy_server_request": OPENAI["request"],
                                                          "response": OPENAI["response"]}).encode(),
}
# Lines pyarrow refuses, so that their block goes to the exact path whole.
OPENAI_REFUSED = {
    # Bytes that are not UTF-8 in a text the shape check skips: pyarrow's reader keeps them as they are.
    "an answer of bytes not UTF-8": openai_line(("response.choices.0.message.content", "fiveXFF")).replace(b"XFF", b"\xff"),
    "a prompt of a surrogate's bytes": openai_line(("request.messages.1.content", "twoXS")).replace(b"XS", b"\xed\xa0\xbd"),
    "created as a float": openai_line(("response.created", 1795340000.25)),
    "content as parts": openai_line(("request.messages.1.content", [{"type": "text", "text": "What is 2 plus 3?"}])),
    "version as a number": openai_line(("metadata.model_version", 7)),
    "latency as text": openai_line(("latency_ms", "41")),
    "usage as text": openai_line(("response.usage", "many")),
    "duplicate key": openai_line().replace(b'"thumb": "up"', b'"thumb": "up", "thumb": "down"'),
    "finish reason as a number": openai_line(("response.choices.0.finish_reason", 1)),
}


def openai_exact(raw: bytes) -> list[dict] | None:
    """The rows the reader makes of a log, a choice each; None where it refuses any of its choices."""
    try:
        docs = list(formats.normalize(traces.loads(raw), "auto"))
        recs = [traces.convert(d) for d in docs if not isinstance(d, formats.FormatError)]
    except (traces.InvalidTrace, formats.FormatError):
        return None
    return [row_of(r) for r in recs] if len(recs) == len(docs) else None


@pytest.mark.parametrize("name", OPENAI_LINES)
def test_an_openai_log_the_fast_path_takes_is_the_row_the_reader_makes(name):
    raw = OPENAI_LINES[name]
    got = columns.parse_openai_lines([raw])
    fast = got[0].to_pylist() if got is not None else []
    if fast:
        assert fast == openai_exact(raw), name


def by_line(got: tuple[pa.Table, np.ndarray]) -> dict[int, list[dict]]:
    """A fast path's rows by the line each came from, in order (a log of several choices makes several)."""
    rows: dict[int, list[dict]] = {}
    for row, i in zip(got[0].to_pylist(), got[1].tolist()):
        rows.setdefault(i, []).append(row)
    return rows


def as_rows(exact: dict | list[dict] | None) -> list:
    """What an exact path makes of a line (a row, or a list of them), as a list."""
    return exact if isinstance(exact, list) else [exact]


def taken_together(named: dict[str, bytes], parse, exact) -> set[str]:
    """The names of the lines that ``parse`` takes, given all at once; the rows taken of each line are
    ``exact``'s (a row, or a list of them)."""
    names, lines = list(named), list(named.values())
    taken = by_line(parse(lines))
    for i, rows in taken.items():
        assert rows == as_rows(exact(lines[i])), names[i]
    return {names[i] for i in taken}


def test_every_openai_log_of_a_block_gets_the_same_answer_together_and_plain_ones_take_the_fast_path():
    taken = taken_together(OPENAI_LINES, columns.parse_openai_lines, openai_exact)
    assert {"plain", "no metadata", "metadata null", "version empty, fingerprint", "rating", "no usage", "usage null",
            "no latency", "whole latency", "half a microsecond", "created at the epoch", "answer without role",
            "system content null", "also ours", "unicode", "finish reason null", "two choices",
            "three choices, indexed", "two choices, unindexed", "two choices, one indexed", "two choices, no usage"} <= taken
    assert not taken & {"two choices, a count negative", "two choices, index null", "two choices, index as text",
                        "two choices, one filtered", "two choices, one blank", "two choices, one a tool call",
                        "a message null", "request null", "flat", "also OTLP", "usage count null",
                        "answer a tool call", "answer a refusal", "answer filtered", "a tool call in the prompt",
                        "answer text and a tool call",
                        "a function call in the prompt", "Helicone's", "Portkey's",
                        "Portkey's, failed, provider null", "the Responses API's", "LiteLLM's spend log",
                        "LiteLLM's spend log, bodies as objects"}
    for name, raw in OPENAI_REFUSED.items():
        assert columns.parse_openai_lines([OPENAI_LINES["plain"], raw]) is None, name


def test_logs_of_several_choices_take_the_fast_path_up_to_a_blocks_worth_of_their_prompts_copies(monkeypatch):
    """Each choice's row carries its log's prompt: past _COPIES_BYTES of such copies, the logs of
    several choices are left to the exact path (which makes rows a piece at a time); logs of one
    choice are taken all the same, and no log of none makes a row."""
    prompt = [{"role": "system", "content": "rules " * 100}, *OPENAI["request"]["messages"]]
    many = [openai_line(("request.messages", prompt), ("response.id", f"c{i}"),
                        ("response.choices", [{**OPENAI["response"]["choices"][0], "index": k} for k in range(4)]))
            for i in range(6)]
    lines = [many[0], OPENAI_LINES["plain"], many[1], OPENAI_LINES["no choices"], many[2], many[3],
             OPENAI_LINES["rating"], many[4], many[5]]
    copies = 3 * sum(len(m["content"].encode()) for m in prompt)  # of a log's prompt, beside the first choice's
    monkeypatch.setattr(columns, "_COPIES_BYTES", 3 * copies)  # three logs
    table, index = columns.parse_openai_lines(lines)
    assert index.tolist() == [0] * 4 + [1] + [2] * 4 + [4] * 4 + [6]
    assert table.column("trace_id").to_pylist()[:5] == ["c0:0", "c0:1", "c0:2", "c0:3", "chatcmpl-1"]
    for i, rows in by_line((table, index)).items():
        assert rows == openai_exact(lines[i])


def test_an_openai_log_ends_where_fromtimestamp_puts_it():
    import random

    rng = random.Random(0)
    for _ in range(300):
        created, latency = rng.randrange(0, 2**32), rng.choice([rng.uniform(0, 1e7), rng.randrange(10**6) / 8, 0.0005])
        raw = openai_line(("response.created", created), ("latency_ms", latency))
        (row,) = columns.parse_openai_lines([raw])[0].to_pylist()
        assert [row] == openai_exact(raw), (created, latency)


# A log of three choices, the second without its index.
OPENAI_CHOICES = {**OPENAI, "response": {**OPENAI["response"], "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "5"}, "finish_reason": "stop"},
    {"message": {"role": "assistant", "content": "It is 5."}, "finish_reason": "length"},
    {"index": 2, "message": {"role": "assistant", "content": "five"}, "finish_reason": "stop"}]}}


@pytest.mark.parametrize("fast, exact_row, base", [(columns.parse_lines, exact, BASE),
                                                   (columns.parse_openai_lines, openai_exact, OPENAI),
                                                   (columns.parse_openai_lines, openai_exact, OPENAI_CHOICES)],
                         ids=["ours", "openai", "openai of three choices"])
def test_a_line_with_any_value_anywhere_gets_the_exact_paths_row_or_none(fast, exact_row, base):
    """Each value of a record replaced by values of other types and ranges, or removed, one at a
    time (tests.conftest.mutated), each line alone: a row the fast path takes is the exact path's."""
    taken = 0
    for doc in mutated(base):
        raw = json.dumps(doc).encode()
        got = fast([raw])
        rows = got[0].to_pylist() if got is not None else []
        if rows:
            assert rows == as_rows(exact_row(raw)), raw
            taken += 1
    assert taken >= 40  # the fast path is exercised: about 50 of ours and 110 OpenAI logs are taken


# Parquet batches of our schema: the fast path agrees with the exact path (each row as the dict
# pyarrow makes of it, converted and validated), row for row, whatever the columns' types.
def typed(**columns_: pa.Array) -> pa.RecordBatch:
    """Two rows of BASE (the second with another id and a thumb down), its columns replaced by ``columns_``
    (``...`` removes one)."""
    rows = pa.Table.from_pylist([BASE, {**BASE, "trace_id": "tr-2", "feedback": {"thumb": "down", "rating": 2.5}}])
    for name, values in columns_.items():
        rows = rows.drop_columns([name]) if values is ... else (
            rows.set_column(rows.schema.get_field_index(name), name, values) if name in rows.column_names
            else rows.append_column(name, values))
    return rows.combine_chunks().to_batches()[0]


def at(*times: str, unit: str = "us", tz: str | None = "UTC") -> pa.Array:
    return pa.array([datetime.fromisoformat(t) for t in times]).cast(pa.timestamp(unit, tz=tz))


START, END = BASE["start_time"], BASE["end_time"]
STRINGS = pa.struct([("name", pa.string()), ("version", pa.string())])
BATCHES = {
    "inferred": typed(),
    "timestamps": typed(start_time=at(START, START), end_time=at(END, END)),
    "timestamps in ms": typed(start_time=at(START, START, unit="ms"), end_time=at(END, END, unit="ms")),
    "timestamps in s": typed(start_time=at(START, START, unit="s"), end_time=at(START, START, unit="s")),
    "timestamps in another zone": typed(start_time=at(START, START, tz="+02:00"), end_time=at(END, END, tz="Europe/Paris")),
    "timestamps in an unknown zone": typed(start_time=at(START, START, tz="Mars/Olympus")),
    "naive timestamps": typed(start_time=at(START, START, tz=None)),
    "timestamps in ns": typed(start_time=at(START, START, unit="ns")),
    "timestamps past 9999": typed(end_time=pa.array([2**62, int(datetime.fromisoformat(END).timestamp() * 10**6)], pa.int64())
                                  .cast(pa.timestamp("us", tz="UTC"))),
    "timestamps before year 1": typed(start_time=pa.array([-2**62, 0], pa.int64()).cast(pa.timestamp("us", tz="UTC"))),
    "end before start": typed(start_time=at(END, START), end_time=at(START, END)),
    "a time as a number": typed(start_time=pa.array([1, 2])),
    "large strings": typed(trace_id=pa.array(["a", "b"], pa.large_string()), completion=pa.array(["5", "6"], pa.large_string())),
    "string views": typed(completion=pa.array(["5", " "], pa.string_view())),
    "dictionary ids": typed(trace_id=pa.array(["a", "b"]).dictionary_encode()),
    "dictionary model": typed(model=pa.StructArray.from_arrays(
        [pa.array(["m", "m"]).dictionary_encode(), pa.array(["1", "2"])], ["name", "version"])),
    "model without version": typed(model=pa.array([{"name": "m"}] * 2)),
    "model as text": typed(model=pa.array(["m", "m"])),
    "model null": typed(model=pa.array([None, {"name": "m", "version": "1"}], STRINGS)),
    "model twice-named field": typed(model=pa.StructArray.from_arrays([pa.array(["m", "m"])] * 2, ["name", "name"])),
    "id as a number": typed(trace_id=pa.array([1, 2])),
    "no id": typed(trace_id=pa.array([None, "b"], pa.string())),
    "counts in int32": typed(usage=pa.array([BASE["usage"]] * 2, pa.struct([(k, pa.int32()) for k in BASE["usage"]]))),
    "counts in uint64": typed(usage=pa.array([{"prompt_tokens": 2**63, "completion_tokens": 1, "total_tokens": 1}] * 2,
                                             pa.struct([(k, pa.uint64()) for k in BASE["usage"]]))),
    "counts as floats": typed(usage=pa.array([BASE["usage"]] * 2, pa.struct([(k, pa.float64()) for k in BASE["usage"]]))),
    "counts as booleans": typed(usage=pa.array([{k: True for k in BASE["usage"]}] * 2)),
    "a count missing": typed(usage=pa.array([{"prompt_tokens": 1, "completion_tokens": 1}] * 2)),
    "latency in float32": typed(latency_ms=pa.array([1.5, 2.25], pa.float32())),
    "latency as an integer": typed(latency_ms=pa.array([3, 2**53])),
    "latency as an integer a float does not hold": typed(latency_ms=pa.array([3, 2**53 + 1])),
    "latency in float16": typed(latency_ms=pa.array(np.array([1.5, 2.0], np.float16))),
    "latency NaN": typed(latency_ms=pa.array([float("nan"), 1.0])),
    "latency as a boolean": typed(latency_ms=pa.array([True, False])),
    "no feedback": typed(feedback=...),
    "feedback null": typed(feedback=pa.array([None, {"thumb": "up", "rating": 3.0}])),
    "feedback without rating": typed(feedback=pa.array([{"thumb": "up"}, {"thumb": "sideways"}])),
    "rating as an integer": typed(feedback=pa.array([{"thumb": None, "rating": 4}, {"thumb": None, "rating": 9}])),
    "feedback of nulls": typed(feedback=pa.array([{"thumb": None, "rating": None}] * 2)),
    "no scores": typed(scores=...),
    "scores null": typed(scores=pa.array([None, [{"name": "j", "value": 1.0, "source": "s"}]])),
    "score null": typed(scores=pa.array([[None], [{"name": "j", "value": 1.0, "source": "s"}]])),
    "score without source": typed(scores=pa.array([[{"name": "j", "value": 1.0}]] * 2)),
    "score source null": typed(scores=pa.array([[{"name": "j", "value": 1.0, "source": None}], []])),
    "score without value": typed(scores=pa.array([[{"name": "j", "label": "ok", "source": "s"}], []])),
    "score value NaN": typed(scores=pa.array([[{"name": "j", "value": float("nan"), "source": "s"}], []])),
    "score value an integer": typed(scores=pa.array([[{"name": "j", "value": 3, "source": "s"}], []])),
    "score without name": typed(scores=pa.array([[{"value": 3.0, "source": "s"}]] * 2)),
    "scores as a large list": typed(scores=pa.array([[{"name": "j", "value": 1.0, "source": "s"}], []],
                                                    pa.large_list(SCORES.value_type))),
    "no reference": typed(reference_answer=...),
    "reference of nulls": typed(reference_answer=pa.nulls(2)),
    "completion of nulls": typed(completion=pa.nulls(2)),
    "no messages": typed(messages=...),
    "messages null": typed(messages=pa.array([None, BASE["messages"]], MESSAGES)),
    "a message null": typed(messages=pa.array([[None, BASE["messages"][1]], BASE["messages"]], MESSAGES)),
    "a message without content": typed(messages=pa.array([[{"role": "user"}], [{"role": "user"}]])),
    "messages as a large list": typed(messages=pa.array([BASE["messages"]] * 2, pa.large_list(MESSAGES.value_type))),
    "messages of texts": typed(messages=pa.array([["hi"], ["yo"]])),
    "a tool call": typed(messages=pa.array([[*CALLED, BASE["messages"][1]], BASE["messages"]])),
    "an earlier refusal": typed(messages=pa.array([[*BASE["messages"], {"role": "assistant", "content": "", "refusal": "No."},
                                                    BASE["messages"][1]], BASE["messages"]])),
    "tool calls null": typed(messages=pa.array([[{**m, "tool_calls": None} for m in BASE["messages"]]] * 2)),
    "tool calls empty": typed(messages=pa.array([[{**m, "tool_calls": []} for m in BASE["messages"]]] * 2,
                                                pa.list_(pa.struct([("role", pa.string()), ("content", pa.string()),
                                                                    ("tool_calls", pa.list_(pa.string()))])))),
    "an unknown role": typed(messages=pa.array([[{"role": "bot", "content": "x"}, {"role": "user", "content": "y"}],
                                                [{"role": "user", "content": "y"}]])),
    "extra columns": typed(user=pa.array(["u1", "u2"]), metadata=pa.array([{"a": 1}, None])),
    "another format's column": typed(choices=pa.array([1, 2])),
    "a column twice": pa.RecordBatch.from_arrays([*typed().columns, pa.array(["x", "y"])], names=[*typed().schema.names, "trace_id"]),
    "no completion": typed(completion=...),
    "a slice": typed().slice(1, 1),
}


def as_text(rows: list) -> str:
    """Rows as JSON text, where a NaN equals a NaN."""
    return json.dumps(rows, default=str)


def batch_exact(batch: pa.RecordBatch) -> list[dict | None]:
    """The exact path's row (or None) of each row of ``batch``."""
    out = []
    for row in sources._documents(batch, "f", 1):
        try:
            if not isinstance(row, dict) or formats.detect(row) != "ctpipe":
                raise traces.InvalidTrace("", "")
            out.append(row_of(traces.convert(row)))
        except (traces.InvalidTrace, formats.FormatError):
            out.append(None)
    return out


@pytest.mark.parametrize("name", BATCHES)
def test_a_parquet_row_the_fast_path_takes_is_the_row_the_exact_path_makes(name):
    batch = BATCHES[name]
    got = columns.parse_batch(batch)
    if got is not None:
        rows = batch_exact(batch)
        assert as_text(got[0].to_pylist()) == as_text([rows[i] for i in got[1].tolist()]), name


def test_plain_parquet_rows_take_the_fast_path_and_odd_types_do_not():
    taken = {name for name, batch in BATCHES.items() if columns.parse_batch(batch) is not None}
    assert {"inferred", "timestamps", "timestamps in ms", "timestamps in s", "timestamps in another zone", "large strings",
            "string views", "dictionary ids", "dictionary model", "model null", "no id", "counts in int32",
            "latency in float32", "latency in float16", "latency as an integer", "latency NaN", "no feedback", "feedback null",
            "feedback without rating", "rating as an integer", "feedback of nulls", "no scores", "scores null", "score null",
            "score without source", "score source null", "score without value", "score value NaN", "score value an integer",
            "scores as a large list", "no reference", "reference of nulls", "messages null", "a message null",
            "messages as a large list", "an unknown role", "extra columns", "a slice", "timestamps past 9999",
            "timestamps before year 1", "end before start"} <= taken
    assert not taken & {"timestamps in an unknown zone", "naive timestamps", "timestamps in ns", "a time as a number",
                        "model as text", "model twice-named field", "id as a number", "counts in uint64", "counts as floats",
                        "counts as booleans", "latency as a boolean", "messages of texts", "another format's column",
                        "no completion", "completion of nulls", "a column twice", "model without version", "a count missing", "no messages",
                        "a message without content", "score without name", "latency as an integer a float does not hold"}
    for name in ("feedback null", "scores null"):  # none, as a missing one is: a Parquet row cannot tell them apart
        assert columns.parse_batch(BATCHES[name])[1].tolist() == [0, 1]


ARROW_TYPES = [pa.bool_(), pa.int8(), pa.uint8(), pa.int32(), pa.uint64(), pa.float16(), pa.float32(), pa.decimal128(12, 3),
               pa.string(), pa.large_string(), pa.string_view(), pa.binary(), pa.large_binary(), pa.date32(),
               pa.time64("us"), pa.duration("ms"), pa.timestamp("ms"), pa.timestamp("us", tz="Asia/Tokyo"), pa.null(),
               pa.dictionary(pa.int8(), pa.string()), pa.list_(pa.string()), pa.struct([("x", pa.string())])]


def test_a_parquet_column_of_any_type_is_read_as_the_exact_path_reads_it_or_left_to_it():
    """Each column of a batch (and each field of its structs) cast to each of many Arrow types,
    where pyarrow casts it: the fast path never fails, and the rows it takes are the exact path's."""
    base = typed(feedback=pa.array([{"thumb": "up", "rating": 4}, {"thumb": None, "rating": 2}]))
    variants = []
    for i, field in enumerate(base.schema):
        column = base.column(i)
        children = [(j, column.field(j)) for j in range(column.type.num_fields)] if pa.types.is_struct(field.type) else []
        for t in ARROW_TYPES:
            for j, values in [(None, column), *children]:
                try:
                    cast = values.cast(t)
                except (pa.ArrowException, TypeError):
                    continue
                if j is not None:
                    kids = [cast if k == j else column.field(k) for k in range(column.type.num_fields)]
                    cast = pa.StructArray.from_arrays(kids, [f.name for f in column.type])
                variants.append(base.set_column(i, field.name, cast))
    taken = 0
    for batch in variants:
        got = columns.parse_batch(batch)
        if got is not None:
            rows = batch_exact(batch)
            assert as_text(got[0].to_pylist()) == as_text([rows[i] for i in got[1].tolist()]), batch.schema
            taken += 1
    assert len(variants) > 100 and taken > 30, (len(variants), taken)


def test_a_parquet_row_with_any_value_anywhere_gets_the_exact_paths_row_or_none():
    """Each value of BASE replaced by values of other types and ranges, or removed (tests.conftest.mutated),
    as a one-row batch of the types pyarrow infers: a row the fast path takes is the exact path's."""
    taken = 0
    for doc in mutated(BASE):
        try:
            batch = pa.RecordBatch.from_pylist([doc])
        except (pa.ArrowException, TypeError, ValueError, OverflowError):  # values pyarrow cannot type
            continue
        got = columns.parse_batch(batch)
        if got is not None and len(got[1]):
            assert as_text(got[0].to_pylist()) == as_text(batch_exact(batch)), doc
            taken += 1
    assert taken >= 40, taken


# OTLP JSON exports: the fast path agrees with the reader (formats.from_otel) and the trace's
# validation, line for line; a line is taken whole (all its GenAI spans) or left to the reader.
GENAI_INPUT = [{"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
               {"role": "user", "parts": [{"type": "text", "content": "What is 2 plus "}, {"type": "text", "content": "3?"}]}]
GENAI_OUTPUT = [{"role": "assistant", "parts": [{"type": "text", "content": "5"}]}]
EVALUATION = {"name": "gen_ai.evaluation.result", "attributes": [kv("gen_ai.evaluation.name", "judge"),
                                                                 kv("gen_ai.evaluation.score.value", 0.5),
                                                                 kv("gen_ai.evaluation.score.label", "good")]}


INSTRUCTIONS = [{"type": "text", "content": "Be brief."}]


def changed(attributes: list[dict], **values) -> list[dict]:
    """``attributes`` with ``values`` instead (an attribute's name with dots as double underscores:
    None drops it, a dict is its raw item)."""
    out = {a["key"]: a for a in attributes}
    for name, value in values.items():
        name = name.replace("__", ".")
        out[name] = value if isinstance(value, dict) or value is None else kv(name, value)
    return [a for a in out.values() if a is not None]


def genai_attributes(inputs=GENAI_INPUT, outputs=GENAI_OUTPUT, **values) -> list[dict]:
    """A GenAI span's attributes: the model, token counts and messages, :func:`changed`."""
    return changed([kv("gen_ai.request.model", "assistant"), kv("gen_ai.usage.input_tokens", 10),
                    kv("gen_ai.usage.output_tokens", 1), kv("gen_ai.input.messages", json.dumps(inputs)),
                    kv("gen_ai.output.messages", json.dumps(outputs))], **values)


OTEL = otlp(genai_attributes(), [EVALUATION])


def otel_line(doc: dict = OTEL, **values) -> bytes:
    if values:
        doc = otlp(genai_attributes(**values), [EVALUATION])
    return json.dumps(doc, ensure_ascii=False).encode()


def with_span(change: dict, doc: dict = OTEL) -> dict:
    """``doc`` with its first span's fields changed (... removes one)."""
    doc = json.loads(json.dumps(doc))
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span.update(change)
    for key in [k for k, v in span.items() if v is ...]:
        del span[key]
    return doc


FLAT_ATTRIBUTES = [kv("gen_ai.request.model", "m"), kv("gen_ai.prompt.0.role", "system"), kv("gen_ai.prompt.0.content", "Be brief."),
                   kv("gen_ai.prompt.1.role", "user"), kv("gen_ai.prompt.1.content", "What is 2 plus 3?"),
                   kv("gen_ai.completion.0.role", "assistant"), kv("gen_ai.completion.0.content", "5")]
OTEL_FLAT = otlp(FLAT_ATTRIBUTES, [EVALUATION])  # the older names, flattened: one attribute per field


def flat(**values) -> dict:
    """OTEL_FLAT with its attributes :func:`changed`."""
    return otlp(changed(FLAT_ATTRIBUTES, **values), [EVALUATION])


# The older JSON names: each a JSON list of {role, content}, a content a text or OpenAI's typed parts.
OLDER_PROMPT = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "What is 2 plus "}, {"type": "text", "text": "3?"}]}]
OLDER_COMPLETION = [{"role": "assistant", "content": "5"}]


def json_named(prompt=OLDER_PROMPT, completion=OLDER_COMPLETION, **values) -> dict:
    """An export of a span of the older JSON names, its attributes :func:`changed` (a list is made JSON text)."""
    return otlp(changed([kv("gen_ai.request.model", "m"), kv("gen_ai.prompt", json.dumps(prompt)),
                         kv("gen_ai.completion", json.dumps(completion))], **values), [EVALUATION])


OTEL_JSON = json_named()
JSON_OTHER_ANSWER = json_named(completion=[{"role": "assistant", "content": "6"}])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]


def with_resource(resource: dict) -> dict:
    return {"resourceSpans": [{**OTEL["resourceSpans"][0], "resource": resource}]}


OTEL_LINES = {
    "plain": otel_line(),
    "response model": otel_line(gen_ai__response__model="assistant-2"),
    "response model empty": otel_line(gen_ai__response__model=""),
    "no model": otel_line(gen_ai__request__model=None),
    "model as a number": otel_line(gen_ai__request__model=7),
    "an attribute twice": otel_line(otlp(genai_attributes() + [kv("gen_ai.request.model", "later")], [EVALUATION])),
    "model twice": otel_line(gen_ai__request__model={"key": "gen_ai.request.model", "value": {"stringValue": "a", "intValue": "1"}}),
    "older token names": otel_line(gen_ai__usage__input_tokens=None, gen_ai__usage__output_tokens=None,
                                   gen_ai__usage__prompt_tokens=4, gen_ai__usage__completion_tokens=2),
    "both token names": otel_line(gen_ai__usage__prompt_tokens=4),
    "no tokens": otel_line(gen_ai__usage__input_tokens=None, gen_ai__usage__output_tokens=None),
    "tokens as doubles": otel_line(gen_ai__usage__input_tokens=10.0),
    "tokens as text": otel_line(gen_ai__usage__input_tokens="10"),
    "tokens with a space": otel_line(gen_ai__usage__input_tokens={"key": "gen_ai.usage.input_tokens", "value": {"intValue": " 10"}}),
    "negative tokens": otel_line(gen_ai__usage__input_tokens=-3),
    "tokens past int64": otel_line(gen_ai__usage__input_tokens=10**19),
    "an empty value": otel_line(other={"key": "other", "value": {}}),
    "an array value": otel_line(other={"key": "other", "value": {"arrayValue": {"values": [{"stringValue": "x"}]}}}),
    "a value of no known kind": otel_line(other={"key": "other", "value": {"bytesValue": "eA=="}}),
    "an item without a key": otel_line(other={"value": {"intValue": "x"}}),
    "a bad integer elsewhere": otel_line(other={"key": "other", "value": {"intValue": "many"}}),
    "an infinite double": otel_line(other={"key": "other", "value": {"doubleValue": 1e999}}),
    "input empty": otel_line(gen_ai__input__messages=""),
    "no input": otel_line(gen_ai__input__messages=None),
    "no output": otel_line(gen_ai__output__messages=None),
    "input not JSON": otel_line(gen_ai__input__messages="[{"),
    "input as a number": otel_line(gen_ai__input__messages=5),
    "input an object": otel_line(inputs={"role": "user"}),
    "message without role": otel_line(inputs=[{"parts": [{"type": "text", "content": "hi"}]}]),
    "unknown role": otel_line(inputs=[{"role": "bot", "parts": []}, GENAI_INPUT[1]]),
    "an answer in parts": otel_line(outputs=[{"role": "assistant", "parts": [{"type": "text", "content": "The sum is "},
                                                                         {"type": "text", "content": "5."}]}]),
    "a part of another kind": otel_line(inputs=[{"role": "user", "parts": [{"type": "search_result", "content": "2+3=5"},
                                                                           {"type": "text", "content": "What is 2 plus 3?"}]}]),
    "a block's JSON beside a text part": otel_line(outputs=[{"role": "assistant", "parts": [
        {"type": "text", "content": json.dumps({"reasoningContent": {"reasoningText": {"text": "2+3"}}})},
        {"type": "text", "content": "5"}]}]),
    "an answer of a reasoning block's JSON": otel_line(outputs=[{"role": "assistant", "parts": [
        {"type": "text", "content": json.dumps({"reasoningContent": {"reasoningText": {"text": "2+3"}}})}]}]),
    "Strands Agents' reasoning part": otel_line(outputs=[{"role": "assistant", "parts": [
        {"type": "reasoningContent", "content": {"reasoningText": {"text": "2+3"}}}, {"type": "text", "content": "5"}]}]),
    "an earlier answer in parts": otel_line(inputs=[*GENAI_INPUT, {"role": "assistant", "parts": [
        {"type": "text", "content": "It is "}, {"type": "text", "content": "5."}]}, GENAI_INPUT[1]]),
    "an answer of JSON": otel_line(outputs=[{"role": "assistant", "parts": [{"type": "text", "content": '{"sum": 5}'}]}]),
    "a chat session's message": otel_line(with_span({"name": "vertexai.send_message"})),
    "finish reasons on the span": otel_line(gen_ai__response__finish_reasons={"key": "gen_ai.response.finish_reasons",
                                                                             "value": {"arrayValue": {"values": [{"stringValue": "stop"}]}}}),
    "finish reasons on the span, one filtered": otel_line(gen_ai__response__finish_reasons={
        "key": "gen_ai.response.finish_reasons",
        "value": {"arrayValue": {"values": [{"stringValue": "content_filter"}]}}}),
    "finish reasons of no strings": otel_line(gen_ai__response__finish_reasons={"key": "gen_ai.response.finish_reasons",
                                                                               "value": {"arrayValue": {"values": [{"intValue": "1"}]}}}),
    "an array the reader reads": otel_line(gen_ai__request__model={"key": "gen_ai.request.model",
                                                                   "value": {"arrayValue": {"values": [{"stringValue": "m"}]}}}),
    "older names, finish reasons on the span": otel_line(flat(gen_ai__response__finish_reasons={
        "key": "gen_ai.response.finish_reasons", "value": {"arrayValue": {"values": [{"stringValue": "ERROR_TOXIC"}]}}})),
    "a resource's array": otel_line(with_resource({"attributes": [kv("service.version", "3"), {
        "key": "process.command_args", "value": {"arrayValue": {"values": [{"stringValue": "python"}, {"stringValue": "app.py"}]}}}]})),
    "a resource's version as an array": otel_line(with_resource({"attributes": [{
        "key": "service.version", "value": {"arrayValue": {"values": [{"stringValue": "3"}]}}}]})),
    "a span of another name": otel_line(with_span({"name": "openai.chat"})),
    "a reasoning part": otel_line(outputs=[{"role": "assistant", "parts": [{"type": "reasoning", "content": "2+3"},
                                                                         {"type": "text", "content": "5"}]}]),
    "older JSON, an answer in parts": otel_line(json_named(completion=[{"role": "assistant", "content": [
        {"type": "text", "text": "The sum is "}, {"type": "text", "text": "5."}]}])),
    "a prefill": otel_line(inputs=[*GENAI_INPUT, {"role": "assistant", "parts": [{"type": "text", "content": "The sum is"}]}],
                           gen_ai__provider__name="anthropic"),
    "an assistant's last turn": otel_line(inputs=[*GENAI_INPUT, {"role": "assistant", "parts": [{"type": "text", "content": "Hm"}]}]),
    "content outside parts": otel_line(inputs=[{"role": "user", "content": "hi"}]),
    "an image part": otel_line(inputs=[{"role": "user", "parts": [{"type": "image", "url": "u"}, {"type": "text", "content": "hi"}]}]),
    "pydantic-ai's image part": otel_line(inputs=[{"role": "user", "parts": [{"type": "text", "content": "hi"},
                                                                           {"type": "image-url", "url": "u"}]}]),
    "Semantic Kernel's operation": otel_line(gen_ai__operation__name="chat.completions"),
    "an embedding's operation": otel_line(gen_ai__operation__name="embeddings"),
    "a model named, no operation, no content": otel_line(gen_ai__input__messages=None, gen_ai__output__messages=None),
    "Strands Agents' span": otel_line(gen_ai__system="strands-agents"),
    "OpenInference's span": otel_line(gen_ai__input__messages=None, gen_ai__output__messages=None,
                                      openinference__span__kind="LLM", llm__input_messages__0__message__role="user",
                                      llm__input_messages__0__message__content="2+3?",
                                      llm__output_messages__0__message__role="assistant",
                                      llm__output_messages__0__message__content="5"),
    "Strands Agents' span, its provider named": otel_line(gen_ai__provider__name="strands-agents"),
    "Google ADK's span": otel_line(gen_ai__input__messages=None, gen_ai__output__messages=None,
                                   gcp__vertex__agent__llm_request=json.dumps({"contents": [{"role": "user", "parts": [{"text": "2+3?"}]}]}),
                                   gcp__vertex__agent__llm_response=json.dumps({"content": {"role": "model", "parts": [{"text": "5"}]}})),
    "the Vercel AI SDK's span": otel_line(gen_ai__input__messages=None, gen_ai__output__messages=None,
                                          ai__prompt__messages=json.dumps([{"role": "user", "content": "2+3?"}]),
                                          ai__response__text="5"),
    "no model, no operation, no content": otel_line(gen_ai__input__messages=None, gen_ai__output__messages=None,
                                                    gen_ai__request__model=None),
    "a part without content": otel_line(inputs=[{"role": "user", "parts": [{"type": "text"}]}]),
    "a tool call in the prompt": otel_line(inputs=[
        {"role": "user", "parts": [{"type": "text", "content": "2 plus 3?"}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 2}}]}]),
    "a tool's result in the prompt": otel_line(inputs=[
        {"role": "user", "parts": [{"type": "text", "content": "2 plus 3?"}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "5"}]}]),
    "two text parts": otel_line(inputs=[{"role": "user", "parts": [{"type": "text", "content": "Question:"},
                                                                   {"type": "reasoning", "content": "think"},
                                                                   {"type": "text", "content": "hi"}]}]),
    "an answer of a file part": otel_line(outputs=[{"role": "assistant", "parts": [
        {"type": "text", "content": "Here:"}, {"type": "file", "file_id": "f1"}]}]),
    "a number as content": otel_line(inputs=[{"role": "user", "parts": [{"type": "text", "content": 5}]}]),
    "parts not a list": otel_line(inputs=[{"role": "user", "parts": "hi"}]),
    "a message not an object": otel_line(inputs=["hi", GENAI_INPUT[1]]),
    "NaN in the messages": otel_line(gen_ai__input__messages='[{"role": "user", "parts": [], "x": NaN}]'),
    "duplicate key in the messages": otel_line(gen_ai__input__messages='[{"role": "system", "role": "user", "parts": []}]'),
    "blank answer": otel_line(outputs=[{"role": "assistant", "parts": [{"type": "text", "content": " "}]}]),
    "two answers": otel_line(outputs=GENAI_OUTPUT * 2),
    "unicode": otel_line(outputs=[{"role": "assistant", "parts": [{"type": "text", "content": "五"}]}]),
    "older prompt names": otel_line(OTEL_FLAT),
    "a span of older JSON names beside": otel_line({"resourceSpans": OTEL["resourceSpans"] + otlp([
        kv("gen_ai.request.model", "m"), kv("gen_ai.prompt", '[{"role": "user", "content": "hi"}]')])["resourceSpans"]}),
    "older names without a role": otel_line(flat(gen_ai__prompt__1__role=None)),
    "older names with a role as a number": otel_line(flat(gen_ai__prompt__0__role=3)),
    "older names with a content as a number": otel_line(flat(gen_ai__prompt__1__content=5)),
    "older names with a gap": otel_line(flat(gen_ai__prompt__3__content="later")),
    "older names without a completion": otel_line(flat(gen_ai__completion__0__content=None)),
    "older names with two completions": otel_line(flat(gen_ai__completion__1__content="more")),
    "older names and the current": otel_line(otlp(FLAT_ATTRIBUTES + genai_attributes())),
    "older names, many messages": otel_line(otlp(FLAT_ATTRIBUTES + [kv(f"gen_ai.prompt.{i}.content", "x") for i in range(2, 70)])),
    "older names, a tool call in the prompt": otel_line(flat(
        gen_ai__prompt__2__role="assistant", gen_ai__prompt__2__tool_calls__0__name="add", gen_ai__prompt__3__role="tool",
        gen_ai__prompt__3__content="5", gen_ai__prompt__4__role="user", gen_ai__prompt__4__content="And 3 plus 4?")),
    "older names, a message of roles only": otel_line(flat(gen_ai__prompt__0__content=None)),
    "older names, a user's turn not recorded": otel_line(flat(gen_ai__prompt__1__content=None)),
    "older names, an assistant's turn not recorded": otel_line(flat(gen_ai__prompt__2__role="assistant",
                                                                     gen_ai__prompt__3__role="user",
                                                                     gen_ai__prompt__3__content="Again.")),
    "older names, an answer's blocks": otel_line(flat(gen_ai__completion__1__content=" and 0.")),
    "older names, Gemini's model role": otel_line(flat(gen_ai__prompt__0__role="model")),
    "older names, Bedrock's Claude": otel_line(flat(gen_ai__system="anthropic", gen_ai__request__model="claude-3-haiku-20240307-v1:0")),
    "older names, Anthropic's Claude": otel_line(flat(gen_ai__system="Anthropic", gen_ai__request__model="claude-3-haiku-20240307")),
    "older names, LangChain's operation": otel_line(flat(gen_ai__operation__name="llm_request", llm__request__type="chat")),
    "older names, parts as JSON": otel_line(flat(gen_ai__prompt__1__content=json.dumps([{"type": "text", "text": "Hi"}]))),
    "older names, text like JSON": otel_line(flat(gen_ai__prompt__1__content=" [1, 2]")),
    "older names, a choice filtered": otel_line(flat(gen_ai__completion__0__content="FILTERED",
                                                     gen_ai__completion__0__finish_reason="content_filter")),
    "older names, a choice that stopped": otel_line(flat(gen_ai__completion__0__finish_reason="stop")),
    "older names, a text completion's prompt": otel_line(flat(gen_ai__prompt__0__role=None, gen_ai__prompt__0__content=None,
                                                              gen_ai__prompt__1__role=None, gen_ai__prompt__1__content=None,
                                                              gen_ai__prompt__0__user="Tell me a joke")),
    "older names, thinking alone": otel_line(flat(gen_ai__completion__0__role="thinking")),
    "older names, thinking then the answer": otel_line(flat(
        gen_ai__completion__0__role="thinking", gen_ai__completion__0__content="Count them.",
        gen_ai__completion__1__role="assistant", gen_ai__completion__1__content="3")),
    "a message of no parts": otel_line(inputs=[GENAI_INPUT[0], {"role": "user", "parts": []}]),
    "an earlier message of no parts": otel_line(inputs=[{"role": "user", "parts": []}, GENAI_INPUT[1]]),
    "an earlier refusal": otel_line(inputs=[GENAI_INPUT[1], {"role": "assistant", "parts": [{"type": "refusal", "content": "No."}]},
                                            GENAI_INPUT[1]]),
    "older names, a tool block as JSON": otel_line(flat(gen_ai__prompt__1__content=json.dumps(
        [{"type": "text", "text": "Hi"}, {"type": "tool_result", "tool_use_id": "t1", "content": "5"}]))),
    "an answer that is a refusal": otel_line(outputs=[{"role": "assistant", "parts": [{"type": "refusal", "content": "No."}]}]),
    "older names, a tool call": otel_line(flat(gen_ai__completion__0__content=None, gen_ai__completion__0__tool_calls__0__name="add")),
    "older names, text and a tool call": otel_line(flat(gen_ai__completion__0__tool_calls__0__name="add")),
    "older names, a second choice only": otel_line(flat(gen_ai__completion__0__content=None, gen_ai__completion__0__role=None,
                                                        gen_ai__completion__1__content="5")),
    "system instructions": otel_line(inputs=GENAI_INPUT[1:], gen_ai__system_instructions=json.dumps(INSTRUCTIONS)),
    "system instructions empty": otel_line(gen_ai__system_instructions=""),
    "system instructions of no parts": otel_line(gen_ai__system_instructions="[]"),
    "system instructions of an image": otel_line(gen_ai__system_instructions='[{"type": "image", "uri": "u"}]'),
    "system instructions not JSON": otel_line(gen_ai__system_instructions="Be brief."),
    "system instructions as a number": otel_line(gen_ai__system_instructions=5),
    "system instructions an object": otel_line(gen_ai__system_instructions=json.dumps(INSTRUCTIONS[0])),
    "system instructions and older names": otel_line(otlp(FLAT_ATTRIBUTES + [kv("gen_ai.system_instructions", "[{")])),
    "a chat span": otel_line(gen_ai__operation__name="chat"),
    "an agent's span": otel_line(gen_ai__operation__name="invoke_agent"),
    "an agent's span beside a chat span": otel_line({"resourceSpans": [{**OTEL["resourceSpans"][0], "scopeSpans": [
        {"spans": [otlp(genai_attributes(gen_ai__operation__name="invoke_agent"))["resourceSpans"][0]["scopeSpans"][0]["spans"][0]]},
        with_span({"spanId": "s2"})["resourceSpans"][0]["scopeSpans"][0]]}]}),
    "an operation as a number": otel_line(gen_ai__operation__name=3),
    "older names, a chat by its request type": otel_line(flat(llm__request__type="chat")),
    "older names, an embedding by its request type": otel_line(flat(llm__request__type="embedding")),
    "older names, a rerank by its request type": otel_line(flat(llm__request__type="rerank")),
    "a request type as a number": otel_line(flat(llm__request__type=3)),
    "a request type beside an operation": otel_line(gen_ai__operation__name="chat", llm__request__type="embedding"),
    "an answer an error broke off": otel_line(outputs=[{"role": "assistant", "parts": [{"type": "text", "content": "5"}],
                                                        "finish_reason": "error"}]),
    "an answer a safety check stopped": otel_line(outputs=[{"role": "assistant", "parts": [{"type": "text", "content": "5"}],
                                                            "finish_reason": "SAFETY"}]),
    "older names, a choice refused": otel_line(flat(gen_ai__completion__0__finish_reason="refusal")),
    "a failed call's span": otel_line(with_span({"status": {"code": 2, "message": "boom"}}, flat(gen_ai__completion__0__content=None))),
    "a failed call's span with an answer": otel_line(with_span({"status": {"code": "STATUS_CODE_ERROR"}})),
    "content on events": otel_line(otlp([kv("gen_ai.request.model", "m")], [
        {"name": "gen_ai.content.prompt", "attributes": [kv("gen_ai.prompt", json.dumps(OLDER_PROMPT))]},
        {"name": "gen_ai.content.completion", "attributes": [kv("gen_ai.completion", json.dumps(OLDER_COMPLETION))]}])),
    "content on events beside a GenAI span": otel_line({"resourceSpans": OTEL["resourceSpans"] + otlp([], [
        {"name": "gen_ai.content.prompt", "attributes": [kv("gen_ai.prompt", json.dumps(OLDER_PROMPT))]}])["resourceSpans"]}),
    "an answer filtered": otel_line(outputs=[{"role": "assistant", "parts": [{"type": "text", "content": "5"}],
                                              "finish_reason": "content_filter"}]),
    "an answer that stopped": otel_line(outputs=[{"role": "assistant", "parts": [{"type": "text", "content": "5"}],
                                                  "finish_reason": "stop"}]),
    "an answer a tool call": otel_line(outputs=[{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 2}}], "finish_reason": "tool_call"}]),
    "an answer of text and a tool call": otel_line(outputs=[{"role": "assistant", "parts": [
        {"type": "text", "content": "Let me add."}, {"type": "tool_call", "id": "c1", "name": "add"}]}]),
    "older JSON names": otel_line(OTEL_JSON),
    "older JSON names, texts only": otel_line(json_named([{"role": "user", "content": "hi"}])),
    "older JSON names, an image part": otel_line(json_named([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}}, {"type": "text", "text": "What is this?"}]}])),
    "older JSON names, two text parts": otel_line(json_named([{"role": "user", "content": [
        {"type": "text", "text": "Question:"}, {"type": "text", "text": "hi"}]}])),
    "older JSON names, a tool call in the prompt": otel_line(json_named([
        {"role": "user", "content": "2 plus 3?"}, {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]}])),
    "older JSON names, no tool calls in the prompt": otel_line(json_named([
        {"role": "user", "content": "2 plus 3?"}, {"role": "assistant", "content": "5", "tool_calls": []}])),
    "older JSON names, a part without text": otel_line(json_named([{"role": "user", "content": [{"type": "text"}, {"type": "text", "text": "hi"}]}])),
    "older JSON names without a role": otel_line(json_named([{"content": "hi"}])),
    "older JSON names without a content": otel_line(json_named([{"role": "system"}, {"role": "user", "content": "hi"}])),
    "older JSON names with a content as a number": otel_line(json_named([{"role": "user", "content": 5}])),
    "older JSON names with a content as an object": otel_line(json_named([{"role": "user", "content": {"text": "hi"}}])),
    "older JSON names with a message not an object": otel_line(json_named(["hi", {"role": "user", "content": "hi"}])),
    "older JSON names with a prompt as an object": otel_line(json_named({"role": "user", "content": "hi"})),
    "older JSON names with a prompt not JSON": otel_line(json_named(gen_ai__prompt="[{")),
    "older JSON names with a prompt empty": otel_line(json_named(gen_ai__prompt="")),
    "older JSON names with a prompt as a number": otel_line(json_named(gen_ai__prompt=3)),
    "older JSON names without a prompt": otel_line(json_named(gen_ai__prompt=None)),
    "older JSON names without a completion": otel_line(json_named(gen_ai__completion=None)),
    "older JSON names, an answer filtered": otel_line(json_named(completion=[
        {"role": "assistant", "content": "The answer", "finish_reason": "content_filter"}])),
    "older JSON names, an answer of text and a tool call": otel_line(json_named(completion=[
        {"role": "assistant", "content": "Let me add.", "tool_calls": [TOOL_CALL]}])),
    "older JSON names with two completions": otel_line(json_named(completion=OLDER_COMPLETION + [{"role": "assistant", "content": "!"}])),
    "older JSON names with a duplicate key": otel_line(json_named(gen_ai__completion='[{"role": "assistant", "content": "4", "content": "5"}]')),
    "older JSON names with NaN": otel_line(json_named(gen_ai__completion='[{"role": "assistant", "content": NaN}]')),
    "older JSON names with a null": otel_line(json_named([{"role": "user", "content": None}])),
    "older JSON names, a part of another type": otel_line(json_named([{"role": "user", "content": [
        {"type": "refusal", "text": "no"}, {"type": "text", "text": "hi"}]}])),
    "older JSON names and the current": otel_line(otlp(JSON_OTHER_ANSWER + genai_attributes())),
    "older JSON names and flattened": otel_line(otlp(FLAT_ATTRIBUTES + JSON_OTHER_ANSWER)),
    "no version": otel_line(with_resource({})),
    "version empty": otel_line(with_resource({"attributes": [kv("service.version", "")]})),
    "version as a number": otel_line(with_resource({"attributes": [kv("service.version", 3)]})),
    "a second resource with a bad value": otel_line({"resourceSpans": OTEL["resourceSpans"] + [
        {"resource": {"attributes": [{"key": "k", "value": {"intValue": "x"}}]}}]}),
    "two scopes": otel_line({"resourceSpans": [{**OTEL["resourceSpans"][0], "scopeSpans": [
        {"spans": []}, with_span({"spanId": "s2"})["resourceSpans"][0]["scopeSpans"][0],
        OTEL["resourceSpans"][0]["scopeSpans"][0]]}, {"resource": {}, "scopeSpans": []}]}),
    "two GenAI spans": otel_line(with_span({"spanId": "s2"}, {"resourceSpans": OTEL["resourceSpans"] * 2})),
    "no GenAI span": otel_line(otlp([kv("http.method", "GET")])),
    "a chat call without content beside one with": otel_line({"resourceSpans": [{**OTEL["resourceSpans"][0], "scopeSpans": [
        OTEL["resourceSpans"][0]["scopeSpans"][0],
        with_span({"spanId": "s2", "attributes": [kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "m")]}
                  )["resourceSpans"][0]["scopeSpans"][0]]}]}),
    "no end": otel_line(with_span({"endTimeUnixNano": ...})),
    "end before start": otel_line(with_span({"endTimeUnixNano": "1795339999000000000"})),
    "half a microsecond": otel_line(with_span({"startTimeUnixNano": "1795340000000000500", "endTimeUnixNano": "1795340000000001500"})),
    "at the epoch": otel_line(with_span({"startTimeUnixNano": "0", "endTimeUnixNano": "1"})),
    "before the epoch": otel_line(with_span({"startTimeUnixNano": "-5"})),
    "past int64": otel_line(with_span({"endTimeUnixNano": "9999999999999999999"})),
    "in the year 2300": otel_line(with_span({"endTimeUnixNano": "10413792000000000000"})),
    "time with a sign": otel_line(with_span({"startTimeUnixNano": "+1795340000000000000"})),
    "no ids": otel_line(with_span({"traceId": ..., "spanId": ...})),
    "an evaluation without a name": otel_line(with_span({"events": [{"name": "gen_ai.evaluation.result", "attributes": [
        kv("gen_ai.evaluation.score.value", 1.0)]}]})),
    "an evaluation without a value": otel_line(with_span({"events": [{"name": "gen_ai.evaluation.result", "attributes": [
        kv("gen_ai.evaluation.name", "tone"), kv("gen_ai.evaluation.score.label", "kind")]}]})),
    "an integer score": otel_line(with_span({"events": [{"name": "gen_ai.evaluation.result", "attributes": [
        kv("gen_ai.evaluation.name", "judge"), kv("gen_ai.evaluation.score.value", 3)]}]})),
    "a score as text": otel_line(with_span({"events": [{"name": "gen_ai.evaluation.result", "attributes": [
        kv("gen_ai.evaluation.name", "judge"), kv("gen_ai.evaluation.score.value", "3")]}]})),
    "two evaluations": otel_line(with_span({"events": [EVALUATION, EVALUATION]})),
    "another event": otel_line(with_span({"events": [{"name": "exception", "attributes": [{"key": "k", "value": {}}]}, EVALUATION]})),
    "a null": otel_line(with_span({"traceId": None})),
    "a null with spaces": otel_line(with_span({"traceId": "t"})).replace(b'"t"', b' \t null'),
    "a null in the messages": otel_line(inputs=[{"role": None, "parts": [{"type": "text", "content": "hi"}]}]),
    "the word null": otel_line(outputs=[{"role": "assistant", "parts": [{"type": "text", "content": "a null pointer"}]}]),
    "text like a null": otel_line(outputs=[{"role": "assistant", "parts": [{"type": "text", "content": "a list: [null]"}]}]),
    "also ours": otel_line({**OTEL, "trace_id": "t", "completion": "5"}),
}
# Lines pyarrow refuses, so that their block goes to the reader whole.
OTEL_REFUSED = {
    "times as numbers": otel_line(with_span({"startTimeUnixNano": 1795340000000000000})),
    "an integer as a number": otel_line(other={"key": "other", "value": {"intValue": 5}}),
    "attributes not a list": otel_line(with_span({"attributes": {"k": "v"}})),
    "a score NaN": otel_line(with_span({"events": [{"name": "gen_ai.evaluation.result", "attributes": [
        kv("gen_ai.evaluation.name", "judge"), {"key": "gen_ai.evaluation.score.value", "value": {"doubleValue": "NaN"}}]}]})),
    "duplicate key": otel_line().replace(b'"spanId": ', b'"spanId": "s0", "spanId": ', 1),
}


def otel_exact(raw: bytes) -> list[dict] | None:
    try:
        recs = [traces.convert(d) for d in formats.normalize(traces.loads(raw), "auto")]
    except (traces.InvalidTrace, formats.FormatError):
        return None
    return [row_of(r) for r in recs]


@pytest.mark.parametrize("name", OTEL_LINES)
def test_an_otlp_export_the_fast_path_takes_gives_the_rows_the_reader_makes(name):
    raw = OTEL_LINES[name]
    got = columns.parse_otel_lines([raw])
    if got is not None:
        assert got[0].to_pylist() == otel_exact(raw), name
        assert got[1].tolist() == [0] * got[0].num_rows


def test_every_otlp_export_of_a_block_gets_the_same_answer_together_and_plain_ones_take_the_fast_path():
    lines = list(OTEL_LINES.values())
    table, index = columns.parse_otel_lines(lines)
    rows = table.to_pylist()
    for i in sorted(set(index.tolist())):
        assert [r for r, at in zip(rows, index.tolist()) if at == i] == otel_exact(lines[i])
    names = list(OTEL_LINES)
    taken = {names[i] for i in index.tolist()}
    assert {"plain", "finish reasons on the span", "a resource's array",
            "response model", "response model empty", "an attribute twice", "model twice", "older token names", "both token names",
            "no tokens", "an item without a key", "two text parts", "older JSON names, two text parts", "unicode", "no version",
            "version empty", "two GenAI spans", "two scopes", "half a microsecond", "at the epoch",
            "an evaluation without a value", "an integer score", "two evaluations", "another event", "the word null",
            "older prompt names", "older names without a role", "older names, a message of roles only", "older names, a choice that stopped",
            "an answer that stopped", "system instructions", "system instructions empty", "system instructions of no parts",
            "a chat span", "an agent's span beside a chat span", "older names, a chat by its request type",
            "a request type beside an operation",
            "older names and the current", "older JSON names", "older JSON names, texts only",
            "older JSON names without a content",
            "older JSON names with a duplicate key", "older JSON names and the current",
            "older JSON names and flattened", "Semantic Kernel's operation"} <= taken
    assert not taken & {"no ids", "older JSON names, a part without text",  # refused: a span without ids, a part without its text
                        "a tool call in the prompt", "a tool's result in the prompt", "older names, a tool call in the prompt",
                        "an earlier refusal", "older names, a tool block as JSON",
                        "older names, text and a tool call", "an answer of text and a tool call",
                        "older JSON names, an answer of text and a tool call",
                        "older JSON names, a tool call in the prompt", "older JSON names with two completions", "older JSON names, an answer filtered", "an image part", "system instructions of an image", "older JSON names, an image part", "an answer of a file part",
                        "model as a number", "tokens as doubles", "tokens with a space", "tokens past int64", "an empty value",
                        "an array value", "a bad integer elsewhere", "input not JSON", "NaN in the messages",
                        "version as a number", "older JSON names with a content as a number",
                        "older JSON names with a content as an object", "older JSON names with a message not an object",
                        "older JSON names with a prompt as an object", "older JSON names with a prompt not JSON",
                        "older JSON names with a prompt as a number", "older JSON names with NaN", "older JSON names with a null", "a second resource with a bad value",
                        "no GenAI span", "a chat call without content beside one with", "past int64", "older names with a role as a number", "a span of older JSON names beside",
                        "older names with a content as a number", "older names, many messages", "in the year 2300", "time with a sign", "a null", "a null with spaces",
                        "a null in the messages", "also ours", "two answers", "older names with a gap",
                        "older names with two completions", "older names, parts as JSON", "older names, a choice filtered",
                        "older names, a tool call", "older names, a second choice only", "an answer filtered",
                        "an answer a tool call", "system instructions not JSON", "system instructions as a number",
                        "system instructions an object", "an agent's span", "an operation as a number", "content on events",
                        "content on events beside a GenAI span", "older names, an embedding by its request type",
                        "older names, a rerank by its request type", "a request type as a number", "an answer an error broke off",
                        "pydantic-ai's image part", "an embedding's operation", "a model named, no operation, no content",
                        "the Vercel AI SDK's span", "Google ADK's span", "Strands Agents' span", "OpenInference's span",
                        "Strands Agents' span, its provider named",
                        "an answer a safety check stopped", "older names, a choice refused", "a failed call's span",
                        "finish reasons on the span, one filtered"}
    assert table.num_rows == len(index) and sum(names[i] == "two GenAI spans" for i in index.tolist()) == 2
    for name, raw in OTEL_REFUSED.items():
        assert columns.parse_otel_lines([OTEL_LINES["plain"], raw]) is None, name


def test_an_otlp_span_ends_where_fromtimestamp_puts_it():
    import random

    rng = random.Random(0)
    for _ in range(300):
        start = rng.randrange(0, 2**33 * 10**9)
        end = start + rng.choice([rng.randrange(10**13), rng.randrange(4) * 250 + 500, 0])
        raw = otel_line(with_span({"startTimeUnixNano": str(start), "endTimeUnixNano": str(end)}))
        assert columns.parse_otel_lines([raw])[0].to_pylist() == otel_exact(raw), (start, end)


def test_an_otlp_export_with_any_value_anywhere_gets_the_readers_rows_or_none():
    """:func:`tests.conftest.mutated` of the export and of its messages (inside their attribute's
    JSON text), each line alone: rows the fast path takes are the reader's."""
    docs = (list(mutated(OTEL)) + list(mutated(OTEL_FLAT)) + list(mutated(OTEL_JSON))
            + [otlp(genai_attributes(inputs, outputs), [EVALUATION]) for inputs, outputs in mutated([GENAI_INPUT, GENAI_OUTPUT])]
            + [json_named(prompt, completion) for prompt, completion in mutated([OLDER_PROMPT, OLDER_COMPLETION])]
            + [otlp(genai_attributes(gen_ai__system_instructions=json.dumps(parts))) for parts in mutated(INSTRUCTIONS)])
    taken = 0
    for doc in docs:
        raw = json.dumps(doc).encode()
        got = columns.parse_otel_lines([raw])
        if got is not None:
            assert got[0].to_pylist() == otel_exact(raw), raw
            taken += 1
    assert taken >= 300, taken  # 397 of 3,318


# Langfuse generations, as the join hands them over: the line, its trace's version and its scores.
AGAIN = {"role": "user", "content": "And 3 plus 4?"}  # after an assistant's turn: a prompt ending in one is the reader's
LANGFUSE = {
    "id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00.25Z",
    "endTime": "2026-11-22T10:00:01.5+00:00", "model": "assistant", "version": None, "parentObservationId": None,
    "input": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 plus 3?"}],
    "output": {"role": "assistant", "content": "5"},
    "usageDetails": {"input": 10, "output": 1, "total": 11}, "costDetails": {"input": 0.25},
}
LANGFUSE_SCORES = [{"name": "judge", "value": 0.5, "label": None, "source": "eval"},
                   {"name": "tone", "value": None, "label": "polite", "source": "api"}]


def langfuse_line(*changes: tuple[str, object]) -> bytes:
    """LANGFUSE with each (dotted path, value) set; value ... removes the key."""
    return line_of(LANGFUSE, changes)


def langfuse_exact(raw: bytes, version: str | None = "v7", scores: list[dict] = LANGFUSE_SCORES) -> dict | None:
    import pickle

    (trace,) = formats.joined(("generation", raw, ("f", 1), [pickle.dumps((None, s), protocol=5) for s in scores], version))
    if isinstance(trace, formats.FormatError):
        return None
    try:
        return row_of(traces.convert(trace))
    except traces.InvalidTrace:
        return None


def langfuse_fast(lines: list[bytes], version: str | None = "v7", scores: list[dict] = LANGFUSE_SCORES):
    return columns.parse_langfuse_lines(lines, [version] * len(lines), [scores] * len(lines))


LEGACY = {"input": 10, "output": 1, "total": 11, "unit": "TOKENS"}
LANGFUSE_LINES = {
    "plain": langfuse_line(),
    "no nulls": langfuse_line(("version", ...), ("parentObservationId", ...)),
    "own version": langfuse_line(("version", "v8")),
    "own version empty": langfuse_line(("version", "")),
    "no model": langfuse_line(("model", ...)),
    "model empty": langfuse_line(("model", "")),
    # Langfuse's observations API v2 names the model providedModelName, and gives the trace's release.
    "provided model name": langfuse_line(("model", ...), ("providedModelName", "served")),
    "model and provided model name": langfuse_line(("providedModelName", "served")),
    "model null, provided model name": langfuse_line(("model", None), ("providedModelName", "served")),
    "model empty, provided model name empty": langfuse_line(("model", ""), ("providedModelName", "")),
    "release": langfuse_line(("release", "r3")),
    "release, own version": langfuse_line(("release", "r3"), ("version", "v8")),
    "release, own version empty": langfuse_line(("release", "r3"), ("version", "")),
    "release empty": langfuse_line(("release", "")),
    "no end": langfuse_line(("endTime", ...)),
    "end null": langfuse_line(("endTime", None)),
    "end empty": langfuse_line(("endTime", "")),
    "end before start": langfuse_line(("endTime", "2026-11-22T09:00:00Z")),
    "end in another zone": langfuse_line(("endTime", "2026-11-22T11:00:01.5+01:00")),
    "start with six digits": langfuse_line(("startTime", "2026-11-22T10:00:00.123456Z")),
    "start with seven digits": langfuse_line(("startTime", "2026-11-22T10:00:00.1234567Z")),
    "start naive": langfuse_line(("startTime", "2026-11-22T10:00:00")),
    "both naive": langfuse_line(("startTime", "2026-11-22T10:00:00.25"), ("endTime", "2026-11-22T10:00:01.5")),
    "naive with a space": langfuse_line(("startTime", "2026-11-22 10:00:00"), ("endTime", ...)),
    "start null": langfuse_line(("startTime", None)),
    "start in 2300": langfuse_line(("startTime", "2300-01-01T00:00:00Z"), ("endTime", ...)),
    "start before 1970": langfuse_line(("startTime", "1969-12-31T23:59:59Z")),
    "February 30th": langfuse_line(("startTime", "2026-02-30T10:00:00Z")),
    "usage legacy": langfuse_line(("usageDetails", ...), ("usage", LEGACY)),
    "usage details empty": langfuse_line(("usageDetails", {}), ("usage", LEGACY)),
    "usage details of other counts": langfuse_line(("usageDetails", {"cached": 3}), ("usage", LEGACY)),
    "usage details null": langfuse_line(("usageDetails", None), ("usage", LEGACY)),
    "no usage": langfuse_line(("usageDetails", ...)),
    "no usage, token fields": langfuse_line(("usageDetails", ...), ("promptTokens", 7), ("completionTokens", 2)),
    "no total": langfuse_line(("usageDetails.total", ...)),
    "no total, no nulls": langfuse_line(("usageDetails.total", ...), ("version", ...), ("parentObservationId", ...)),
    "total null": langfuse_line(("usageDetails.total", None)),
    "input count null": langfuse_line(("usageDetails.input", None), ("promptTokens", 7)),
    "no input count": langfuse_line(("usageDetails.input", ...), ("promptTokens", 7), ("version", ...),
                                     ("parentObservationId", ...)),
    "input count zero": langfuse_line(("usageDetails.input", 0), ("promptTokens", 7)),
    "negative count": langfuse_line(("usageDetails.output", -1)),
    "huge counts": langfuse_line(("usageDetails", {"input": 2**62, "output": 2**62})),
    # Usage types Langfuse counts as input or output (see formats._langfuse_tokens), and others.
    "cached and reasoning tokens": langfuse_line(("usageDetails", {"input": 10, "input_cached_tokens": 1024, "output": 1,
                                                                   "output_reasoning_tokens": 40, "total": 1075})),
    "cached tokens, no total": langfuse_line(("usageDetails", {"input": 10, "cache_read_input_tokens": 5,
                                                               "cache_creation_input_tokens": 3, "output": 1})),
    "a usage type of neither": langfuse_line(("usageDetails", {"input": 10, "output": 1, "reasoning": 3})),
    "cached tokens null": langfuse_line(("usageDetails", {"input": 10, "input_cached_tokens": None, "output": 1})),
    "cached tokens, input null": langfuse_line(("usageDetails", {"input": None, "input_cached_tokens": 4, "output": 1})),
    "cached tokens, no input": langfuse_line(("usageDetails", {"input_cached_tokens": 4, "output": 1}), ("promptTokens", 7)),
    "cached tokens past int64 together": langfuse_line(("usageDetails", {"input": 2**61, "input_cached_tokens": 2**62,
                                                                         "input_audio_tokens": 2**62, "output": 1})),
    "only other usage types": langfuse_line(("usageDetails", {"cached": 3})),
    "input as text": langfuse_line(("input", "What is 2 plus 3?")),
    "input as an object": langfuse_line(("input", {"messages": LANGFUSE["input"]})),
    "no input": langfuse_line(("input", ...)),
    "a message null": langfuse_line(("input.0", None)),
    "content null": langfuse_line(("input.0.content", None)),
    "content as parts": langfuse_line(("input.1.content", [{"type": "text", "text": "What is 2 plus 3?"}])),
    "no role": langfuse_line(("input.0.role", ...)),
    "unknown role": langfuse_line(("input.0.role", "bot")),
    "a tool call in the input": langfuse_line(("input", [*LANGFUSE["input"], {"role": "assistant", "tool_calls": [TOOL_CALL]},
                                                         {"role": "tool", "content": "5"}])),
    "no tool calls in the input": langfuse_line(("input", [*LANGFUSE["input"], {"role": "assistant", "content": "5",
                                                                                 "tool_calls": None}, AGAIN])),
    # LangChain's messages, as Langfuse's callback handler logs them.
    "a LangChain tool call in the input": langfuse_line(("input", [*LANGFUSE["input"], {
        "role": "assistant", "content": "", "additional_kwargs": {"tool_calls": [TOOL_CALL]}}, {"role": "tool", "content": "5"}])),
    "LangChain's arguments in the input": langfuse_line(("input", [*LANGFUSE["input"], {
        "role": "assistant", "content": "5", "additional_kwargs": {}}, AGAIN])),
    "LangChain's arguments in the output": langfuse_line(("output.additional_kwargs", {"refusal": None})),
    "output a LangChain tool call": langfuse_line(("output.additional_kwargs", {"tool_calls": [TOOL_CALL]})),
    "output an invalid tool call": langfuse_line(("output.invalid_tool_calls", [{"name": "add", "args": "{"}])),
    "output no invalid tool calls": langfuse_line(("output.invalid_tool_calls", [])),
    "LangChain's answer without calls": langfuse_line(("output", {"role": "assistant", "content": "5", "tool_calls": [],
                                                                  "invalid_tool_calls": [],
                                                                  "additional_kwargs": {"tool_calls": []}})),
    "LangChain's prompt without calls": langfuse_line(("input", [*LANGFUSE["input"], {
        "role": "assistant", "content": "5", "tool_calls": [], "invalid_tool_calls": [], "additional_kwargs": {}}, AGAIN])),
    "no user": langfuse_line(("input.1.role", "assistant")),
    "output as text": langfuse_line(("output", "5")),
    "output without content": langfuse_line(("output", {"role": "assistant"})),
    "output text and a tool call": langfuse_line(("output.tool_calls", [TOOL_CALL])),
    "output blank": langfuse_line(("output.content", " \u3000")),
    "output stopped by the content filter": langfuse_line(("output.finish_reason", "content_filter")),
    "output stopped as usual": langfuse_line(("output.finish_reason", "stop")),
    "no id": langfuse_line(("id", ...)),
    "unicode": langfuse_line(("output.content", "五")),
    "count as a float": langfuse_line(("usageDetails.input", 10.0)),
    "model as a number": langfuse_line(("model", 7)),
    "usage as text": langfuse_line(("usage", "many")),
    "role as a number": langfuse_line(("input.0.role", 1)),
    "count past int64": langfuse_line(("usageDetails.input", 2**63)),
    "snake case": json.dumps({"id": "g1", "trace_id": "t1", "type": "GENERATION", "start_time": LANGFUSE["startTime"],
                              "provided_model_name": "assistant", "input": LANGFUSE["input"], "output": LANGFUSE["output"],
                              "usage_details": LANGFUSE["usageDetails"]}).encode(),
}
# Lines pyarrow refuses, so that the generations read with them go to the exact path.
LANGFUSE_REFUSED = {
    "duplicate key": langfuse_line().replace(b'"model": "assistant"', b'"model": "assistant", "model": "other"'),
}


@pytest.mark.parametrize("name", LANGFUSE_LINES)
def test_a_langfuse_generation_the_fast_path_takes_is_the_row_the_join_makes(name):
    raw = LANGFUSE_LINES[name]
    for version, scores in (("v7", LANGFUSE_SCORES), (None, [])):
        got = langfuse_fast([raw], version, scores)
        fast = got[0].to_pylist() if got is not None else []
        assert len(fast) <= 1
        if fast:
            assert fast == [langfuse_exact(raw, version, scores)], name


def test_every_langfuse_generation_of_a_part_gets_the_same_answer_together_and_plain_ones_take_the_fast_path():
    taken = taken_together(LANGFUSE_LINES, langfuse_fast, langfuse_exact)
    assert {"plain", "no nulls", "own version", "own version empty", "no end", "end null", "end empty",
            "end in another zone", "start with six digits", "usage legacy", "usage details null", "no usage",
            "no usage, token fields", "no total, no nulls", "input count zero", "no input count", "content null",
            "unicode", "start naive", "both naive", "no tool calls in the input", "no total", "total null",
            "output stopped as usual", "provided model name", "model and provided model name",
            "model null, provided model name", "release", "release, own version", "release, own version empty",
            "release empty", "cached and reasoning tokens", "cached tokens, no total", "a usage type of neither",
            "LangChain's arguments in the input", "LangChain's arguments in the output", "output no invalid tool calls",
            "LangChain's answer without calls", "LangChain's prompt without calls"} <= taken
    assert not taken & {"usage details empty", "usage details of other counts", "output stopped by the content filter",
                        "input count null", "huge counts", "input as text", "input as an object", "a message null",
                        "content as parts", "output as text", "start in 2300", "February 30th",
                        "count as a float", "model as a number", "usage as text", "role as a number", "count past int64",
                        "snake case", "a tool call in the input", "output text and a tool call", "cached tokens null",
                        "cached tokens, input null", "cached tokens, no input", "cached tokens past int64 together",
                        "only other usage types", "a LangChain tool call in the input", "output a LangChain tool call",
                        "output an invalid tool call"}
    for name, raw in LANGFUSE_REFUSED.items():
        assert langfuse_fast([LANGFUSE_LINES["plain"], raw]) is None, name
    odd_score = [{"name": 7, "value": 1.0, "label": None, "source": "api"}]
    plain = LANGFUSE_LINES["plain"]
    assert columns.parse_langfuse_lines([plain, plain], ["v7", "v7"], [odd_score, []])[1].tolist() == [1]


def test_a_langfuse_generation_ends_where_the_join_puts_it():
    """The join reads an ISO time as float seconds (datetime.timestamp) and back (datetime.fromtimestamp)."""
    import random
    from datetime import timedelta, timezone

    rng = random.Random(0)
    for _ in range(300):
        start = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=rng.randrange(0, 2**33 * 10**6))
        end = start + timedelta(microseconds=rng.choice([rng.randrange(10**13), rng.randrange(10**6), 0]))
        raw = langfuse_line(("startTime", start.isoformat()), ("endTime", end.isoformat()))
        got = langfuse_fast([raw])
        if end.year <= 2242:
            assert got[0].to_pylist() == [langfuse_exact(raw)], (start, end)


def test_a_langfuse_generation_with_any_value_anywhere_gets_the_joins_row_or_none():
    """:func:`tests.conftest.mutated` of a generation, each line alone: a row the fast path takes is the join's."""
    taken = 0
    for doc in mutated(LANGFUSE):
        raw = json.dumps(doc).encode()
        got = langfuse_fast([raw])
        if got is not None:
            assert got[0].to_pylist() == [langfuse_exact(raw)], raw
            taken += 1
    assert taken >= 40, taken


OPENAI_BATCH_INPUT = {"custom_id": "q-1", "method": "POST", "url": "/v1/chat/completions",
               "body": {"model": "assistant", "messages": OPENAI["request"]["messages"]}}
OPENAI_BATCH_OUTPUT = {"id": "batch_req_1", "custom_id": "q-1", "error": None,
                "response": {"status_code": 200, "request_id": "req_1", "body": OPENAI["response"]}}
# Each: (the output line, the input lines of its custom_id).
OPENAI_BATCHES = {
    "plain": (line_of(OPENAI_BATCH_OUTPUT, ()), [line_of(OPENAI_BATCH_INPUT, ())]),
    "no error key": (line_of(OPENAI_BATCH_OUTPUT, (("error", ...),)), [line_of(OPENAI_BATCH_INPUT, ())]),
    "the request twice": (line_of(OPENAI_BATCH_OUTPUT, ()), [line_of(OPENAI_BATCH_INPUT, ())] * 2),
    "two requests": (line_of(OPENAI_BATCH_OUTPUT, ()), [line_of(OPENAI_BATCH_INPUT, ()), line_of(OPENAI_BATCH_INPUT, (("body.model", "other"),))]),
    "the request twice, spaced otherwise": (line_of(OPENAI_BATCH_OUTPUT, ()), [line_of(OPENAI_BATCH_INPUT, ()),
                                                                      json.dumps(OPENAI_BATCH_INPUT, indent=1).encode()]),
    "no request": (line_of(OPENAI_BATCH_OUTPUT, ()), []),
    "status 400": (line_of(OPENAI_BATCH_OUTPUT, (("response.status_code", 400),)), [line_of(OPENAI_BATCH_INPUT, ())]),
    "status as a float": (line_of(OPENAI_BATCH_OUTPUT, (("response.status_code", 200.0),)), [line_of(OPENAI_BATCH_INPUT, ())]),
    "an error": (line_of(OPENAI_BATCH_OUTPUT, (("error", {"message": "expired"}),)), [line_of(OPENAI_BATCH_INPUT, ())]),
    "an empty error": (line_of(OPENAI_BATCH_OUTPUT, (("error", {}),)), [line_of(OPENAI_BATCH_INPUT, ())]),
    "no response": (line_of(OPENAI_BATCH_OUTPUT, (("response", None), ("error", {"message": "expired"}))), [line_of(OPENAI_BATCH_INPUT, ())]),
    "embeddings": (line_of(OPENAI_BATCH_OUTPUT, ()), [line_of(OPENAI_BATCH_INPUT, (("url", "/v1/embeddings"),))]),
    "url with a slash": (line_of(OPENAI_BATCH_OUTPUT, ()), [line_of(OPENAI_BATCH_INPUT, (("url", "/v1/chat/completions/"),))]),
    "body not an object": (line_of(OPENAI_BATCH_OUTPUT, ()), [line_of(OPENAI_BATCH_INPUT, (("body", "hi"),))]),
    "response body not an object": (line_of(OPENAI_BATCH_OUTPUT, (("response.body", [1]),)), [line_of(OPENAI_BATCH_INPUT, ())]),
    "two choices": (line_of(OPENAI_BATCH_OUTPUT, (("response.body.choices", OPENAI["response"]["choices"] * 2),)),
                    [line_of(OPENAI_BATCH_INPUT, ())]),
    "a tool call asked": (line_of(OPENAI_BATCH_OUTPUT, ()), [line_of(OPENAI_BATCH_INPUT, (("body.messages", [
        *OPENAI["request"]["messages"], {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}]),))]),
    "unicode": (line_of(OPENAI_BATCH_OUTPUT, (("response.body.choices.0.message.content", "五"),)), [line_of(OPENAI_BATCH_INPUT, ())]),
}


def openai_batch_exact(output: bytes, requests: list[bytes]) -> list[dict] | None:
    found = formats.joined(("response", output, ("f", 1), requests, None))
    try:
        return [row_of(traces.convert(t)) for t in found if not isinstance(t, formats.FormatError)] or None
    except traces.InvalidTrace:
        return None


def test_every_batch_output_gets_the_joins_rows_together_or_alone_and_plain_ones_take_the_fast_path():
    names = list(OPENAI_BATCHES)
    for lines in ([OPENAI_BATCHES[name] for name in names], *([OPENAI_BATCHES[name]] for name in names)):
        got = columns.parse_batch_lines([output for output, _ in lines], [asked for _, asked in lines])
        if got is not None:  # a choice a row
            for i, rows in by_line(got).items():
                assert rows == openai_batch_exact(*lines[i]), names[i] if len(lines) > 1 else lines
    table, index = columns.parse_batch_lines([output for output, _ in OPENAI_BATCHES.values()], [a for _, a in OPENAI_BATCHES.values()])
    taken = {names[i] for i in index.tolist()}
    assert taken == {"plain", "no error key", "the request twice", "url with a slash", "unicode", "two choices"}, taken
    assert openai_batch_exact(*OPENAI_BATCHES["an empty error"]) and openai_batch_exact(*OPENAI_BATCHES["the request twice, spaced otherwise"])
    # A line pyarrow refuses leaves the others read with it to the exact path.
    refused = line_of(OPENAI_BATCH_OUTPUT, (("response.body.created", 1795340000.5),))
    assert columns.parse_batch_lines([OPENAI_BATCHES["plain"][0], refused], [OPENAI_BATCHES["plain"][1]] * 2) is None


# Bedrock's invocation log records of Converse calls: the fast path agrees with the reader
# (formats.from_bedrock) and the trace's validation, line for line.
def bedrock_line(*changes: tuple[str, object]) -> bytes:
    return line_of(BEDROCK, changes)


_IN, _OUT = "input.inputBodyJson", "output.outputBodyJson"
BEDROCK_LINES = {
    "plain": bedrock_line(),
    "streamed": bedrock_line(("operation", "ConverseStream")),
    "no system": bedrock_line((f"{_IN}.system", ...)),
    "system empty": bedrock_line((f"{_IN}.system", [])),
    "system of two blocks": bedrock_line((f"{_IN}.system", [{"text": "Be brief."}, {"text": "Be right."}])),
    "a message of two blocks": bedrock_line((f"{_IN}.messages.0.content", [{"text": "What is"}, {"text": "2 plus 3?"}])),
    "an earlier answer of two blocks": bedrock_line((f"{_IN}.messages", [{"role": "user", "content": [{"text": "Hi"}]},
                                                                         {"role": "assistant", "content": [{"text": "Hel"}, {"text": "lo."}]},
                                                                         {"role": "user", "content": [{"text": "What"}, {"text": "now?"}]}])),
    "turns": bedrock_line((f"{_IN}.messages", [{"role": "user", "content": [{"text": "Hi"}]},
                                                {"role": "assistant", "content": [{"text": "Hello."}]},
                                                {"role": "user", "content": [{"text": "What is 2 plus 3?"}]}])),
    "cached": bedrock_line((f"{_OUT}.usage.cacheReadInputTokens", 1800), (f"{_OUT}.usage.cacheWriteInputTokens", 7)),
    "cached, Nova's names": bedrock_line((f"{_OUT}.usage.cacheReadInputTokenCount", 30)),
    "cache null": bedrock_line((f"{_OUT}.usage.cacheReadInputTokens", None)),
    "profile ARN": bedrock_line(("modelId", "arn:aws:bedrock:us-west-2:1:inference-profile/global.anthropic.claude-opus-4-6-v1")),
    "ARN ending in a slash": bedrock_line(("modelId", "arn:aws:bedrock:us-west-2:1:inference-profile/")),
    "no model": bedrock_line(("modelId", "")),
    "no id": bedrock_line(("requestId", "")),
    "no latency": bedrock_line((f"{_OUT}.metrics", ...)),
    "metrics null": bedrock_line((f"{_OUT}.metrics", None)),
    "latency null": bedrock_line((f"{_OUT}.metrics.latencyMs", None)),
    "latency fractional": bedrock_line((f"{_OUT}.metrics.latencyMs", 1250.0005)),
    "latency negative": bedrock_line((f"{_OUT}.metrics.latencyMs", -1)),
    "time with a fraction": bedrock_line(("timestamp", "2026-11-22T10:15:02.123456Z")),
    "time with an offset": bedrock_line(("timestamp", "2026-11-22T12:15:02+02:00")),
    "time without a zone": bedrock_line(("timestamp", "2026-11-22T10:15:02")),
    "time of BigQuery's kind": bedrock_line(("timestamp", "2026-11-22 10:15:02 UTC")),
    "tool use": bedrock_line((f"{_OUT}.stopReason", "tool_use"), (f"{_OUT}.output.message.content", [
        {"text": "Let me add."}, {"toolUse": {"toolUseId": "t", "name": "add", "input": {}}}])),
    "guardrail": bedrock_line((f"{_OUT}.stopReason", "guardrail_intervened")),
    "max tokens": bedrock_line((f"{_OUT}.stopReason", "max_tokens")),
    "an image": bedrock_line((f"{_IN}.messages.0.content", [{"text": "What is this?"}, {"image": {"format": "png"}}])),
    "guarded text": bedrock_line((f"{_IN}.messages.0.content", [{"guardContent": {"text": {"text": "What is 2 plus 3?"}}}])),
    "reasoning": bedrock_line((f"{_OUT}.output.message.content", [{"reasoningContent": {"reasoningText": {"text": "2+3"}}},
                                                                  {"text": "5"}])),
    "an error": bedrock_line(("errorCode", "ThrottlingException")),
    "body kept apart": bedrock_line((f"{_IN}", ...), ("input.inputBodyS3Path", "s3://b/x/data/r_input.json.gz")),
    "no usage": bedrock_line((f"{_OUT}.usage", ...)),
    "no total": bedrock_line((f"{_OUT}.usage.totalTokens", ...)),
    "input count null": bedrock_line((f"{_OUT}.usage.inputTokens", None)),
    "no role": bedrock_line((f"{_IN}.messages.0.role", ...)),
    "unknown role": bedrock_line((f"{_IN}.messages.0.role", "bot")),
    "no user": bedrock_line((f"{_IN}.messages.0.role", "assistant")),
    "a prefill": bedrock_line((f"{_IN}.messages", [{"role": "user", "content": [{"text": "What is 2 plus 3?"}]},
                                                    {"role": "assistant", "content": [{"text": "The sum is"}]}])),
    "blank answer": bedrock_line((f"{_OUT}.output.message.content", [{"text": " \u3000"}])),
    "no answer blocks": bedrock_line((f"{_OUT}.output.message.content", [])),
    "no prompt blocks": bedrock_line((f"{_IN}.messages.0.content", [])),
    "unicode": bedrock_line((f"{_OUT}.output.message.content", [{"text": "五"}])),
    "also ours": bedrock_line(("trace_id", "t"), ("completion", "5")),
    "also OpenAI's": bedrock_line(("choices", []), ("messages", [])),
    "a text prompt too": bedrock_line((f"{_IN}.prompt", "Hi")),
    "a fingerprint": bedrock_line((f"{_OUT}.system_fingerprint", "fp")),
    "guardrail's flag": bedrock_line((f"{_OUT}.amazon-bedrock-guardrailAction", "INTERVENED")),
    "InvokeModel": bedrock_line(("operation", "InvokeModel")),
    "text null": bedrock_line((f"{_IN}.messages.0.content.0.text", None)),
    "role a number": bedrock_line((f"{_IN}.messages.0.role", 7)),
    "request metadata": bedrock_line(("requestMetadata", {"team": "search"}), ("inferenceRegion", "us-east-2")),
}


def taken_alone(raw: bytes, parse) -> None:
    """A line ``parse`` takes on its own is the row the reader and the trace's validation make of it."""
    got = parse([raw])
    if got is not None:
        assert got[0].to_pylist() == openai_exact(raw), raw


@pytest.mark.parametrize("name", BEDROCK_LINES)
def test_a_bedrock_record_the_fast_path_takes_is_the_row_the_reader_makes(name):
    taken_alone(BEDROCK_LINES[name], columns.parse_bedrock_lines)


def test_every_bedrock_record_of_a_block_gets_the_same_answer_together_and_plain_ones_take_the_fast_path():
    taken = taken_together(BEDROCK_LINES, columns.parse_bedrock_lines, openai_exact)
    assert {"plain", "streamed", "no system", "system empty", "system of two blocks", "a message of two blocks", "turns",
            "cached", "cached, Nova's names", "cache null", "profile ARN", "no latency", "metrics null", "latency null",
            "latency fractional", "time with a fraction", "unicode", "request metadata"} <= taken
    assert not taken & {"ARN ending in a slash", "no model", "no id", "latency negative", "time with an offset",
                        "time without a zone", "time of BigQuery's kind", "tool use", "guardrail", "an image",
                        "guarded text", "reasoning", "an error", "body kept apart", "no usage", "no total",
                        "input count null", "no role", "unknown role", "no user", "blank answer", "no answer blocks",
                        "also ours", "also OpenAI's", "a text prompt too", "a fingerprint", "guardrail's flag",
                        "InvokeModel", "text null", "role a number",
                        "max tokens"}  # an answer cut off: the reader's, as the run says (truncated_answers)


def test_any_value_anywhere_in_a_bedrock_record_takes_the_fast_path_only_as_the_reader_reads_it():
    for doc in mutated(BEDROCK):
        taken_alone(json.dumps(doc).encode(), columns.parse_bedrock_lines)


# Vertex AI's rows of Gemini's calls: the fast path agrees with the reader (formats.from_vertex),
# whether the row holds its JSON as objects or as text (BigQuery's export).
def vertex_line(*changes: tuple[str, object], as_text: bool = False) -> bytes:
    doc = json.loads(line_of(VERTEX, changes))
    if as_text:
        doc.update({k: json.dumps(doc[k]) for k in ("full_request", "full_response", "metadata") if isinstance(doc.get(k), dict)})
    return json.dumps(doc).encode()


_REQ, _RESP = "full_request", "full_response"
_PART = {"text": "5"}
VERTEX_LINES = {
    "plain": vertex_line(),
    "as BigQuery exports it": vertex_line(("logging_time", "2026-11-22 10:15:03.284000 UTC"), as_text=True),
    "pretty-printed text": json.dumps({**VERTEX, _REQ: json.dumps(VERTEX[_REQ], indent=2)}).encode(),
    "text of text": json.dumps({**VERTEX, _REQ: json.dumps(json.dumps(VERTEX[_REQ]))}).encode(),
    "id a number": vertex_line(("request_id", 5374205265901353984)),
    "id empty": vertex_line(("request_id", "")),
    "no metadata": vertex_line(("metadata", ...)),
    "metadata null": vertex_line(("metadata", None)),
    "latency as text": vertex_line(("metadata.request_latency", "1250")),
    "latency negative": vertex_line(("metadata.request_latency", -1)),
    "latency fractional": vertex_line(("metadata.request_latency", 11225.994)),
    "no system": vertex_line((f"{_REQ}.systemInstruction", ...)),
    "system null": vertex_line((f"{_REQ}.systemInstruction", None)),
    "system empty": vertex_line((f"{_REQ}.systemInstruction", {})),
    "system of no parts": vertex_line((f"{_REQ}.systemInstruction", {"parts": []})),
    "system of two parts": vertex_line((f"{_REQ}.systemInstruction", {"parts": [{"text": "Be brief."}, {"text": "Be right."}]})),
    "an earlier answer of two parts": vertex_line((f"{_REQ}.contents", [
        {"role": "user", "parts": [{"text": "Hi"}]}, {"role": "model", "parts": [{"text": "Hel"}, {"text": "lo."}]},
        {"role": "user", "parts": [{"text": "What is"}, {"text": "2 plus 3?"}]}])),
    "a thought in the prompt": vertex_line((f"{_REQ}.contents.0.parts", [{"text": "hmm", "thought": True},
                                                                         {"text": "What is 2 plus 3?", "thought": False}])),
    "a signature": vertex_line((f"{_REQ}.contents.0.parts.0.thoughtSignature", "c2ln")),
    "no role": vertex_line((f"{_REQ}.contents.0.role", ...)),
    "role system": vertex_line((f"{_REQ}.contents.0.role", "system")),
    "role a number": vertex_line((f"{_REQ}.contents.0.role", 1)),
    "turns": vertex_line((f"{_REQ}.contents", [{"role": "user", "parts": [{"text": "Hi"}]},
                                               {"role": "model", "parts": [{"text": "Hello."}]},
                                               {"role": "user", "parts": [{"text": "What is 2 plus 3?"}]}])),
    "no contents": vertex_line((f"{_REQ}.contents", [])),
    "a context cache": vertex_line((f"{_REQ}.cachedContent", "projects/p/cachedContents/1")),
    "an image": vertex_line((f"{_REQ}.contents.0.parts", [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}])),
    "a function's result": vertex_line((f"{_REQ}.contents.0.parts", [{"functionResponse": {"name": "f", "response": {}}}])),
    "tools offered": vertex_line((f"{_REQ}.tools", [{"functionDeclarations": [{"name": "add"}]}])),
    "two candidates": vertex_line((f"{_RESP}.candidates", GEMINI_RESPONSE["candidates"] * 2)),
    "no candidates": vertex_line((f"{_RESP}.candidates", []), (f"{_RESP}.promptFeedback", {"blockReason": "SAFETY"})),
    "max tokens": vertex_line((f"{_RESP}.candidates.0.finishReason", "MAX_TOKENS")),
    "safety": vertex_line((f"{_RESP}.candidates.0.finishReason", "SAFETY")),
    "finish null": vertex_line((f"{_RESP}.candidates.0.finishReason", None)),
    "no finish": vertex_line((f"{_RESP}.candidates.0.finishReason", ...)),
    "a call it failed to make": vertex_line((f"{_RESP}.candidates.0.finishReason", "MALFORMED_FUNCTION_CALL")),
    "a function call": vertex_line((f"{_RESP}.candidates.0.content.parts", [{"functionCall": {"name": "add", "args": {}}}])),
    "an answer in parts": vertex_line((f"{_RESP}.candidates.0.content.parts", [{"text": "The answer "}, {"text": "is 5."}])),
    "an answer of thoughts alone": vertex_line((f"{_RESP}.candidates.0.content.parts", [{"text": "hmm", "thought": True}])),
    "a blank answer": vertex_line((f"{_RESP}.candidates.0.content.parts", [{"text": " \u3000"}])),
    "no usage": vertex_line((f"{_RESP}.usageMetadata", ...)),
    "usage null": vertex_line((f"{_RESP}.usageMetadata", None)),
    "usage empty": vertex_line((f"{_RESP}.usageMetadata", {})),
    "counts of 0 left out": vertex_line((f"{_RESP}.usageMetadata", {"promptTokenCount": 3})),
    "a count null": vertex_line((f"{_RESP}.usageMetadata.promptTokenCount", None)),
    "a count a float": vertex_line((f"{_RESP}.usageMetadata.promptTokenCount", 3.0)),
    "a count negative": vertex_line((f"{_RESP}.usageMetadata.candidatesTokenCount", -40)),
    "no total": vertex_line((f"{_RESP}.usageMetadata.totalTokenCount", ...)),
    "no model version": vertex_line((f"{_RESP}.modelVersion", ...)),
    "model version empty": vertex_line((f"{_RESP}.modelVersion", "")),
    "no model at all": vertex_line((f"{_RESP}.modelVersion", ...), ("model", None)),
    "an error": vertex_line((f"{_RESP}.error", {"code": 500, "message": "boom"})),
    "chunks": json.dumps({**VERTEX, _RESP: [GEMINI_RESPONSE]}).encode(),
    "logged with an offset": vertex_line(("logging_time", "2026-11-22T12:15:03.284+02:00")),
    "logged in microseconds": vertex_line(("logging_time", "2026-11-22T10:15:03.284123Z")),
    "logged without a zone": vertex_line(("logging_time", "2026-11-22T10:15:03.284")),
    "logged on February 30th": vertex_line(("logging_time", "2026-02-30T10:15:03Z")),
    "also ours": vertex_line(("trace_id", "t"), ("completion", "5")),
    "also OpenAI's": vertex_line(("choices", []), ("messages", [])),
    "prompt feedback beside": vertex_line((f"{_RESP}.promptFeedback", {"safetyRatings": []})),
    "Claude's": vertex_line((_REQ, {"anthropic_version": "vertex-2023-10-16", "messages": [{"role": "user", "content": "q"}]}),
                            (_RESP, {"id": "m", "type": "message", "content": [{"type": "text", "text": "5"}]})),
}


@pytest.mark.parametrize("name", VERTEX_LINES)
def test_a_vertex_row_the_fast_path_takes_is_the_row_the_reader_makes(name):
    taken_alone(VERTEX_LINES[name], columns.parse_vertex_lines)


def test_every_vertex_row_of_a_block_gets_the_same_answer_together_and_plain_ones_take_the_fast_path():
    lines = {k: v for k, v in VERTEX_LINES.items() if k != "logged on February 30th"}  # pyarrow refuses its block
    taken = taken_together(lines, columns.parse_vertex_lines, openai_exact)
    assert {"plain", "as BigQuery exports it", "pretty-printed text", "latency fractional", "no system", "system null",
            "system of no parts", "system of two parts", "a thought in the prompt", "a signature", "no role", "role system",
            "turns", "tools offered", "finish null", "no finish", "an answer in parts", "no usage",
            "usage null", "usage empty", "counts of 0 left out", "no total", "no model version", "model version empty",
            "logged in microseconds", "prompt feedback beside"} <= taken
    assert not taken & {"text of text", "id a number", "id empty", "no metadata", "metadata null", "latency as text",
                        "latency negative", "system empty", "role a number", "no contents", "a context cache", "an image",
                        "a function's result", "two candidates", "no candidates", "safety", "a call it failed to make",
                        "a function call", "an answer of thoughts alone", "a blank answer", "a count null",
                        "a count a float", "a count negative", "no model at all", "an error", "chunks",
                        "logged with an offset", "logged without a zone", "also ours", "also OpenAI's", "Claude's",
                        "max tokens"}  # an answer cut off: the reader's, as the run says (truncated_answers)
    assert columns.parse_vertex_lines([VERTEX_LINES["plain"], VERTEX_LINES["logged on February 30th"]]) is None


@pytest.mark.parametrize("as_text", [False, True], ids=["objects", "text"])
def test_any_value_anywhere_in_a_vertex_row_takes_the_fast_path_only_as_the_reader_reads_it(as_text):
    for doc in mutated(VERTEX):
        if as_text:
            doc = {**doc, **{k: json.dumps(doc[k]) for k in ("full_request", "full_response", "metadata")
                             if isinstance(doc.get(k), dict)}}
        taken_alone(json.dumps(doc).encode(), columns.parse_vertex_lines)
