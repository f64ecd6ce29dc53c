import json

import pytest

from ctpipe.traces import InvalidTrace, convert, decode
from tests.conftest import trace


def reason(line: str) -> str:
    with pytest.raises(InvalidTrace) as e:
        decode(line)
    return e.value.reason


def test_valid_record_parses():
    rec = decode(json.dumps(trace(1, feedback={"thumb": "up", "rating": 4.5})))
    assert rec.prompt == "What is 2 plus 3?" and rec.feedback.thumb == "up"


@pytest.mark.parametrize("written, kept", [
    ("2026-11-22T10:59:59.9999999Z", "2026-11-22T10:59:59.999999+00:00"),
    ("2026-11-22T10:59:59.123456789+00:00", "2026-11-22T10:59:59.123456+00:00"),
    ("2026-11-22T10:59:59.5Z", "2026-11-22T10:59:59.500000+00:00"),
])
def test_a_time_of_more_than_six_fractional_digits_is_cut_to_the_microsecond(written, kept):
    """As Go's RFC3339Nano and Java write them: cut as other formats' and Parquet's nanoseconds are,
    not rounded (into the next hour, at its last half-microsecond), from a line or from a Parquet row."""
    doc = {**trace(1), "start_time": written, "end_time": written}
    for rec in (decode(json.dumps(doc)), decode(json.dumps(doc).encode()), convert(doc)):
        assert (rec.start_time.isoformat(), rec.end_time.isoformat()) == (kept, kept)


@pytest.mark.parametrize("field, value", [("end_time", "9999-12-31T23:59:59-01:00"), ("start_time", "0001-01-01T00:30:00+01:00")])
def test_a_time_an_offset_takes_past_the_years_a_datetime_holds_is_refused_naming_it(field, value):
    """Such a time was published, and Python's readers of the table failed on it (pyarrow's to_pylist)."""
    with pytest.raises(InvalidTrace) as e:
        decode(json.dumps(trace(1, **{field: value})))
    assert e.value.reason == "invalid_field" and e.value.detail == f"`{field}`: {value} is outside the years 1 to 9999 in UTC"


def test_unknown_fields_are_ignored():
    assert decode(json.dumps(trace(1) | {"new_field": 1})).trace_id == "t1"


@pytest.mark.parametrize(
    "line, expected",
    [
        ('{"trace_id": "t1", ', "invalid_json"),
        ("[1, 2]", "not_an_object"),
        (json.dumps({k: v for k, v in trace(1).items() if k != "trace_id"}), "missing_field"),
        (json.dumps(trace(1, usage={"prompt_tokens": "10", "completion_tokens": 2, "total_tokens": 12})), "invalid_field"),
        (json.dumps(trace(1, completion="")), "invalid_field"),
        (json.dumps(trace(1, completion="   ")), "invalid_field"),
        (json.dumps(trace(1, latency_ms=float("nan"))), "non_finite_number"),
        (json.dumps(trace(1, latency_ms=float("inf"))), "non_finite_number"),
        (json.dumps(trace(1)).replace('"latency_ms": 40.0', '"latency_ms": 1e999'), "non_finite_number"),  # reads as inf
        (json.dumps(trace(1, start_time="yesterday")), "invalid_field"),
        (json.dumps(trace(1, start_time="2026-11-22T10:00:00")), "invalid_field"),  # no timezone
        (json.dumps(trace(1, messages=[{"role": "assistant", "content": "hi"}])), "invalid_field"),
        (json.dumps(trace(1, feedback={"thumb": "sideways"})), "invalid_field"),
        (json.dumps(trace(1, end_time="2026-11-22T09:00:00+00:00")), "invalid_field"),
        (json.dumps(trace(1, messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                                       {"role": "user", "content": " \n"}])), "invalid_field"),  # a blank prompt
        (json.dumps(trace(1, completion="Cut \ud83d")), "invalid_utf8"),  # half an emoji, escaped
    ],
)
def test_bad_records_are_rejected_with_a_reason(line, expected):
    assert reason(line) == expected


def test_a_surrogate_escaped_alone_is_named_and_a_pair_is_read():
    with pytest.raises(InvalidTrace, match=r"\\udc01 is half of a character"):
        decode(json.dumps(trace(1, completion="\U0001f600 \udc01")))
    assert decode(json.dumps(trace(1, completion="\U0001f600"))).completion == "\U0001f600"
    assert decode(json.dumps(trace(1, completion="\\ud83d"))).completion == "\\ud83d"  # a backslash, then text


def test_a_record_whose_text_holds_half_a_character_is_refused_naming_the_field():
    """JSON text within a record (a message list kept as text, a stored body) parsed by Python's
    reader keeps a surrogate escaped alone, which no table can hold."""
    doc = json.loads(json.dumps(trace(1)))
    doc["messages"][0]["content"] = json.loads('"Cut \\ud83d"')
    with pytest.raises(InvalidTrace) as e:
        convert(doc)
    assert e.value.reason == "invalid_utf8" and e.value.detail.startswith("`messages[0].content`: \\ud83d is half")
    doc["messages"][0]["content"] = "Whole \U0001f600"
    assert convert(doc).messages[0].content == "Whole \U0001f600"


def test_the_detail_names_the_field():
    with pytest.raises(InvalidTrace) as e:
        decode(json.dumps(trace(1, usage={"prompt_tokens": "x", "completion_tokens": 2, "total_tokens": 12})))
    assert "usage.prompt_tokens" in e.value.detail


@pytest.mark.parametrize("change, where", [
    ({"latency_ms": float("inf")}, "`latency_ms` is inf"),
    ({"feedback": {"thumb": None, "rating": float("nan")}}, "`feedback.rating` is nan"),
    ({"scores": [{"name": "judge", "value": 0.5, "source": "eval"}, {"name": "judge", "value": float("-inf"),
                                                                     "source": "eval"}]}, "`scores[1].value` is -inf"),
])
def test_a_non_finite_number_a_parquet_row_can_hold_is_refused_as_json_refuses_one(change, where):
    with pytest.raises(InvalidTrace) as e:
        convert({**trace(0), **change})
    assert (e.value.reason, e.value.detail) == ("non_finite_number", where)


def test_a_null_feedback_or_scores_is_none_as_a_missing_one_is():
    """A Parquet row cannot tell null from missing, and a writer's None means none."""
    for record in ({**trace(0), "feedback": None, "scores": None}, {k: v for k, v in trace(0).items()
                                                                   if k not in ("feedback", "scores")}):
        for rec in (convert(record), decode(json.dumps(record))):
            assert (rec.feedback.thumb, rec.feedback.rating, rec.scores) == (None, None, [])


def test_a_field_of_the_wrong_type_is_refused_naming_its_value():
    """The field alone was named ("Expected `int`, got `str` - at `usage.prompt_tokens`"): which value
    was wrong was in the raw record only."""
    doc = {"trace_id": "t1", "start_time": "2026-11-22T10:00:00+00:00", "end_time": "2026-11-22T10:00:01+00:00",
           "model": {"name": "m", "version": "v"}, "messages": [{"role": "user", "content": "hi"}], "completion": "yo",
           "usage": {"prompt_tokens": "five", "completion_tokens": 1, "total_tokens": 2}, "latency_ms": 1}
    for read in (lambda d: decode(json.dumps(d)), convert):
        with pytest.raises(InvalidTrace, match="^invalid_field: Expected `int`, got `str` - at `usage.prompt_tokens`: 'five'$"):
            read(doc)
        long = {**doc, "usage": None, "messages": [{"role": "user", "content": ["x" * 200]}]}
        with pytest.raises(InvalidTrace, match=r"at `messages\[0\].content`: \['x+\.\.\.x+") as e:  # cut
            read(long)
        assert len(str(e.value).partition("content`: ")[2]) <= 80
