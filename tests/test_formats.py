"""Trace formats users have (OpenAI logs, OTLP GenAI spans) normalized into valid ctpipe trace records."""

from __future__ import annotations

import copy
import json
import pickle
import re
from decimal import Decimal

import pytest

from ctpipe import traces
from ctpipe.formats import FormatError, detect, from_otel, normalize
from ctpipe.traces import InvalidTrace, decode

OPENAI = {
    "request": {"model": "ctpipe-arith", "messages": [{"role": "user", "content": "What is 2 plus 3?"}]},
    "response": {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1795340000, "model": "ctpipe-arith",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "5"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 19, "completion_tokens": 2, "total_tokens": 21},
    },
    "metadata": {"model_version": "3", "thumb": "up"},
    "latency_ms": 41.5,
}

# A request as Helicone's export tool writes it with its bodies (@helicone/export --include-body):
# the fields of its request API's ClickHouse query, times as ClickHouse writes them (UTC, no zone),
# 64-bit counts and scores quoted, as it writes 64-bit integers in JSON by default.
HELICONE = {
    "response_id": "0b7d8a3e-51c6-4c6f-9d0c-3c5d2b7f4e10", "response_created_at": "2026-11-22 10:15:03.375",
    "response_body": OPENAI["response"], "response_status": 200, "request_id": "6f1c0c52-1b1e-4a36-9d1b-1c2f0f7f6a11",
    "request_body": OPENAI["request"], "request_created_at": "2026-11-22 10:15:02.125", "request_user_id": "u1",
    "request_properties": {"env": "prod"}, "provider": "OPENAI", "delay_ms": 1250, "request_model": "ctpipe-arith",
    "time_to_first_token": 310, "total_tokens": "21", "completion_tokens": "2", "prompt_tokens": "19",
    "country_code": "DE", "scores": {"helicone-score-feedback": "1", "accuracy": "90"}, "properties": {"env": "prod"},
    "asset_ids": [], "target_url": "https://api.openai.com/v1/chat/completions", "cache_enabled": False,
    "cost": 0.00002, "prompt_id": "", "storage_location": "s3", "model": "ctpipe-arith",
}
# A log of Portkey's Logs Export API (JSONL, the fields of its requested_data): the bodies as objects,
# its own time, latency (ms), status and provider beside them.
PORTKEY = {
    "id": "3f6c2a9e-1b7d-4e2a-9c51-0d8e7f4a6b11", "trace_id": "7d0e5c8a-2f41-4b9e-8a63-5c1d9e2f7a40",
    "created_at": "2026-11-22T10:04:11.482Z", "request": OPENAI["request"], "response": OPENAI["response"],
    "is_success": 1, "ai_org": "openai", "ai_model": "ctpipe-arith", "req_units": 19, "res_units": 2, "total_units": 21,
    "request_url": "https://api.openai.com/v1/chat/completions", "cost": 0.027, "cost_currency": "USD",
    "response_time": 912, "response_status_code": 200, "mode": "SINGLE", "config": None, "prompt_slug": None,
    "metadata": {"_user": "u1", "env": "prod"},
}

# A row of LiteLLM's spend logs (its proxy's LiteLLM_SpendLogs table, exported from PostgreSQL as JSON
# lines), the proxy told to keep prompts (store_prompts_in_spend_logs): the request body and the answer
# as JSON text, times as PostgreSQL keeps them (UTC, no zone), cache_hit as text.
SPEND_LOG = {
    "request_id": "chatcmpl-1", "call_type": "acompletion", "api_key": "88dc28d0f030c55ed4ab77ed8faf0981",
    "spend": 2.1e-05, "total_tokens": 21, "prompt_tokens": 19, "completion_tokens": 2,
    "startTime": "2026-11-22T10:04:11.482", "endTime": "2026-11-22T10:04:12.394",
    "completionStartTime": "2026-11-22T10:04:12.101", "model": "ctpipe-arith", "model_group": "ctpipe-arith",
    "custom_llm_provider": "openai", "api_base": "https://api.openai.com/v1", "user": "u1", "team_id": "",
    "metadata": json.dumps({"user_api_key_alias": "prod", "status": "success", "additional_usage_values": {}}),
    "cache_hit": "False", "cache_key": "Cache OFF", "request_tags": "[]", "end_user": "", "requester_ip_address": "",
    "messages": "{}", "response": json.dumps(OPENAI["response"]), "proxy_server_request": json.dumps(OPENAI["request"]),
    "session_id": "2b1f3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", "status": "success",
}


def kv(key, value):
    typed = {str: "stringValue", int: "intValue", float: "doubleValue"}[type(value)]
    return {"key": key, "value": {typed: str(value) if typed == "intValue" else value}}


def any_value(value) -> dict:
    """A value as an OTLP AnyValue, structured: lists and dicts as arrays and key-value lists."""
    if isinstance(value, list):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": any_value(v)} for k, v in value.items()]}}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": value}


def otlp(attributes: list, events: list | None = None) -> dict:
    span = {"traceId": "5b8aa5a2d2c872e8321cf37308d69df2", "spanId": "051581bf3cb55c13", "name": "chat ctpipe-arith",
            "startTimeUnixNano": "1795340000000000000", "endTimeUnixNano": "1795340000250000000",
            "attributes": attributes, "events": events or []}
    return {"resourceSpans": [{"resource": {"attributes": [kv("service.version", "3")]},
                               "scopeSpans": [{"spans": [span, {"name": "GET /health", "attributes": []}]}]}]}


def test_an_openai_log_line_becomes_a_valid_trace():
    (t,) = normalize(OPENAI, "auto")
    rec = decode(json.dumps(t))
    assert rec.trace_id == "chatcmpl-1" and rec.completion == "5" and rec.model.version == "3"
    assert rec.messages[-1].content == "What is 2 plus 3?" and rec.feedback.thumb == "up" and rec.latency_ms == 41.5
    flat = {**OPENAI["response"], "messages": OPENAI["request"]["messages"]}
    flat["choices"] = [flat["choices"][0], {"index": 1, "message": {"role": "assistant", "content": "6"}}]
    assert [(x["trace_id"], x["completion"]) for x in normalize(flat, "openai")] == [("chatcmpl-1:0", "5"), ("chatcmpl-1:1", "6")]


@pytest.mark.parametrize("messages, detail", [
    ([{"role": "system", "content": {"kind": "text", "value": "Be brief."}}], "request.messages[0]: {'kind': 'text', "
                                                                             "'value': 'Be brief.'} is neither text nor a list of parts"),
    ([{"role": "system", "content": [{"value": "Be brief."}]}], "request.messages[0]: [{'value': 'Be brief.'}] is neither "
                                                               "text nor a list of parts"),
    ([None], "request.messages[0]=None is not a message"), (["stray"], "request.messages[0]=stray is not a message"),
    ([{"role": "user", "content": 12345}], "request.messages[0]: 12345 is neither text nor a list of parts"),
    ([{"role": "user", "content": ["plain"]}], "request.messages[0]: ['plain'] is neither text nor a list of parts"),
    ([{"role": "user", "content": [{"type": "text", "text": None}]}], "request.messages[0]: a part of [{'type': 'text', 'text': None}] holds no text"),
    ([{"role": "user", "content": [{"type": "text"}]}], "request.messages[0]: a part of [{'type': 'text'}] holds no text"),
])
def test_a_prompt_message_of_another_type_is_refused_not_left_out_or_read_as_empty(messages, detail):
    """A message that was not one, or content of another type, was dropped or read as "": the chat
    published was another than the one served."""
    doc = json.loads(json.dumps(OPENAI))
    doc["request"]["messages"] = messages + doc["request"]["messages"]
    with pytest.raises(FormatError, match=re.escape(detail)) as e:
        normalize(doc, "openai")
    assert e.value.reason == "invalid_field"


@pytest.mark.parametrize("latency", ["1500", {"ms": 1500}, [1500], True])
def test_a_latency_of_another_type_is_refused_not_read_as_none(latency):
    doc = {**OPENAI, "latency_ms": latency}
    with pytest.raises(FormatError, match=re.escape(f"latency_ms={latency!r} is not a number")):
        normalize(doc, "openai")
    assert [t["latency_ms"] for t in normalize({**OPENAI, "latency_ms": None}, "openai")] == [0.0]


def test_choices_whose_index_is_null_are_named_by_their_place():
    doc = json.loads(json.dumps(OPENAI))
    doc["response"]["choices"] = [{"index": None, "message": {"role": "assistant", "content": c}, "finish_reason": "stop"}
                                  for c in ("red", "blue")]
    assert [t["trace_id"] for t in normalize(doc, "openai")] == ["chatcmpl-1:0", "chatcmpl-1:1"]


def test_the_answers_of_a_call_of_several_choices_do_not_each_claim_the_calls_completion_tokens():
    """A call's completion count is of all its choices: each trace keeps its prompt's, and has none
    of its own (0, as a call that recorded none), so the traces' counts never add up to more than
    the call's. A count that is not one still fails the trace's validation, naming it."""
    doc = copy.deepcopy(OPENAI)
    doc["response"]["choices"].append({"index": 1, "message": {"role": "assistant", "content": "6"}})
    usage = [t["usage"] for t in normalize(doc, "openai")]
    assert usage == [{"prompt_tokens": 19, "completion_tokens": 0, "total_tokens": 19}] * 2
    (one,) = normalize(OPENAI, "openai")
    assert one["usage"] == OPENAI["response"]["usage"]
    doc["response"]["usage"]["completion_tokens"] = "two"
    for t in normalize(doc, "openai"):
        with pytest.raises(InvalidTrace, match="completion_tokens"):
            decode(json.dumps(t))
    span = otlp([kv("gen_ai.request.model", "m"), kv("gen_ai.usage.input_tokens", 7), kv("gen_ai.usage.output_tokens", 4),
                 kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": "A colour?"}]}])),
                 kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}
                                                          for text in ("Red.", "Blue.")]))])
    assert [t["usage"] for t in normalize(span, "otel")] == [{"prompt_tokens": 7, "completion_tokens": 0, "total_tokens": 7}] * 2


@pytest.mark.parametrize("choice, detail", [
    ({"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
      "finish_reason": "tool_calls"}, "is a tool call"),
    ({"message": {"role": "assistant", "content": None, "refusal": "I can't help with that."}, "finish_reason": "stop"},
     "is a refusal"),
    ({"message": {"role": "assistant", "content": "The answer is"}, "finish_reason": "content_filter"},
     "was stopped by the content filter"),
], ids=["tool call", "refusal", "content filter"])
def test_an_openai_answer_that_is_no_text_answer_is_refused_saying_what_it_is(choice, detail):
    doc = json.loads(json.dumps(OPENAI))
    doc["response"]["choices"] = [{"index": 0, **choice}]
    with pytest.raises(FormatError, match=f"response chatcmpl-1: choice 0: the answer {detail}") as e:
        normalize(doc, "openai")
    assert e.value.reason == "no_text_answer"
    doc["response"]["choices"] = [{"index": 0, "message": {"role": "assistant", "content": " "}}]
    (blank,) = normalize(doc, "openai")  # blank for no known reason: the trace's validation says so
    with pytest.raises(Exception, match="`completion` is empty"):
        decode(json.dumps(blank))


def test_current_otel_genai_spans_and_their_evaluation_events():
    doc = otlp(
        [kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "ctpipe-arith"),
         kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": "What is 2 plus 3?"}]}])),
         kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "5"}],
                                                    "finish_reason": "stop"}])),
         kv("gen_ai.usage.input_tokens", 19), kv("gen_ai.usage.output_tokens", 2)],
        [{"name": "gen_ai.evaluation.result", "attributes": [kv("gen_ai.evaluation.name", "judge"),
                                                              kv("gen_ai.evaluation.score.value", 0.9)]}],
    )
    assert detect(doc) == "otel"
    (t,) = normalize(doc, "auto")  # the HTTP span beside it is not a generation
    rec = decode(json.dumps(t))
    assert rec.completion == "5" and rec.usage.total_tokens == 21 and rec.latency_ms == pytest.approx(250.0)
    assert rec.model.version == "3" and t["scores"] == [{"name": "judge", "value": 0.9, "label": None, "source": "otel"}]


@pytest.mark.parametrize("attributes", [
    [kv("gen_ai.prompt", json.dumps([{"role": "user", "content": "What is 2 plus 3?"}])),
     kv("gen_ai.completion", json.dumps([{"role": "assistant", "content": "5"}])),
     kv("gen_ai.usage.prompt_tokens", 19), kv("gen_ai.usage.completion_tokens", 2)],
    [kv("gen_ai.prompt.0.role", "user"), kv("gen_ai.prompt.0.content", "What is 2 plus 3?"),
     kv("gen_ai.completion.0.content", "5"), kv("gen_ai.usage.prompt_tokens", 19), kv("gen_ai.usage.completion_tokens", 2)],
], ids=["json-attributes", "flattened-attributes"])
def test_older_otel_attribute_names_still_read(attributes):
    (t,) = normalize(otlp(attributes + [kv("gen_ai.response.model", "ctpipe-arith")]), "otel")
    rec = decode(json.dumps(t))
    assert rec.messages[0].content == "What is 2 plus 3?" and rec.completion == "5" and rec.usage.total_tokens == 21


SPAN_ID = "5b8aa5a2d2c872e8321cf37308d69df2:051581bf3cb55c13"


def test_openllmetry_flattened_messages_are_the_indices_present_and_each_choice_a_trace():
    """A message of neither role nor content (one OpenLLMetry did not record) leaves a gap in the
    indices: the messages after it are read all the same, and the prompt is the last user message."""
    attributes = [
        kv("gen_ai.prompt.0.role", "user"), kv("gen_ai.prompt.0.content", "What is 2 plus 3?"),
        kv("gen_ai.prompt.2.role", "assistant"), kv("gen_ai.prompt.2.content", "Let me add."),
        kv("gen_ai.prompt.3.role", "user"),
        kv("gen_ai.prompt.3.content", json.dumps([{"type": "text", "text": "And 3 plus 4?"}])),
        kv("gen_ai.completion.0.role", "assistant"), kv("gen_ai.completion.0.content", "7"),
        kv("gen_ai.completion.0.finish_reason", "stop"),
        kv("gen_ai.completion.1.role", "assistant"), kv("gen_ai.completion.1.content", "Seven."),
        kv("gen_ai.response.model", "ctpipe-arith")]
    traces = normalize(otlp(attributes), "otel")
    assert [(t["trace_id"], t["completion"]) for t in traces] == [(f"{SPAN_ID}:0", "7"), (f"{SPAN_ID}:1", "Seven.")]
    rec = decode(json.dumps(traces[0]))
    assert [(m.role, m.content) for m in rec.messages] == [
        ("user", "What is 2 plus 3?"), ("assistant", "Let me add."), ("user", "And 3 plus 4?")]
    (one,) = normalize(otlp([kv("gen_ai.prompt.0.content", " [1, 2]"), kv("gen_ai.completion.0.content", "3")]), "otel")
    assert one["trace_id"] == SPAN_ID and one["messages"] == [{"role": "user", "content": " [1, 2]"}]  # no parts: text


def test_openllmetry_thinking_is_no_choice_and_a_text_completions_prompt_is_the_users():
    """OpenLLMetry's Anthropic instrumentation puts the model's thinking before its answer as a
    completion of role ``thinking``; its text-completion spans name the prompt ``gen_ai.prompt.0.user``."""
    prompt = [kv("gen_ai.prompt.0.role", "user"), kv("gen_ai.prompt.0.content", "How many r in strawberry?")]
    thinking = [kv("gen_ai.completion.0.role", "thinking"), kv("gen_ai.completion.0.content", "Let me count: s-t-r...")]
    (t,) = normalize(otlp(prompt + thinking + [kv("gen_ai.completion.1.role", "assistant"), kv("gen_ai.completion.1.content", "3"),
                                               kv("gen_ai.usage.output_tokens", 40)]), "otel")
    assert (t["trace_id"], t["completion"], t["usage"]["completion_tokens"]) == (SPAN_ID, "3", 40)  # one choice: its count
    with pytest.raises(FormatError, match="completion 1: the answer is a tool call"):
        normalize(otlp(prompt + thinking + [kv("gen_ai.completion.1.role", "assistant"),
                                            kv("gen_ai.completion.1.tool_calls.0.name", "count")]), "otel")
    completion = [kv("llm.request.type", "completion"), kv("gen_ai.prompt.0.user", "Tell me a joke about owls"),
                  kv("gen_ai.completion.0.content", "Whooo knows?")]
    (t,) = normalize(otlp(completion), "otel")
    assert t["messages"] == [{"role": "user", "content": "Tell me a joke about owls"}] and t["completion"] == "Whooo knows?"


@pytest.mark.parametrize("answer, detail", [
    ([kv("gen_ai.completion.0.role", "assistant"), kv("gen_ai.completion.0.content", "FILTERED"),
      kv("gen_ai.completion.0.finish_reason", "content_filter")], "completion 0: the answer was stopped by the content filter"),
    ([kv("gen_ai.completion.0.role", "assistant"), kv("gen_ai.completion.0.finish_reason", "tool_calls"),
      kv("gen_ai.completion.0.tool_calls.0.name", "add")], "completion 0: the answer is a tool call, not text"),
    ([kv("gen_ai.completion.0.role", "assistant"), kv("gen_ai.completion.0.refusal", "I can't.")],
     "completion 0: the answer is a refusal, not text"),
    ([kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "finish_reason": "tool_call", "parts": [
        {"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]}]))],
     "output 0: the answer is a tool call, not text"),
    ([kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "finish_reason": "content_filter", "parts": [
        {"type": "text", "content": "The answer"}]}]))], "output 0: the answer was stopped by the content filter"),
    # A message without a finish reason of its own (AgentScope's Java instrumentation leaves a null out): the span's.
    ([kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "partial bad"}]}])),
      {"key": "gen_ai.response.finish_reasons", "value": any_value(["content_filter"])}],
     "output 0: the answer was stopped by the content filter"),
    ([kv("gen_ai.completion.0.role", "assistant"), kv("gen_ai.completion.0.content", "Let me add."),
      kv("gen_ai.completion.0.tool_calls.0.name", "add")], "completion 0: the answer is a tool call, its text beside it no answer"),
    ([kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "finish_reason": "tool_call", "parts": [
        {"type": "text", "content": "Let me add."}, {"type": "tool_call", "id": "c1", "name": "add"}]}]))],
     "output 0: the answer is a tool call, its text beside it no answer"),
], ids=["flattened filtered", "flattened tool call", "flattened refusal", "current tool call", "current filtered",
        "current filtered on the span", "flattened text and a tool call", "current text and a tool call"])
def test_an_otel_answer_that_is_no_text_answer_is_refused_saying_what_it_is(answer, detail):
    prompt = [kv("gen_ai.prompt.0.role", "user"), kv("gen_ai.prompt.0.content", "What is 2 plus 3?")]
    if "gen_ai.output.messages" in answer[0]["key"]:
        prompt = [kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Hi"}]}]))]
    with pytest.raises(FormatError, match=f"span {SPAN_ID}: {detail}") as e:
        normalize(otlp(prompt + answer), "otel")
    assert e.value.reason == "no_text_answer"


@pytest.mark.parametrize("answer, reason, detail", [
    ([kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "finish_reason": "error", "parts": [
        {"type": "text", "content": "The capital of France is Par"}]}]))], "failed_request",
     "output 0: the answer was broken off by an error"),
    ([kv("gen_ai.completion.0.role", "assistant"), kv("gen_ai.completion.0.content", "Hello.."),
      kv("gen_ai.completion.0.finish_reason", "refusal")], "no_text_answer", "completion 0: the answer was stopped, refused"),
    ([kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "finish_reason": "SAFETY", "parts": [
        {"type": "text", "content": "The vault door was"}]}]))], "no_text_answer",
     "output 0: the answer was stopped, refused or by a safety check \\(finish reason 'SAFETY'\\)"),
], ids=["a stream an error broke off", "Anthropic's refusal after text", "Gemini's safety stop"])
def test_an_otel_answer_cut_short_is_no_answer_whatever_text_it_holds(answer, reason, detail):
    """OpenTelemetry's instrumentations write a stream that failed partway, with its text so far and
    the finish reason "error"; Anthropic streams text before it refuses; Gemini stops for safety."""
    prompt = [kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Hi"}]}]))]
    if "gen_ai.completion.0.role" in answer[0]["key"]:
        prompt = [kv("gen_ai.prompt.0.role", "user"), kv("gen_ai.prompt.0.content", "Hi")]
    with pytest.raises(FormatError, match=f"span {SPAN_ID}: {detail}") as e:
        normalize(otlp(prompt + answer), "otel")
    assert e.value.reason == reason


def test_a_failed_calls_span_is_a_failed_request_and_older_embedding_and_rerank_spans_are_skipped():
    """A span of status ERROR with a prompt and no answer is a failed request, as in every other
    format. OpenLLMetry before gen_ai.operation.name said what a span is in llm.request.type: an
    embedding's or a rerank's span is no model call, where it was read as a chat."""
    prompt = [kv("gen_ai.prompt.0.role", "user"), kv("gen_ai.prompt.0.content", "What is 2 plus 3?")]
    failed = otlp(prompt + [kv("error.type", "InternalServerError")])
    failed["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["status"] = {"code": 2, "message": "Error code: 500"}
    with pytest.raises(FormatError, match=f"span {SPAN_ID}: the call failed \\(status ERROR: Error code: 500\\)") as e:
        normalize(failed, "otel")
    assert e.value.reason == "failed_request"
    rerank = [kv("llm.request.type", "rerank"), kv("gen_ai.prompt.0.role", "system"), kv("gen_ai.prompt.0.content", "Doc"),
              kv("gen_ai.completion.0.role", "assistant"), kv("gen_ai.completion.0.content", "Doc 0, Score: 0.98")]
    embedding = [kv("llm.request.type", "embedding"), kv("gen_ai.prompt.0.content", "Embed me")]
    assert normalize(otlp(rerank), "otel") == normalize(otlp(embedding), "otel") == []
    (t,) = normalize(otlp([kv("llm.request.type", "chat"), *prompt, kv("gen_ai.completion.0.content", "5")]), "otel")
    assert t["completion"] == "5"


def test_a_spans_own_events_of_its_messages_and_choices_are_its_content():
    """Azure AI Inference's tracing (and Semantic Kernel) put a call's messages and choices in the
    span's events, each as JSON in gen_ai.event.content: read as log records of them are."""
    def content(name, body):
        return {"name": name, "timeUnixNano": "1795340000100000000", "attributes": [kv("gen_ai.event.content", json.dumps(body))]}

    events = [content("gen_ai.system.message", {"role": "system", "content": "Be brief."}),
              content("gen_ai.user.message", {"role": "user", "content": "What is 2+2?"}),
              content("gen_ai.choice", {"message": {"content": "4"}, "finish_reason": "stop", "index": 0})]
    (t,) = _with_logs(otlp(CONTENTLESS, events))
    assert [(m["role"], m["content"]) for m in t["messages"]] == [("system", "Be brief."), ("user", "What is 2+2?")]
    assert t["completion"] == "4" and t["usage"]["prompt_tokens"] == 21
    (e,) = _with_logs(otlp(CONTENTLESS, [{**events[1], "attributes": [kv("gen_ai.event.content", "{not json")]}]))
    assert e.reason == "invalid_json" and "gen_ai.user.message's gen_ai.event.content is not JSON" in str(e)


def test_a_choice_that_is_no_text_answer_stands_in_its_place_beside_the_others():
    """Of several choices (or spans), the one that cannot be a trace comes as its error, with its
    record; alone, it is the document's error."""
    doc = json.loads(json.dumps(OPENAI))
    tool_call = {"index": 1, "message": {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}}
    doc["response"]["choices"].append(tool_call)
    text, refused = normalize(doc, "openai")
    assert text["trace_id"] == "chatcmpl-1:0" and refused.reason == "no_text_answer" and refused.record == tool_call


def test_the_text_beside_a_tool_call_is_no_answer_to_train_on():
    """"Let me look that up." beside a call is not the answer, which comes after the tool's: trained
    on, the model would learn to stop there."""
    doc = json.loads(json.dumps(OPENAI))
    doc["response"]["choices"][0]["message"]["tool_calls"] = [CALL]
    doc["response"]["choices"][0]["message"]["content"] = "Let me look that up."
    with pytest.raises(FormatError, match="choice 0: the answer is a tool call, its text beside it no answer") as e:
        normalize(doc, "openai")
    assert e.value.reason == "no_text_answer"
    doc["response"]["choices"][0]["message"]["tool_calls"] = []  # as some clients log every answer
    (t,) = normalize(doc, "openai")
    assert t["completion"] == "Let me look that up."
    (generation,) = _joined([{"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z",
                              "model": "m", "input": "Weather?", "output": {"role": "assistant", "content": "Let me see.",
                                                                           "tool_calls": [CALL]}}])
    assert generation.reason == "no_text_answer" and "output: the answer is a tool call" in str(generation)


def _parts(texts: list[str], key: str = "text") -> list[dict]:
    return [{"type": "text", key: t} for t in texts]


def test_a_prompts_text_parts_are_joined_on_a_new_line_as_vllm_renders_them_and_an_answers_as_written():
    """vLLM joins a message's text parts with a newline for the chat template: the model serving the
    checkpoint sees "Question:\n2+3?", so it is trained on that, not on "Question:2+3?". An answer is
    one text however its writer cut it into parts (an instrumentation a part per Anthropic block,
    which citations cut mid-sentence, or per Gemini part, which cuts anywhere)."""
    doc = json.loads(json.dumps(OPENAI))
    doc["request"]["messages"][0]["content"] = _parts(["Question:", "2+3?"])
    doc["response"]["choices"][0]["message"]["content"] = _parts(["It is", "5."])
    (t,) = normalize(doc, "openai")
    assert t["messages"][0]["content"] == "Question:\n2+3?" and t["completion"] == "It is5."
    (t,) = normalize(otlp([kv("gen_ai.request.model", "m"),
                           kv("gen_ai.system_instructions", json.dumps(_parts(["Be brief.", "Be kind."], "content"))),
                           kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": _parts(["Question:", "2+3?"], "content")}])),
                           kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": _parts(["It is", "5."], "content")}]))]),
                     "otel")
    assert [m["content"] for m in t["messages"]] == ["Be brief.\nBe kind.", "Question:\n2+3?"] and t["completion"] == "It is5."
    (t,) = normalize(otlp([kv("gen_ai.prompt", json.dumps([{"role": "user", "content": _parts(["Question:", "2+3?"])}])),
                           kv("gen_ai.completion", json.dumps([{"role": "assistant", "content": "5"}]))]), "otel")
    assert t["messages"][0]["content"] == "Question:\n2+3?"
    (t,) = normalize(otlp([kv("gen_ai.prompt.0.content", json.dumps(_parts(["Question:", "2+3?"]))),
                           kv("gen_ai.completion.0.content", "5")]), "otel")
    assert t["messages"][0]["content"] == "Question:\n2+3?"
    (t,) = _joined([{"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z", "model": "m",
                     "input": [{"role": "user", "content": _parts(["Question:", "2+3?"])}], "output": _parts(["It is", "5."])}])
    assert t["messages"][0]["content"] == "Question:\n2+3?" and t["completion"] == "It is5."


    (t,) = normalize(otlp([kv("gen_ai.request.model", "m"), kv("gen_ai.input.messages", json.dumps([
        {"role": "user", "parts": [{"type": "text", "content": "Capital?"}]}])), kv("gen_ai.output.messages", json.dumps([
        {"role": "assistant", "parts": _parts(["The capital is ", "Paris", "."], "content")}]))]), "otel")
    assert t["completion"] == "The capital is Paris."
    (t,) = normalize(otlp([kv("gen_ai.completion", json.dumps([{"role": "assistant", "content": _parts(["fox jum", "ps"])}])),
                           kv("gen_ai.prompt", json.dumps([{"role": "user", "content": "Say it."}]))]), "otel")
    assert t["completion"] == "fox jumps"


def test_openllmetrys_bedrock_spans_give_a_prompts_converse_blocks_as_their_text():
    """OpenLLMetry's Bedrock instrumentation writes a Converse call's messages as the JSON text of
    their content blocks, which were published as that JSON; its answers it writes as text, and an
    answer that is JSON of such objects is an extraction's, read as written."""
    blocks = [{"text": "What is 2 plus 3?"}, {"text": "Be brief."}]  # joined as Converse's reader joins them
    (t,) = normalize(otlp([kv("gen_ai.system", "AWS"), kv("gen_ai.request.model", "llama3-70b-instruct-v1:0"),
                           kv("llm.request.type", "chat"), kv("gen_ai.prompt.0.role", "user"),
                           kv("gen_ai.prompt.0.content", json.dumps(blocks)), kv("gen_ai.completion.0.role", "assistant"),
                           kv("gen_ai.completion.0.content", json.dumps([{"text": "5"}]))]), "otel")
    assert (t["messages"], t["completion"]) == ([{"role": "user", "content": "What is 2 plus 3?\nBe brief."}], '[{"text": "5"}]')
    image = [{"text": "What is this?"}, {"image": {"format": "png", "source": {"bytes": "..."}}}]
    (refused,) = from_otel(otlp([kv("gen_ai.prompt.0.role", "user"), kv("gen_ai.prompt.0.content", json.dumps(image)),
                                 kv("gen_ai.completion.0.content", "A cat.")]))
    assert isinstance(refused, FormatError) and refused.reason == "non_text_content"


def test_openllmetrys_flattened_spans_are_read_as_its_instrumentations_wrote_them():
    """What OpenLLMetry's instrumentations write under the older flattened names, as their source
    shows it: each was lost, misread or published wrong."""
    def read(*attributes, **values):
        return list(from_otel(otlp([kv("gen_ai.request.model", "m"), *attributes, *(kv(k, v) for k, v in values.items())])))

    user, answer = kv("gen_ai.prompt.0.role", "user"), kv("gen_ai.completion.0.content", "5")
    asked = [kv("gen_ai.prompt.0.content", "What is 2 plus 3?"), user]
    # Its LangChain callback handler (0.53, 0.54) names its model calls' operation "llm_request".
    (t,) = read(*asked, answer, **{"gen_ai.operation.name": "llm_request", "llm.request.type": "chat"})
    assert t["completion"] == "5"
    # Its Bedrock instrumentation (to 0.56) wrote each Claude message's role, and the last one's
    # content at index 0: the prompt cannot be told. Mistral's and others' record an assistant's turn
    # of tool calls as its role alone.
    (e,) = read(kv("gen_ai.prompt.0.content", '"Hi"'), user, kv("gen_ai.prompt.1.role", "assistant"),
                kv("gen_ai.prompt.2.role", "user"), answer)
    assert (e.reason, "gen_ai.prompt.1 (role 'assistant') has no content" in str(e)) == ("invalid_field", True)
    (e,) = read(*asked, kv("gen_ai.prompt.1.role", "assistant"), kv("gen_ai.prompt.2.role", "tool"),
                kv("gen_ai.prompt.2.content", '{"temp": 21}'), answer)
    assert e.reason == "tool_call_in_prompt"
    (t,) = read(kv("gen_ai.prompt.0.role", "system"), kv("gen_ai.prompt.1.role", "user"),
                kv("gen_ai.prompt.1.content", "What is 2 plus 3?"), answer)
    assert t["messages"][0] == {"role": "system", "content": ""}  # a blank system prompt is one
    (e,) = read(kv("gen_ai.prompt.0.content", '"Hi"'), user, answer,  # ... and no system prompt, even of one message
                **{"gen_ai.system": "anthropic", "gen_ai.request.model": "claude-3-5-sonnet-20240620-v1:0"})
    assert e.reason == "invalid_field" and "without its system prompt" in str(e)
    (e,) = read(kv("gen_ai.prompt.0.content", json.dumps([{"type": "text", "text": "Hi"}])), user, answer,  # 0.41 to 0.56
                **{"gen_ai.system": "AWS", "gen_ai.request.model": "claude-3-5-sonnet-20240620-v1:0"})
    assert e.reason == "invalid_field"
    (t,) = read(kv("gen_ai.prompt.0.content", json.dumps([{"text": "Hi"}])), user, answer,  # its Converse spans: whole
                **{"gen_ai.system": "anthropic", "gen_ai.request.model": "claude-3-5-sonnet-20240620-v1:0"})
    assert t["messages"] == [{"role": "user", "content": "Hi"}]
    (t,) = read(kv("gen_ai.prompt.0.role", "system"), kv("gen_ai.prompt.0.content", '"Answer in French."'),
                kv("gen_ai.prompt.1.role", "user"), kv("gen_ai.prompt.1.content", json.dumps([{"text": "Hi"}])), answer,
                **{"gen_ai.system": "AWS", "gen_ai.request.model": "claude-3-5-sonnet-20240620-v1:0"})
    assert t["messages"][0] == {"role": "system", "content": '"Answer in French."'}  # a Converse system prompt, as written
    (e,) = read(kv("gen_ai.prompt.0.content", '"Hi"'), user, answer, **{"gen_ai.system": "AWS", "gen_ai.request.model": "claude-v2:1"})
    assert e.reason == "invalid_field"
    (t,) = read(*asked, answer, **{"gen_ai.system": "Anthropic", "gen_ai.request.model": "claude-3-5-sonnet-20240620"})
    assert t["messages"] == [{"role": "user", "content": "What is 2 plus 3?"}]  # its Anthropic instrumentation's
    # ... and a Converse answer's role at index 0, each of its blocks' text at its own index.
    (t,) = read(*asked, kv("gen_ai.completion.0.role", "assistant"), kv("gen_ai.completion.1.content", "The capital is "),
                kv("gen_ai.completion.2.content", "Paris."))
    assert (t["trace_id"].count(":"), t["completion"]) == (1, "The capital is Paris.")
    (t,) = read(*asked, kv("gen_ai.completion.0.content", "Hello"), kv("gen_ai.completion.1.content", " there"),
                **{"gen_ai.system": "amazon", "gen_ai.request.model": "nova-pro-v1:0"})  # Nova's, of no role at all
    assert t["completion"] == "Hello there"
    (a, b) = read(*asked, kv("gen_ai.completion.0.content", "5"), kv("gen_ai.completion.1.content", "five"))  # choices
    assert (a["completion"], b["completion"]) == ("5", "five")
    # Its Anthropic instrumentation (to 0.53) wrote the finish reason at index 0, where thinking then went.
    (e,) = read(*asked, kv("gen_ai.completion.0.finish_reason", "refusal"), kv("gen_ai.completion.0.role", "thinking"),
                kv("gen_ai.completion.0.content", "Hm."), kv("gen_ai.completion.1.role", "assistant"),
                kv("gen_ai.completion.1.content", "I will help you build a"))
    assert e.reason == "no_text_answer"
    for finish in ("pause_turn", "content_filtered", "CONTENT_FILTERED", "ERROR_TOXIC"):  # passed on raw
        (e,) = read(*asked, answer, kv("gen_ai.completion.0.finish_reason", finish))
        assert e.reason == "no_text_answer", finish
    # Its Cohere instrumentation (to 0.54) wrote the finish reasons on the span alone.
    for finish, reason in (("ERROR_TOXIC", "no_text_answer"), ("ERROR", "failed_request"), ("TOOL_CALL", "no_text_answer"),
                           ("USER_CANCEL", "no_text_answer")):
        (e,) = read(*asked, answer, {"key": "gen_ai.response.finish_reasons", "value": any_value([finish])})
        assert e.reason == reason, finish
    # Its OpenAI instrumentation writes a text completion's prompt of token ids as its first id, a
    # batch's prompts each at its index.
    for prompts in ([kv("gen_ai.prompt.0.user", 1212)], [kv("gen_ai.prompt.0.user", "a"), kv("gen_ai.prompt.1.user", "b")]):
        (e,) = read(*prompts, answer, **{"llm.request.type": "completion"})
        assert e.reason == "invalid_field", prompts
    (t,) = read(kv("gen_ai.prompt.0.user", "Once upon"), answer, **{"llm.request.type": "completion"})
    assert t["messages"] == [{"role": "user", "content": "Once upon"}]
    # Its google-generativeai instrumentation (to 0.54) wrote a function's call or response as the Python repr of its part.
    call = ("video_metadata=None thought=None inline_data=None file_data=None thought_signature=None "
            "code_execution_result=None executable_code=None function_call=FunctionCall(id=None, args={'city': 'Paris'}, "
            "name='get_weather') function_response=None text=None")
    (e,) = read(*asked, kv("gen_ai.prompt.1.role", "model"), kv("gen_ai.prompt.1.content", json.dumps([{"type": "text", "text": call}])),
                kv("gen_ai.prompt.2.role", "user"), kv("gen_ai.prompt.2.content", "Thanks"), answer)
    assert e.reason == "tool_call_in_prompt"
    (e,) = read(kv("gen_ai.prompt.0.content", json.dumps([{"type": "text", "text": 'function_response {\n  name: "w"\n}\n'}])),
                user, answer)  # Vertex AI's protobuf text
    assert e.reason == "tool_call_in_prompt"
    for said in ("Why does Part(inline_data=Blob(mime_type='image/png')) fail?", "function_call {\n  name: x\n}\nWhat is this?"):
        (t,) = read(kv("gen_ai.prompt.0.content", json.dumps([{"type": "text", "text": said}])), user, answer)  # about code
        assert t["messages"][0]["content"] == said
    # Its Vertex AI instrumentation (and OpenLIT's) records a ChatSession's new message alone.
    doc = otlp([kv("gen_ai.request.model", "gemini-1.5-pro"), *asked, answer])
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] = "vertexai.send_message"
    (e,) = from_otel(doc)
    assert e.reason == "invalid_field" and "new message alone" in str(e)
    # google-genai's instrumentation gives a model's turn Gemini's role, "model"; Cohere's "chatbot".
    for role in ("model", "chatbot"):
        (t,) = read(*asked, kv("gen_ai.prompt.1.role", role), kv("gen_ai.prompt.1.content", "4?"),
                    kv("gen_ai.prompt.2.role", "user"), kv("gen_ai.prompt.2.content", "Again."), answer)
        assert [m["role"] for m in t["messages"]] == ["user", "assistant", "user"]


def test_content_blocks_an_instrumentation_writes_as_text_parts_of_their_json_are_those_blocks():
    """OpenLLMetry's Bedrock (0.57 on) and LangChain (0.55 on) instrumentations write a block they have
    no part for as a text part of its JSON beside the message's others: a Converse answer's reasoning
    was published before its text, a cache point in its prompt, a PDF's base64 as a question."""
    def read(inputs, outputs):
        parts = [{"role": "user", "parts": inputs}], [{"role": "assistant", "parts": outputs, "finish_reason": "stop"}]
        return list(from_otel(otlp([kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "m"),
                                    kv("gen_ai.input.messages", json.dumps(parts[0])),
                                    kv("gen_ai.output.messages", json.dumps(parts[1]))])))

    def text(value):
        return {"type": "text", "content": value if isinstance(value, str) else json.dumps(value)}

    asked = [text("What is 2+3?")]
    (t,) = read(asked, [text({"reasoningContent": {"reasoningText": {"text": "2 plus 3", "signature": "s"}}}), text("5")])
    assert t["completion"] == "5"
    (t,) = read([*asked, text({"cachePoint": {"type": "default"}})], [text({"type": "redacted_thinking", "data": "E"}), text("5")])
    assert (t["messages"][0]["content"], t["completion"]) == ("What is 2+3?", "5")
    (t,) = read(asked, [text({"citationsContent": {"content": [{"text": "It is "}], "citations": []}}), text("5.")])
    assert t["completion"] == "It is 5."
    (e,) = read([text({"type": "document", "source": {"type": "base64", "data": "JVBER"}}), text("Summarise")], [text("It says")])
    assert e.reason == "non_text_content"
    (e,) = read([text({"toolResult": {"toolUseId": "t", "content": [{"text": "5"}]}}), *asked], [text("5")])
    assert e.reason == "tool_call_in_prompt"
    for answer in ({"type": "image", "label": "cat"}, {"reasoningContent": "x"}, {"document": "invoice"}):  # JSON answers
        (t,) = read(asked, [text(answer)])  # alone
        assert t["completion"] == json.dumps(answer)
        (t,) = read(asked, [{"type": "reasoning", "content": "Hm."}, text(answer)])  # beside a reasoning part
        assert t["completion"] == json.dumps(answer)
    (t,) = read([text("Summarise this event:"), text({"type": "thinking", "thinking": "idle"})], [text("ok")])
    assert t["messages"][0]["content"] == 'Summarise this event:\n{"type": "thinking", "thinking": "idle"}'  # no block's shape
    (t,) = read(asked, [text({"reasoningContent": {"reasoningText": {"text": "2 plus"}}})])  # cut off while thinking
    assert t["completion"] == ""
    # Strands Agents writes a Converse block as a part of the block's key and value.
    (t,) = read([*asked, {"type": "cachePoint", "content": {"type": "default"}}],
                [{"type": "reasoningContent", "content": {"reasoningText": {"text": "2 plus 3"}}}, text("5")])
    assert (t["messages"][0]["content"], t["completion"]) == ("What is 2+3?", "5")


def test_an_assistants_earlier_answer_in_a_prompt_is_joined_as_its_own_trace_joined_it():
    """An answer's parts are one text, joined as written; replayed in the next call's prompt, the same
    parts were joined on a new line, and the chat disagreed with itself."""
    parts = [{"type": "text", "content": t} for t in ("The capital is ", "Paris", ".")]
    inputs = [{"role": "user", "parts": [{"type": "text", "content": "Capital of France?"}]}, {"role": "assistant", "parts": parts},
              {"role": "user", "parts": [{"type": "text", "content": "And"}, {"type": "text", "content": "of Spain?"}]}]
    (t,) = from_otel(otlp([kv("gen_ai.request.model", "m"), kv("gen_ai.input.messages", json.dumps(inputs)),
                           kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": parts}]))]))
    assert [m["content"] for m in t["messages"]] == ["Capital of France?", "The capital is Paris.", "And\nof Spain?"]
    assert t["completion"] == "The capital is Paris."
    doc = copy.deepcopy(OPENAI)
    doc["request"]["messages"][1:1] = [{"role": "assistant", "content": [{"type": "text", "text": t} for t in ("It is ", "4.")]}]
    (t,) = normalize(doc, "openai")
    assert t["messages"][1] == {"role": "assistant", "content": "It is 4."}
    converse = _bedrock(request={**BEDROCK["input"]["inputBodyJson"], "messages": [
        {"role": "user", "content": [{"text": "Hi"}]}, {"role": "assistant", "content": [{"text": "Hel"}, {"text": "lo."}]},
        {"role": "user", "content": [{"text": "What is 2"}, {"text": "plus 3?"}]}]})
    (t,) = normalize(converse, "auto")
    assert [m["content"] for m in t["messages"][1:]] == ["Hi", "Hello.", "What is 2\nplus 3?"]
    (t,) = from_otel(otlp([kv("gen_ai.request.model", "m"), kv("gen_ai.prompt.0.role", "user"), kv("gen_ai.prompt.0.content", "Hi"),
                           kv("gen_ai.prompt.1.role", "assistant"), kv("gen_ai.prompt.1.content", json.dumps(_parts(["Hel", "lo."]))),
                           kv("gen_ai.prompt.2.role", "user"), kv("gen_ai.prompt.2.content", "Bye"),
                           kv("gen_ai.completion.0.content", "Bye.")]))
    assert t["messages"][1] == {"role": "assistant", "content": "Hello."}


def test_openais_legacy_function_role_is_the_tool_role_it_became():
    """Logs of the functions API (before tools) hold a function's result as role "function", which
    refused the whole trace; chat templates know it as "tool". (An application may put one in the
    chat itself, as a lookup made before asking; the model's own calls are refused, as tool calls.)"""
    history = [{"role": "system", "content": "Answer from the forecast."},
               {"role": "function", "name": "weather", "content": "4 C, rain"},
               {"role": "user", "content": "Should I bike?"}]
    doc = json.loads(json.dumps(OPENAI))
    doc["request"]["messages"] = history
    roles = ["system", "tool", "user"]
    (t,) = normalize(doc, "openai")
    assert [m["role"] for m in t["messages"]] == roles and decode(json.dumps(t)).messages[1].content == "4 C, rain"
    (t,) = normalize(otlp([kv("gen_ai.prompt", json.dumps(history)), kv("gen_ai.completion", "[]")]), "otel")
    assert [m["role"] for m in t["messages"]] == roles
    (t,) = _joined([{"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z", "model": "m",
                     "input": history, "output": "Cold."}])
    assert [m["role"] for m in t["messages"]] == roles


IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}


def test_a_prompt_that_showed_the_model_an_image_or_a_file_is_refused_naming_the_part():
    """A text dataset cannot hold the image: the question read without it ("What is in this
    picture?") is another one, whose answer the model would learn to make up."""
    doc = json.loads(json.dumps(OPENAI))
    doc["request"]["messages"][0]["content"] = [{"type": "text", "text": "What is in this picture?"}, IMAGE]
    with pytest.raises(FormatError, match=r"request.messages\[0\] holds a part of type image_url") as e:
        normalize(doc, "openai")
    assert e.value.reason == "non_text_content"
    current = otlp([kv("gen_ai.request.model", "m"), kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [
        {"type": "text", "content": "Summarize this."}, {"type": "blob", "modality": "image", "content": "iVBORw0KGgo="}]}])),
        kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "A cat."}]}]))])
    with pytest.raises(FormatError, match=rf"span {SPAN_ID}: gen_ai.input.messages\[0\] holds a part of type blob") as e:
        normalize(current, "otel")
    assert e.value.reason == "non_text_content"
    older = otlp([kv("gen_ai.prompt", json.dumps([{"role": "user", "content": [IMAGE]}])), kv("gen_ai.completion", "[]")])
    with pytest.raises(FormatError, match=r"gen_ai.prompt\[0\] holds a part of type image_url"):
        normalize(older, "otel")
    flattened = otlp([kv("gen_ai.prompt.0.content", json.dumps([IMAGE])), kv("gen_ai.completion.0.content", "A cat.")])
    with pytest.raises(FormatError, match=r"gen_ai.prompt.0.content holds a part of type image_url"):
        normalize(flattened, "otel")
    (refused,) = _joined([{"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z", "model": "m",
                           "input": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}],
                           "output": "A cat."}])
    assert isinstance(refused, FormatError) and refused.reason == "non_text_content" and "input[0] holds" in str(refused)


CALL = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}


def test_a_prompt_holding_the_models_tool_calls_is_refused_in_every_format_naming_the_message():
    """The dataset's messages are text: an assistant turn of tool calls read as an empty turn, then
    the tool's answer to nothing, which is not the chat the model was served."""
    history = [{"role": "user", "content": "Weather in Oslo?"}, {"role": "assistant", "content": None, "tool_calls": [CALL]},
               {"role": "tool", "tool_call_id": "c1", "content": "4 C, rain"}, {"role": "user", "content": "Bike?"}]
    legacy = [history[0], {"role": "assistant", "content": None, "function_call": CALL["function"]},
              {"role": "function", "name": "weather", "content": "4 C, rain"}, history[3]]

    def refused(call, detail: str) -> None:
        with pytest.raises(FormatError, match=re.escape(detail)) as e:
            call()
        assert e.value.reason == "tool_call_in_prompt"

    for chat, field in ((history, "tool_calls"), (legacy, "function_call")):
        doc = json.loads(json.dumps(OPENAI))
        doc["request"]["messages"] = chat
        refused(lambda: normalize(doc, "openai"), f"request.messages[1] holds {field}, which the dataset's messages")
        refused(lambda: normalize(otlp([kv("gen_ai.prompt", json.dumps(chat)), kv("gen_ai.completion", "[]")]), "otel"),
                f"span {SPAN_ID}: gen_ai.prompt[1] holds {field}")
        (generation,) = _joined([{"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z",
                                  "model": "m", "input": chat, "output": "Yes."}])
        assert generation.reason == "tool_call_in_prompt" and f"input[1] holds {field}" in str(generation)
    call = {"type": "tool_call", "id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}
    result = {"type": "tool_call_response", "id": "c1", "response": "4 C, rain"}
    for message, part in (({"role": "assistant", "parts": [call]}, "tool_call"),
                          ({"role": "tool", "parts": [result]}, "tool_call_response")):
        inputs = [{"role": "user", "parts": _parts(["Weather in Oslo?"], "content")}, message]
        span = otlp([kv("gen_ai.request.model", "m"), kv("gen_ai.input.messages", json.dumps(inputs)),
                     kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": _parts(["Yes."], "content")}]))])
        refused(lambda: normalize(span, "otel"), f"gen_ai.input.messages[1] holds a part of type {part}")
    flattened = otlp([kv("gen_ai.prompt.0.role", "user"), kv("gen_ai.prompt.0.content", "Weather in Oslo?"),
                      kv("gen_ai.prompt.1.role", "assistant"), kv("gen_ai.prompt.1.tool_calls.0.name", "weather"),
                      kv("gen_ai.prompt.2.role", "tool"), kv("gen_ai.prompt.2.content", "4 C, rain"),
                      kv("gen_ai.completion.0.content", "Yes.")])
    refused(lambda: normalize(flattened, "otel"), "gen_ai.prompt.1 holds tool_calls")
    records = logs(event("gen_ai.user.message", {"content": "Weather in Oslo?"}),
                   event("gen_ai.assistant.message", {"tool_calls": [CALL]}),
                   event("gen_ai.tool.message", {"content": "4 C, rain", "id": "c1"}),
                   event("gen_ai.choice", {"index": 0, "finish_reason": "stop", "message": {"content": "Yes."}}))
    (joined,) = _with_logs(otlp(CONTENTLESS), records)
    assert joined.reason == "tool_call_in_prompt" and "gen_ai.assistant.message holds tool_calls" in str(joined)
    # LangChain's messages, as Langfuse's callback handler logs them: calls under additional_kwargs (before
    # its v3.3.4, only there), or calls that did not parse; in the prompt, and as the answer.
    langchain = {"role": "assistant", "content": "", "additional_kwargs": {"tool_calls": [CALL]}}
    for message, field in ((langchain, "additional_kwargs.tool_calls"),
                           ({**langchain, "additional_kwargs": {"function_call": CALL["function"]}}, "additional_kwargs.function_call"),
                           ({**langchain, "additional_kwargs": {}, "invalid_tool_calls": [{"name": "weather", "args": "{"}]},
                            "invalid_tool_calls")):
        (generation,) = _joined([{"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z",
                                  "model": "m", "input": [history[0], message, history[2]], "output": "Yes."}])
        assert generation.reason == "tool_call_in_prompt" and f"input[1] holds {field}," in str(generation)
        (answer,) = _joined([{"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z",
                              "model": "m", "input": history[:1], "output": {**message, "content": "Let me look."}}])
        assert answer.reason == "no_text_answer" and "the answer is a tool call" in str(answer)
    (t,) = _joined([{"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z", "model": "m",
                     "input": history[:1], "output": {**langchain, "content": "4 C", "additional_kwargs": {"refusal": None},
                                                      "tool_calls": [], "invalid_tool_calls": []}}])
    assert t["completion"] == "4 C"
    # No call, no refusal: an empty list, as some clients log every assistant turn, or a call in the answer.
    doc = json.loads(json.dumps(OPENAI))
    doc["request"]["messages"] = [history[0], {"role": "assistant", "content": "Which day?", "tool_calls": []}, history[3]]
    (t,) = normalize(doc, "openai")
    assert t["messages"][1] == {"role": "assistant", "content": "Which day?"}


def test_an_answer_holding_an_image_or_audio_is_refused_in_its_place_beside_the_other_choices():
    doc = json.loads(json.dumps(OPENAI))
    audio = {"index": 1, "message": {"role": "assistant", "content": [{"type": "input_audio", "input_audio": {"data": "UklG"}}]}}
    doc["response"]["choices"].append(audio)
    text, refused = normalize(doc, "openai")
    assert text["completion"] == "5" and refused.reason == "non_text_content" and refused.record == audio
    assert "choice 1: content holds a part of type input_audio" in str(refused)
    span = otlp([kv("gen_ai.request.model", "m"),
                 kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": _parts(["Draw a cat."], "content")}])),
                 kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": _parts(["Here:"], "content")},
                                                          {"role": "assistant", "parts": [{"type": "uri", "uri": "s3://b/cat.png"}]}]))])
    text, refused = normalize(span, "otel")
    assert text["completion"] == "Here:" and refused.reason == "non_text_content" and "output 1 holds a part of type uri" in str(refused)


def test_current_otel_messages_recorded_structured_are_read_as_their_json_text_is():
    """semconv asks for the messages in structured form on spans where that can be recorded: an
    arrayValue of kvlistValues, which was refused as not JSON."""
    inputs = [{"role": "user", "parts": [{"type": "text", "content": "2+3?"}]}]
    outputs = [{"role": "assistant", "parts": [{"type": "text", "content": "5"}]}]
    structured = otlp([kv("gen_ai.request.model", "m"), {"key": "gen_ai.input.messages", "value": any_value(inputs)},
                       {"key": "gen_ai.output.messages", "value": any_value(outputs)}])
    text = otlp([kv("gen_ai.request.model", "m"), kv("gen_ai.input.messages", json.dumps(inputs)),
                 kv("gen_ai.output.messages", json.dumps(outputs))])
    assert normalize(structured, "otel") == normalize(text, "otel") and normalize(text, "otel")[0]["completion"] == "5"


def test_each_current_otel_output_message_is_a_choice_of_its_own():
    """semconv: each message of gen_ai.output.messages "represents a single output choice"."""
    doc = otlp([kv("gen_ai.request.model", "m"),
                kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": "A colour?"}]}])),
                kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}
                                                         for text in ("Red.", "Blue.")]))])
    assert [(t["trace_id"], t["completion"]) for t in normalize(doc, "otel")] == [(f"{SPAN_ID}:0", "Red."),
                                                                               (f"{SPAN_ID}:1", "Blue.")]


def test_each_message_of_the_older_json_completion_is_a_choice_of_its_own():
    """The older names hold the choices as the current ones do, a message each: they were joined
    into one answer ("Red." + "Blue." = "Red.Blue."), a tool call among them unnoticed."""
    doc = otlp([kv("gen_ai.prompt", json.dumps([{"role": "user", "content": "A colour?"}])),
                kv("gen_ai.completion", json.dumps([{"role": "assistant", "content": "Red."},
                                                    {"role": "assistant", "content": "Blue."},
                                                    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}]))])
    red, blue, tool_call = normalize(doc, "otel")
    assert [(t["trace_id"], t["completion"]) for t in (red, blue)] == [(f"{SPAN_ID}:0", "Red."), (f"{SPAN_ID}:1", "Blue.")]
    assert tool_call.reason == "no_text_answer" and "completion 2: the answer is a tool call" in str(tool_call)


def test_current_otel_system_instructions_are_the_first_message():
    doc = otlp([kv("gen_ai.request.model", "m"),
                kv("gen_ai.system_instructions", json.dumps([{"type": "text", "content": "Be brief."}])),
                kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": "2+3?"}]}])),
                kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "5"}]}]))])
    (t,) = normalize(doc, "otel")
    assert t["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}]
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"][1] = kv("gen_ai.system_instructions", "Be brief.")
    with pytest.raises(FormatError, match="gen_ai.system_instructions is not JSON") as e:
        normalize(doc, "otel")
    assert e.value.reason == "invalid_json"


@pytest.mark.parametrize("name", ["gen_ai.input.messages", "gen_ai.prompt"])
def test_otel_messages_of_a_number_or_holding_nan_say_so(name):
    """Not Python's type error, nor a NaN read and refused later as a field's: the attribute named."""
    def refused(value) -> FormatError:
        with pytest.raises(FormatError) as e:
            normalize(otlp([kv("gen_ai.request.model", "m"), kv(name, value)]), "otel")
        return e.value

    number = refused(5)
    assert number.reason == "invalid_field" and str(number).endswith(f"{name}=5 is neither JSON text nor structured messages")
    nan = refused('[{"role": "user", "content": "hi", "x": NaN}]')
    assert nan.reason == "non_finite_number" and f"{name} holds NaN" in str(nan)


def test_only_model_calls_are_read_not_the_agent_tool_or_embedding_spans_around_them():
    messages = [kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": "2+3?"}]}])),
                kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "5"}]}]))]
    spans = []
    for i, operation in enumerate(["invoke_agent", "create_agent", "execute_tool", "embeddings", "chat", None]):
        span = otlp(([kv("gen_ai.operation.name", operation)] if operation else []) + messages)["resourceSpans"][0]
        span = span["scopeSpans"][0]["spans"][0]
        spans.append({**span, "spanId": f"s{i}"})
    doc = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
    assert [t["trace_id"].split(":")[1] for t in normalize(doc, "otel")] == ["s4", "s5"]


def _with_logs(*docs: dict, hold_spans: bool = False) -> list:
    """The traces of OTLP exports of spans and of logs read together: what each gives at once, then
    what the join makes of the spans held for it (in the order read)."""
    from ctpipe.formats import Held, join, joined

    found, entries = [], []
    for n, doc in enumerate(docs):
        for record in normalize(doc, "otel", hold_spans):
            if isinstance(record, Held):
                entries.append(record.entry(("f", n)))
            else:
                found.append(record)
    return found + [trace for record in join(entries) for trace in joined(record)]


def logs(*records: dict) -> dict:
    return {"resourceLogs": [{"resource": {"attributes": [kv("service.name", "chat")]},
                              "scopeLogs": [{"scope": {"name": "opentelemetry.instrumentation.openai_v2"},
                                             "logRecords": list(records)}]}]}


def event(name: str, body=None, attributes=(), span: str = "051581bf3cb55c13", named_by_attribute: bool = False) -> dict:
    """A log record of a GenAI event in the span of :func:`otlp`, as the SDK exports one (its name in
    ``eventName``; older SDKs set the ``event.name`` attribute instead)."""
    record = {"timeUnixNano": "1795340000100000000", "observedTimeUnixNano": "1795340000100000000", "severityNumber": 9,
              "traceId": "5b8aa5a2d2c872e8321cf37308d69df2", "spanId": span, "flags": 1,
              "attributes": [kv("gen_ai.system", "openai"), *attributes] + ([kv("event.name", name)] if named_by_attribute else [])}
    if not named_by_attribute:
        record["eventName"] = name
    if body is not None:
        record["body"] = any_value(body)
    return record


CONTENTLESS = [kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "gpt-4o-mini"),
               kv("gen_ai.response.model", "gpt-4o-mini-2024-07-18"), kv("gen_ai.usage.input_tokens", 21),
               kv("gen_ai.usage.output_tokens", 3)]


def test_other_instrumentations_shapes_of_a_model_call_are_read():
    """Semantic Kernel names its calls' operations its own way (chat.completions, ...), and its Python
    SDK logs an event's body as JSON text; Strands Agents (semconv's latest, opted in) puts the
    call's details on a span event rather than a log record, and its agent's system prompt on
    another span."""
    answer = [{"role": "assistant", "parts": _parts(["4"], "content"), "finish_reason": "stop"}]
    ask = [{"role": "user", "parts": _parts(["2+2?"], "content")}]
    for operation in ("chat.completions", "chat.streaming_completions", "text.completions", "text.streaming_completions"):
        (t,) = normalize(otlp([kv("gen_ai.operation.name", operation), kv("gen_ai.request.model", "m"),
                               kv("gen_ai.input.messages", json.dumps(ask)), kv("gen_ai.output.messages", json.dumps(answer))]),
                         "otel")
        assert (t["messages"], t["completion"]) == ([{"role": "user", "content": "2+2?"}], "4"), operation
    spoken = logs({**event("gen_ai.user.message"), "body": {"stringValue": json.dumps({"role": "user", "content": "2+2?"})}},
                  {**event("gen_ai.choice"), "body": {"stringValue": json.dumps(
                      {"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"})}})
    chat = [kv("gen_ai.operation.name", "chat.completions"), *CONTENTLESS[1:]]
    (t,) = _with_logs(otlp(chat), spoken)
    assert (t["messages"], t["completion"]) == ([{"role": "user", "content": "2+2?"}], "4")
    details = {"name": "gen_ai.client.inference.operation.details", "timeUnixNano": "1795340000100000000",
               "attributes": [kv("gen_ai.input.messages", json.dumps(ask)), kv("gen_ai.output.messages", json.dumps(answer))]}
    (t,) = _with_logs(otlp(CONTENTLESS, [details]))
    assert (t["messages"], t["completion"]) == ([{"role": "user", "content": "2+2?"}], "4")
    # Strands keeps the agent's system prompt on its invoke_agent span: without one here, the prompt
    # served cannot be told.
    strands = [*CONTENTLESS, kv("gen_ai.provider.name", "strands-agents")]
    (refused,) = _with_logs(otlp(strands, [details]))
    assert refused.reason == "invalid_field" and "gen_ai.agent.system_prompt" in str(refused)
    system = {**details, "attributes": [*details["attributes"], kv("gen_ai.system_instructions", json.dumps(
        [{"type": "text", "content": "Be brief."}]))]}
    (t,) = _with_logs(otlp(strands, [system]))
    assert t["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]


def test_the_vercel_ai_sdks_model_call_spans_are_read_from_its_own_attributes():
    """The Vercel AI SDK's doGenerate/doStream spans name no operation and keep their content in its own
    attributes (ai.prompt.messages, ai.response.text, ai.response.toolCalls); its outer spans
    (ai.generateText), which hold the whole run's prompt and answer again, are passed over."""
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "2+2?"}]}]
    inner = [kv("operation.name", "ai.generateText.doGenerate"), kv("ai.model.id", "gpt-4o-mini"),
             kv("ai.prompt.messages", json.dumps(prompt)), kv("ai.response.text", "4"), kv("ai.response.finishReason", "stop"),
             kv("ai.usage.promptTokens", 20), kv("ai.usage.completionTokens", 1)]
    outer = [kv("operation.name", "ai.generateText"), kv("ai.model.id", "gpt-4o-mini"),
             kv("ai.prompt", json.dumps({"system": "Be brief.", "prompt": "2+2?"})), kv("ai.response.text", "4")]
    (t,) = normalize(otlp(inner), "otel")
    assert (t["messages"], t["completion"], t["model"]["name"]) == (
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}], "4", "gpt-4o-mini")
    assert t["usage"] == {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21}
    (g,) = normalize(otlp([*inner, kv("gen_ai.request.model", "gpt-4o-mini"), kv("gen_ai.response.model", "gpt-4o-mini-2024"),
                           kv("gen_ai.usage.input_tokens", 21)]), "otel")
    assert (g["model"]["name"], g["usage"]["prompt_tokens"]) == ("gpt-4o-mini-2024", 21)  # its GenAI names win
    assert normalize(otlp(outer), "otel") == []
    # generateObject's answer, the object as JSON text; the SDK's 3.x names; no outputs recorded: no content.
    (o,) = normalize(otlp([*inner[:3], kv("ai.response.object", '{"answer": 4}')]), "otel")
    assert o["completion"] == '{"answer": 4}'
    (old,) = normalize(otlp([*inner[:3], kv("ai.result.text", "4"), kv("ai.finishReason", "stop")]), "otel")
    assert old["completion"] == "4"
    (unrecorded,) = _with_logs(otlp([*inner[:3], kv("gen_ai.request.model", "gpt-4o-mini")]))
    assert unrecorded.reason == "no_content"
    call = json.dumps([{"toolCallType": "function", "toolCallId": "c1", "toolName": "add", "args": "{}"}])
    for change, reason, says in [
        ([kv("ai.response.toolCalls", call), kv("ai.response.finishReason", "tool-calls"), kv("ai.response.text", "")],
         "no_text_answer", "the answer is a tool call"),
        ([kv("ai.response.finishReason", "content-filter")], "no_text_answer", "stopped by the content filter"),
        ([kv("ai.prompt.messages", json.dumps([*prompt, {"role": "assistant", "content": [
            {"type": "tool-call", "toolCallId": "c1", "toolName": "add", "args": {}}]}]))],
         "tool_call_in_prompt", "holds a part of type tool-call"),
    ]:
        attributes = list({a["key"]: a for a in [*inner, *change]}.values())
        with pytest.raises(FormatError, match=says) as e:
            normalize(otlp(attributes), "otel")
        assert e.value.reason == reason


def test_google_adks_model_call_spans_are_read_from_its_own_attributes():
    """Google ADK's call_llm spans name no operation and keep the request (a Gemini request) and the
    answer (its LlmResponse) as JSON in attributes of its own: read as Gemini's bodies are."""
    request = {"model": "gemini-2.0-flash", "config": {"system_instruction": "Be brief.", "temperature": 0},
               "contents": [{"role": "user", "parts": [{"text": "2+2?"}]}]}
    response = {"content": {"role": "model", "parts": [{"text": "4"}]}, "finish_reason": "STOP",
                "usage_metadata": {"prompt_token_count": 20, "candidates_token_count": 1, "total_token_count": 21}}
    span = [kv("gen_ai.system", "gcp.vertex.agent"), kv("gen_ai.request.model", "gemini-2.0-flash"),
            kv("gcp.vertex.agent.llm_request", json.dumps(request)), kv("gcp.vertex.agent.llm_response", json.dumps(response)),
            kv("gen_ai.usage.input_tokens", 20), kv("gen_ai.usage.output_tokens", 1)]
    (t,) = normalize(otlp(span), "otel")
    assert (t["messages"], t["completion"], t["model"]["name"], t["usage"]["prompt_tokens"]) == (
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}], "4", "gemini-2.0-flash", 20)
    for changed, reason, says in [
        ({"content": {"role": "model", "parts": [{"function_call": {"name": "add", "args": {}}}]}}, "no_text_answer",
         "the answer is a tool call"),
        ({"finish_reason": "SAFETY"}, "no_text_answer", "by a safety check \\(finish reason 'SAFETY'\\)"),
        ({"content": None, "error_code": "RESOURCE_EXHAUSTED", "error_message": "quota"}, "failed_request", "quota"),
    ]:
        attributes = [*span[:3], kv("gcp.vertex.agent.llm_response", json.dumps({**response, **changed}))]
        with pytest.raises(FormatError, match=says) as e:
            normalize(otlp(attributes), "otel")
        assert e.value.reason == reason
    history = {**request, "contents": [*request["contents"], {"role": "model", "parts": [{"function_call": {"name": "add"}}]}]}
    with pytest.raises(FormatError, match="holds a part of type function_call") as e:
        normalize(otlp([*span[:2], kv("gcp.vertex.agent.llm_request", json.dumps(history)), *span[3:]]), "otel")
    assert e.value.reason == "tool_call_in_prompt"
    # ADK records no turn's images (a turn of no parts), nor a prompt's start a context cache kept.
    for changed, reason, says in [
        ({"contents": [{"role": "user", "parts": []}, *request["contents"]]}, "non_text_content", "a turn of no parts"),
        ({"config": {"cached_content": "projects/p/locations/l/cachedContents/1"}}, "invalid_field", "a context cache"),
    ]:
        with pytest.raises(FormatError, match=says) as e:
            normalize(otlp([*span[:2], kv("gcp.vertex.agent.llm_request", json.dumps({**request, **changed})), *span[3:]]), "otel")
        assert e.value.reason == reason
    # Its system instruction as texts; its counts from the answer's usage, where the span has none (ADK before mid-2025).
    texts = {**request, "config": {"system_instruction": ["Be brief.", "Answer in French."]}}
    (t,) = normalize(otlp([*span[:2], kv("gcp.vertex.agent.llm_request", json.dumps(texts)), span[3]]), "otel")
    assert t["messages"][0] == {"role": "system", "content": "Be brief.\nAnswer in French."}
    assert t["usage"] == {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21}


def test_an_older_prompt_of_texts_without_roles_says_so():
    """Spring AI 1.0 wrote gen_ai.prompt as the messages' texts alone: which role each has cannot be told."""
    span = otlp([kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "m"),
                 kv("gen_ai.prompt", json.dumps(["Be brief.", "2+2?"])), kv("gen_ai.completion", json.dumps(["4"]))])
    with pytest.raises(FormatError, match="gen_ai.prompt holds texts without their roles") as e:
        normalize(span, "otel")
    assert e.value.reason == "invalid_field"


def test_openinference_llm_spans_are_read_from_their_flattened_messages():
    """OpenInference's LLM spans (Arize Phoenix's, LlamaIndex's, ...) flatten their messages under
    llm.input_messages / llm.output_messages, as OpenLLMetry does under its names; its other spans
    (chains, agents, tools) are passed over."""
    def message(side: str, i: int, role: str, content: str | None = None, **more) -> list[dict]:
        at = f"llm.{side}_messages.{i}.message."
        return [kv(at + "role", role), *([kv(at + "content", content)] if content is not None else []),
                *(kv(at + k, v) for k, v in more.items())]

    llm = [kv("openinference.span.kind", "LLM"), kv("llm.model_name", "gpt-4o-mini"), kv("llm.token_count.prompt", 20),
           kv("llm.token_count.completion", 1), *message("input", 0, "system", "Be brief."), *message("input", 1, "user", "2+2?"),
           *message("output", 0, "assistant", "4")]
    (t,) = normalize(otlp(llm), "otel")
    assert (t["messages"], t["completion"], t["model"]["name"], t["usage"]["prompt_tokens"]) == (
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}], "4", "gpt-4o-mini", 20)
    parts = [kv("openinference.span.kind", "LLM"), *message("input", 0, "user", **{
        "contents.0.message_content.type": "text", "contents.0.message_content.text": "Question:",
        "contents.1.message_content.type": "text", "contents.1.message_content.text": "2+2?"}), *message("output", 0, "assistant", "4")]
    (p,) = normalize(otlp(parts), "otel")
    assert p["messages"] == [{"role": "user", "content": "Question:\n2+2?"}]
    for change, reason, says in [
        ([*message("input", 2, "assistant", **{"tool_calls.0.tool_call.function.name": "add"})], "tool_call_in_prompt", "tool_calls"),
        ([*message("input", 2, "assistant", function_call_name="add")], "tool_call_in_prompt", "function_call"),
        ([*message("input", 1, "user", **{"contents.0.message_content.type": "image"})], "non_text_content",
         "llm.input_messages.1 holds a part of type image"),
        ([*message("output", 0, "assistant", "", **{"tool_calls.0.tool_call.function.name": "add"})], "no_text_answer",
         "the answer is a tool call"),
    ]:
        with pytest.raises(FormatError, match=says) as e:
            normalize(otlp(list({a["key"]: a for a in [*llm, *change]}.values())), "otel")
        assert e.value.reason == reason
    chain = [kv("openinference.span.kind", "CHAIN"), kv("input.value", "2+2?"), kv("output.value", "4")]
    assert normalize(otlp(chain), "otel") == []
    # Its google-genai instrumentor keeps Gemini's role "model"; a thinking model's reasoning parts are no answer.
    gemini = [*llm[:-2], *message("input", 2, "model", "4"), *message("input", 3, "user", "And 3+3?"), *message("output", 0, "model", **{
        "contents.0.message_content.type": "reasoning", "contents.0.message_content.text": "3+3 is 6.",
        "contents.1.message_content.type": "text", "contents.1.message_content.text": "6"})]
    (g,) = normalize(otlp(gemini), "otel")
    assert [m["role"] for m in g["messages"]] == ["system", "user", "assistant", "user"] and g["completion"] == "6"


def test_pydantic_ai_and_adk_media_parts_are_not_text():
    """pydantic-ai (its instrumentation before version 4) and Google ADK name their media parts their
    own way: a prompt that showed the model one is refused, not read as the question without it."""
    for part in ({"type": "image-url", "url": "https://x/cat.png"}, {"type": "binary", "media_type": "image/png", "content": "iVBO"},
                 {"type": "audio-url", "url": "u"}, {"type": "video-url", "url": "u"}, {"type": "document-url", "url": "u"},
                 {"type": "file_data", "mime_type": "image/png", "uri": "gs://b/cat.png"}):
        ask = [{"role": "user", "parts": [*_parts(["What is in this image?"], "content"), part]}]
        span = otlp([kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "m"), kv("gen_ai.input.messages", json.dumps(ask)),
                     kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": _parts(["A cat."], "content")}]))])
        with pytest.raises(FormatError, match=f"holds a part of type {part['type']}") as e:
            normalize(span, "otel")
        assert e.value.reason == "non_text_content"


def test_a_model_calls_span_without_content_or_log_records_of_it_is_no_content_saying_how_to_record_it():
    """Instrumentations record no prompt or answer unless asked to (the OpenTelemetry ones by
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT): a source of such spans gave no trace and
    said nothing. So does a span that names no operation but the model it asked (an older OpenLLMetry's,
    or Google ADK's not recording content). A span
    that names neither is another kind of span, passed over as before."""
    (silent,) = _with_logs(otlp(CONTENTLESS), logs(event("gen_ai.user.message", {"content": "Hi"}, span="other")))
    assert silent.reason == "no_content" and "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in str(silent)
    assert str(silent).startswith(f"span {SPAN_ID}: a chat call's span holds no prompt or answer")
    adk = otlp([*CONTENTLESS[1:], kv("gcp.vertex.agent.llm_request", "{}"), kv("gcp.vertex.agent.llm_response", "{}")])
    (unread,) = _with_logs(adk)  # Google ADK's, not asked to record content
    assert unread.reason == "no_content" and "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in str(unread)
    assert str(unread).startswith(f"span {SPAN_ID}: a span of a call of gpt-4o-mini (no operation named) holds")
    assert normalize(otlp(CONTENTLESS[3:]), "otel") == []  # neither named: as the /health span beside it
    assert normalize(logs({"body": {"stringValue": "GET /health 200"}, "severityNumber": 9}), "otel") == []  # no GenAI event


@pytest.mark.parametrize("named_by_attribute", [False, True], ids=["eventName", "event.name attribute"])
def test_the_log_records_of_a_calls_messages_and_choices_join_its_span(named_by_attribute):
    """OpenTelemetry's own instrumentations (semconv v1.28 to v1.36, their default) record content as
    log records, a message or a choice each, in the span of the call, which holds its model, usage
    and times: they join by the span's trace and span id, across files, in the order read."""
    records = logs(*(event(name, body, named_by_attribute=named_by_attribute) for name, body in [
        ("gen_ai.system.message", {"content": "Be brief."}),
        ("gen_ai.user.message", {"content": "What is 2 plus 3?"}),
        ("gen_ai.assistant.message", {"content": "5"}),
        ("gen_ai.user.message", {"content": "Doubled?"}),
        ("gen_ai.choice", {"index": 1, "finish_reason": "stop", "message": {"role": "assistant", "content": "Ten."}}),
        ("gen_ai.choice", {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "10"}}),
    ]), event("gen_ai.evaluation.result", attributes=[kv("gen_ai.evaluation.name", "correct"),
                                                       kv("gen_ai.evaluation.score.value", 1.0)]))
    first, second = _with_logs(otlp(CONTENTLESS), records)
    assert [(t["trace_id"], t["completion"]) for t in (first, second)] == [(f"{SPAN_ID}:0", "10"), (f"{SPAN_ID}:1", "Ten.")]
    rec = decode(json.dumps(first))
    assert [(m.role, m.content) for m in rec.messages] == [("system", "Be brief."), ("user", "What is 2 plus 3?"),
                                                           ("assistant", "5"), ("user", "Doubled?")]
    assert rec.model.name == "gpt-4o-mini-2024-07-18" and rec.usage.prompt_tokens == 21 and rec.latency_ms == 250.0
    assert [(s.name, s.value) for s in rec.scores] == [("correct", 1.0)]
    tool_call = logs(event("gen_ai.user.message", {"content": "Weather?"}),
                     event("gen_ai.choice", {"index": 0, "finish_reason": "tool_calls", "message": {"tool_calls": [{"id": "c"}]}}))
    (refused,) = _with_logs(otlp(CONTENTLESS), tool_call)
    assert refused.reason == "no_text_answer" and "choice 0: the answer is a tool call" in str(refused)


def test_the_log_records_other_instrumentations_write_are_read_as_they_mean():
    """OpenLLMetry writes a choice's tool calls beside its message, and Anthropic's content blocks (its
    thinking, then its text) each as a choice, a streamed one as a part alone; python-contrib's
    Vertex AI instrumentation writes Gemini's parts ({"text": ...}), its google-genai one a Gemini
    Content (model_dump: every key, most None) and no message in a choice."""
    def answers(*records, system="openai") -> list:
        stamped = [{**r, "attributes": [kv("gen_ai.system", system)]} for r in records]
        return [t if isinstance(t, FormatError) else t["completion"]
                for t in _with_logs(otlp(CONTENTLESS), logs(event("gen_ai.user.message", {"content": "2+3?"}), *stamped))]

    beside = event("gen_ai.choice", {"index": 0, "finish_reason": "tool_calls", "message": {"content": "Let me add."},
                                     "tool_calls": [{"id": "c", "type": "function", "function": {"name": "add"}}]})
    (called,) = answers(beside)
    assert called.reason == "no_text_answer" and "its text beside it no answer" in str(called)
    blocks = [event("gen_ai.choice", {"index": i, "finish_reason": "end_turn", "message": {"content": text}})
              for i, text in enumerate(["2 plus 3: 2+3 is 5.", "5"])]
    assert [e.reason for e in answers(*blocks, system="anthropic")] == ["no_text_answer"] * 2
    streamed = event("gen_ai.choice", {"index": 0, "finish_reason": "end_turn", "message": {"content": {"type": "text", "content": "5"}}})
    assert answers(streamed, system="anthropic") == ["5"]
    vertex = event("gen_ai.choice", {"index": 0, "finish_reason": "stop", "message": {"content": [{"text": "5"}], "role": "model"}})
    assert answers(vertex, system="vertex_ai") == ["5"]
    dumped = {"text": "5", "thought": None, "inline_data": None, "function_call": None, "file_data": None}
    genai = event("gen_ai.choice", {"index": 0, "finish_reason": "STOP", "content": {"parts": [dumped], "role": "model"}})
    assert answers(genai, system="gemini") == ["5"]
    called = event("gen_ai.choice", {"index": 0, "finish_reason": "STOP", "content": {"parts": [
        {**dumped, "text": None, "function_call": {"name": "add"}}], "role": "model"}})
    assert answers(called, system="gemini")[0].reason == "no_text_answer"


def test_a_langfuse_generation_of_the_responses_api_or_that_failed_is_read_as_it_was():
    """langfuse.openai logs a Responses API call's output items (a reasoning model's reasoning first)
    and its earlier turns' input_text/output_text parts; a call that failed is level ERROR, no output."""
    from ctpipe.formats import _trace as generation

    base = {"type": "GENERATION", "id": "g1", "traceId": "t1", "startTime": "2026-11-22T10:05:00Z", "model": "gpt-4.1"}
    said = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "23", "annotations": []}]}
    chat = [{"role": "user", "content": [{"type": "input_text", "text": "A prime above 10?"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "11"}]}, {"role": "user", "content": "Above 20?"}]
    for output in (said, [{"type": "reasoning", "summary": []}, said]):
        t = generation({**base, "input": chat, "output": output}, [], None)
        assert t["completion"] == "23" and [m["content"] for m in t["messages"]] == ["A prime above 10?", "11", "Above 20?"]
    with pytest.raises(FormatError, match=r"observation g1: the call failed \(level ERROR: RateLimitError\)") as e:
        generation({**base, "input": chat, "output": None, "level": "ERROR", "statusMessage": "RateLimitError"}, [], None)
    assert e.value.reason == "failed_request"


def test_a_cited_answer_is_one_text_and_retrieved_context_is_not_passed_over():
    """Anthropic (and Converse) split an answer with citations into blocks within its sentences: joined
    with a new line, the answer read "According to the source, \nthe grass is green\n."; Converse's
    cited words were dropped. Retrieved context in a prompt (search_result, searchResult) was dropped
    without a word: the question without it is another one."""
    from ctpipe.formats import _anthropic_response, _converse_text, _text

    blocks = [{"type": "text", "text": "According to the source, "},
              {"type": "text", "text": "the grass is green", "citations": [{"type": "search_result_location"}]},
              {"type": "text", "text": "."}]
    said = _anthropic_response({"content": [{"type": "thinking", "thinking": "Hm."}, *blocks], "stop_reason": "end_turn"})
    assert said["choices"][0]["message"]["content"] == "According to the source, the grass is green."
    converse = [{"text": "According to the source, "}, {"citationsContent": {"content": [{"text": "the grass is green"}],
                                                                           "citations": []}}, {"text": "."}]
    assert _converse_text(converse, "output", prompt=False) == ("According to the source, the grass is green.", [])
    with pytest.raises(FormatError, match="holds a part of type search_result, which is not read as text") as e:
        _text([{"type": "search_result", "content": [{"type": "text", "text": "Grass is green."}]},
               {"type": "text", "text": "What colour is grass?"}], "request.messages[0]", said=True)
    assert e.value.reason == "non_text_content"
    with pytest.raises(FormatError, match="holds a block of type searchResult"):
        _converse_text([{"searchResult": {"content": []}}, {"text": "What colour?"}], "messages[0]", prompt=True)


def test_an_answer_that_is_json_text_is_its_text_not_parts():
    """[{"type": "PERSON", "text": "Ada"}] is an extraction's answer, not content parts of types no one has."""
    answer = json.dumps([{"type": "PERSON", "text": "Ada"}])
    (t,) = normalize(otlp([kv("gen_ai.request.model", "m"), kv("gen_ai.prompt.0.role", "user"),
                           kv("gen_ai.prompt.0.content", "Who?"), kv("gen_ai.completion.0.role", "assistant"),
                           kv("gen_ai.completion.0.content", answer)]), "otel")
    assert t["completion"] == answer
    from ctpipe.formats import _text

    with pytest.raises(FormatError, match="is neither text nor a list of parts"):  # no Gemini parts, whose texts join
        _text([{"text": "Ada", "label": "PERSON"}, {"text": "Paris", "label": "LOC"}], "output")
    mixed = json.dumps([{"type": "text", "text": "What colour?"}, {"type": "search_result", "content": []}])
    with pytest.raises(FormatError, match="holds a part of type search_result"):  # parts, one of a kind not read
        normalize(otlp([kv("gen_ai.request.model", "m"), kv("gen_ai.prompt.0.role", "user"), kv("gen_ai.prompt.0.content", mixed),
                        kv("gen_ai.completion.0.role", "assistant"), kv("gen_ai.completion.0.content", "Green.")]), "otel")


def test_log_records_join_in_the_order_of_their_times_and_records_without_content_are_no_content():
    """The Collector's S3 exporter names each file with a random number: a span's records are taken
    by their times, not the order their files were read in. An instrumentation not asked to record
    content still logs an event per message and choice, without it: the span has no content."""
    def at(record, ms):
        return {**record, "timeUnixNano": str(1795340000000000000 + ms * 10**6)}

    first = logs(at(event("gen_ai.system.message", {"content": "Be brief."}), 1),
                 at(event("gen_ai.user.message", {"content": "What is 2 plus 3?"}), 2))
    later = logs(at(event("gen_ai.assistant.message", {"content": "5"}), 3),
                 at(event("gen_ai.user.message", {"content": "Doubled?"}), 4),
                 at(event("gen_ai.choice", {"index": 0, "finish_reason": "stop", "message": {"content": "10"}}), 5))
    (t,) = _with_logs(otlp(CONTENTLESS), later, first)
    assert [m["content"] for m in t["messages"]] == ["Be brief.", "What is 2 plus 3?", "5", "Doubled?"]
    assert t["completion"] == "10"
    unrecorded = logs(event("gen_ai.user.message", {}), event("gen_ai.choice", {"index": 0, "finish_reason": "stop",
                                                                                "message": {"role": "assistant"}}))
    (e,) = _with_logs(otlp(CONTENTLESS), unrecorded)
    assert e.reason == "no_content", e
    # Records that name no span join none: a span whose ids are empty names no trace, and is refused.
    nameless = otlp(CONTENTLESS)
    nameless["resourceSpans"][0]["scopeSpans"][0]["spans"][0] |= {"traceId": "", "spanId": ""}
    with pytest.raises(FormatError, match="span :: traceId='' is not an id"):
        _with_logs(nameless, logs(*({**r, "traceId": "", "spanId": ""} for r in later["resourceLogs"][0]["scopeLogs"][0]["logRecords"])))


def test_log_records_read_as_their_text_join_as_the_decoded_ones_and_other_lines_are_left_to_the_reader():
    """An export of log records is read without decoding the records' bodies, each kept as its JSON
    text until its span's join; what the typed reading cannot take, the reader reads whole."""
    from ctpipe.formats import Held, held_log_records, join, joined

    export = logs(event("gen_ai.user.message", {"content": "What is 2 plus 3?"}),
                  {"body": {"stringValue": "GET /health 200"}, "severityNumber": 9, "attributes": [kv("http.route", "/")]},
                  event("gen_ai.choice", {"index": 0, "finish_reason": "stop", "message": {"content": "5"}}),
                  {"body": {"stringValue": "slow query"}, "severityNumber": 13, "eventName": "db.query"})
    line = json.dumps(export).encode()
    typed, read = held_log_records(line), [h for h in normalize(export, "otel") if isinstance(h, Held)]
    assert len(typed) == 2  # an application's log records beside them, without an event name or of another, pass
    assert [(h.kind, h.trace, h.span, json.loads(h.value)) for h in typed] == [(h.kind, h.trace, h.span, h.value) for h in read]
    span = [h.entry(("f", 1)) for h in normalize(otlp(CONTENTLESS), "otel")]
    traces = [[t for r in join(span + [h.entry(None) for h in held]) for t in joined(r)] for held in (typed, read)]
    assert traces[0] == traces[1] and traces[0][0]["completion"] == "5"
    named_by_attribute = json.dumps(logs(event("gen_ai.user.message", {"content": "Hi"}, named_by_attribute=True))).encode()
    not_utf8 = line.replace(b"What is", b"What \xff is")
    for other in (named_by_attribute, not_utf8, b'{"resourceLogs": [{"scopeLogs": null}]}', b'{"resourceLogs": 5}'):
        assert held_log_records(other) is None, other
    odd = logs({"body": {"stringValue": "x"}, "attributes": {"not": "a list"}}, event("gen_ai.user.message", {"content": "Hi"}))
    assert [h.kind for h in normalize(odd, "otel")] == ["event"]  # the odd record passes, the others are read


def test_any_value_anywhere_in_a_span_or_its_log_records_gives_traces_or_the_errors_that_say_why():
    """:func:`tests.conftest.mutated` of the span and of the export of its records, read whole and
    (the export) as text: the join gives traces or FormatErrors, never a run's crash."""
    from tests.conftest import mutated
    from ctpipe.formats import Held, held_log_records, join, joined
    from ctpipe.traces import InvalidTrace, convert

    def traces_of(span: dict, export: dict, typed: bool, hold_spans: bool = False) -> None:
        held = held_log_records(json.dumps(export).encode()) if typed else None
        docs = [span] if held is not None else [span, export]
        entries = [h.entry(None) for h in held or [] if isinstance(h, Held)]  # an evaluation that is no score: its error
        for doc in docs:
            try:
                entries += [r.entry(("f", 1)) for r in normalize(doc, "otel", hold_spans) if isinstance(r, Held)]
            except FormatError:
                pass
        for trace in (t for record in join(entries) for t in joined(record) if not isinstance(t, FormatError)):
            try:
                convert(trace)
            except InvalidTrace:
                pass

    export = logs(event("gen_ai.system.message", {"content": "Be brief."}),
                  event("gen_ai.user.message", {"content": _parts(["2+3?"])}),
                  event("gen_ai.choice", {"index": 0, "finish_reason": "stop", "message": {"content": "5"}}),
                  event("gen_ai.client.inference.operation.details", attributes=[kv("gen_ai.output.messages", "[]")]),
                  event("gen_ai.evaluation.result", attributes=[kv("gen_ai.evaluation.name", "judge"),
                                                                 kv("gen_ai.evaluation.score.value", 1.0)]))
    for mutant in mutated(export):
        for typed in (False, True):
            traces_of(otlp(CONTENTLESS), mutant, typed)
    for mutant in mutated(otlp(CONTENTLESS)):
        traces_of(mutant, export, False)
    holding = otlp(CONTENTLESS + [kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": _parts(["2+3?"])}])),
                                  kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": _parts(["5"])}]))])
    for mutant in mutated(holding):
        traces_of(mutant, export, False, hold_spans=True)
    for mutant in mutated(export):
        traces_of(holding, mutant, True, hold_spans=True)


def test_the_details_log_record_of_newer_semconv_joins_its_span():
    """From semconv v1.37, content recorded apart from the span is one record of the call's attributes."""
    details = event("gen_ai.client.inference.operation.details", attributes=[
        kv("gen_ai.operation.name", "chat"),
        {"key": "gen_ai.input.messages", "value": {"arrayValue": {"values": [{"kvlistValue": {"values": [
            {"key": "role", "value": {"stringValue": "user"}},
            {"key": "parts", "value": {"arrayValue": {"values": [{"kvlistValue": {"values": [
                {"key": "type", "value": {"stringValue": "text"}}, {"key": "content", "value": {"stringValue": "2+3?"}}]}}]}}}]}}]}}},
        kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "5"}]}]))])
    (t,) = _with_logs(logs(details), otlp(CONTENTLESS))  # the logs first: the order of the files does not matter
    assert t["messages"] == [{"role": "user", "content": "2+3?"}] and t["completion"] == "5" and t["trace_id"] == SPAN_ID


def test_a_span_that_holds_its_content_is_read_as_it_is_whatever_log_records_of_it():
    """Content on the span and in log records both (SPAN_AND_EVENT): the span's, once."""
    messages = [kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": _parts(["2+3?"], "content")}])),
                kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": _parts(["5"], "content")}]))]
    (t,) = _with_logs(otlp(CONTENTLESS + messages), logs(event("gen_ai.choice", {"index": 0, "message": {"content": "6"}})))
    assert t["completion"] == "5"


def test_a_span_held_for_its_log_records_takes_only_their_evaluations_and_is_read_as_where_it_lies():
    """With hold_spans (a source of evaluation results as log records), a span that holds its content
    joins its records as one without does: its traces are those it gives where it lies, with the
    evaluations of them as scores after its own; its content is its own, not its records'."""
    messages = [kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": _parts(["2+3?"], "content")}])),
                kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": _parts(["5"], "content")}
                                                         for _ in range(2)]))]
    span = otlp(CONTENTLESS + messages)
    evaluation = event("gen_ai.evaluation.result", attributes=[kv("gen_ai.evaluation.name", "judge"),
                                                               kv("gen_ai.evaluation.score.value", 0.25)])
    records = logs(event("gen_ai.user.message", {"content": "6+6?"}), evaluation,
                   event("gen_ai.choice", {"index": 0, "message": {"content": "12"}}))
    alone = _with_logs(span)
    assert [h.kind for h in normalize(span, "otel", hold_spans=True)] == ["span"]
    held = _with_logs(span, records, hold_spans=True)
    assert [t["scores"] for t in held] == [[{"name": "judge", "value": 0.25, "label": None, "source": "otel"}]] * 2
    assert [{**t, "scores": []} for t in held] == alone and [t["completion"] for t in alone] == ["5", "5"]
    assert [h.evaluation for h in normalize(records, "otel")] == [False, True, False]
    from ctpipe.formats import held_log_records
    assert [h.evaluation for h in held_log_records(json.dumps(records).encode())] == [False, True, False]


def test_semconv_1_26_content_on_span_events_is_read_as_on_the_span():
    prompt = json.dumps([{"role": "user", "content": "What is 2 plus 3?"}])
    doc = otlp([kv("gen_ai.request.model", "m")], [
        {"name": "gen_ai.content.prompt", "attributes": [kv("gen_ai.prompt", prompt)]},
        {"name": "gen_ai.content.completion", "attributes": [kv("gen_ai.completion", '[{"role": "assistant", "content": "5"}]')]}])
    (t,) = normalize(doc, "otel")
    assert t["trace_id"] == SPAN_ID and t["messages"][-1]["content"] == "What is 2 plus 3?" and t["completion"] == "5"


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_score_is_refused_as_a_non_finite_number_in_otlp_and_langfuse(value):
    """OTLP JSON writes a non-finite double as a string; a Langfuse Parquet export holds it as a float."""
    from ctpipe.formats import langfuse_entry

    messages = [kv("gen_ai.prompt.0.content", "What is 2 plus 3?"), kv("gen_ai.completion.0.content", "5")]
    evaluation = {"name": "gen_ai.evaluation.result", "attributes": [
        kv("gen_ai.evaluation.name", "judge"), {"key": "gen_ai.evaluation.score.value", "value": {"doubleValue": value}}]}
    with pytest.raises(FormatError, match=f"span {SPAN_ID}: .*gen_ai.evaluation.score.value is") as e:
        normalize(otlp(messages, [evaluation]), "otel")
    assert e.value.reason == "non_finite_number"
    for kind in ("NUMERIC", "BOOLEAN"):
        with pytest.raises(FormatError, match="score s1: value is") as e:
            langfuse_entry({"id": "s1", "traceId": "t1", "name": "q", "value": float(value), "dataType": kind, "source": "API"})
        assert e.value.reason == "non_finite_number"
    # A generation's token count in a Parquet row's usage map was "no int" (invalid_field).
    (refused,) = _joined([{"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z",
                           "model": "m", "input": "What is 2 plus 3?", "output": "5",
                           "usageDetails": {"input": float(value), "output": 2}}])
    assert isinstance(refused, FormatError) and refused.reason == "non_finite_number" and "usage input is" in str(refused)


def test_unknown_and_mismatched_documents_are_reported_not_guessed():
    with pytest.raises(FormatError, match=r"matches no known trace format \(keys \['hello'\]\)") as e:
        normalize({"hello": 1}, "auto")
    assert e.value.reason == "unknown_format"
    with pytest.raises(FormatError, match="is not a record of the otel format \\(looks like openai\\)"):
        normalize(OPENAI, "otel")
    bad = json.loads(json.dumps(OPENAI))
    bad["response"]["created"] = "yesterday"
    with pytest.raises(FormatError, match=r"response.created='yesterday' is not a"):
        normalize(bad, "openai")


def _joined(rows):
    from ctpipe.formats import join, joined, langfuse_entry

    return [trace for record in join(filter(None, map(langfuse_entry, rows))) for trace in joined(record)]


def test_langfuse_generations_get_their_scores_and_trace_release_whatever_the_order():
    from ctpipe.formats import langfuse_entry

    rows = [
        {"id": "s1", "traceId": "t1", "observationId": "g1", "name": "correct", "value": 1, "dataType": "BOOLEAN", "source": "EVAL"},
        {"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00.000Z",
         "endTime": "2026-11-22T10:00:00.120Z", "model": "ctpipe-arith",
         "input": [{"role": "user", "content": "What is 2 plus 3?"}], "output": {"role": "assistant", "content": "5"},
         "usageDetails": {"input": 19, "output": 2, "total": 21}},
        {"id": "sp", "traceId": "t1", "type": "SPAN", "startTime": "2026-11-22T10:00:00Z"},
        {"id": "s2", "traceId": "t1", "name": "helpful", "value": 4.0, "dataType": "NUMERIC", "source": "ANNOTATION"},
        {"id": "s3", "traceId": "t1", "observationId": "g1", "name": "tone", "value": 0, "stringValue": "polite",
         "dataType": "CATEGORICAL", "source": "API"},
        {"id": "t1", "timestamp": "2026-11-22T10:00:00Z", "release": "3", "sessionId": None},
    ]
    assert {detect(r) for r in rows} == {"langfuse"}
    (t,) = _joined(rows)
    rec = decode(json.dumps(t))
    assert rec.trace_id == "t1:g1" and rec.model.version == "3" and rec.latency_ms == pytest.approx(120.0)
    assert rec.usage.total_tokens == 21 and rec.completion == "5"
    assert t["scores"] == [
        {"name": "correct", "value": 1.0, "label": None, "source": "eval"},
        {"name": "tone", "value": None, "label": "polite", "source": "api"},
        {"name": "helpful", "value": 4.0, "label": None, "source": "annotation"},
    ]
    from decimal import Decimal

    decimal = {"id": "d", "traceId": "t1", "name": "q", "value": Decimal("4.50"), "dataType": "NUMERIC", "source": "API"}
    assert langfuse_entry(decimal)[0] == "score"  # as a Parquet export's decimal column reads
    with pytest.raises(FormatError, match=r"score x: value='high' is not a number"):
        langfuse_entry({"id": "x", "traceId": "t1", "name": "q", "value": "high", "dataType": "NUMERIC", "source": "API"})


def test_langfuse_times_without_a_zone_are_utc_whatever_the_hosts_zone(monkeypatch):
    import time
    from datetime import datetime

    def generation(start, end):
        return {"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": start, "endTime": end, "model": "m",
                "input": [{"role": "user", "content": "q"}], "output": "a"}

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        for row in (generation("2026-11-22T10:30:00", "2026-11-22T10:30:01.5"),  # JSON text
                    generation(datetime(2026, 11, 22, 10, 30), datetime(2026, 11, 22, 10, 30, 1, 500000))):  # naive Parquet
            (t,) = _joined([row])
            assert (t["start_time"], t["end_time"]) == ("2026-11-22T10:30:00+00:00", "2026-11-22T10:30:01.500000+00:00")
    finally:
        monkeypatch.undo()
        time.tzset()


def test_langfuse_blob_storage_exports_in_snake_case_join_as_the_apis_camel_case():
    rows = [
        {"id": "g1", "trace_id": "t1", "type": "GENERATION", "start_time": "2026-11-22T10:00:00.000Z",
         "end_time": "2026-11-22T10:00:00.120Z", "provided_model_name": "ctpipe-arith", "parent_observation_id": None,
         "input": [{"role": "user", "content": "What is 2 plus 3?"}], "output": {"role": "assistant", "content": "5"},
         "usage_details": {"input": 19, "output": 2, "total": 21}},
        {"id": "s1", "trace_id": "t1", "observation_id": "g1", "name": "correct", "value": 1, "string_value": None,
         "data_type": "BOOLEAN", "source": "EVAL"},
        {"id": "s2", "trace_id": "t1", "observation_id": None, "name": "tone", "value": 0, "string_value": "polite",
         "data_type": "CATEGORICAL", "source": "API"},
        {"id": "t1", "timestamp": "2026-11-22T10:00:00Z", "release": "3", "session_id": None},
    ]
    assert {detect(r) for r in rows} == {"langfuse"}
    (t,) = _joined(rows)
    rec = decode(json.dumps(t))
    assert rec.trace_id == "t1:g1" and rec.model.name == "ctpipe-arith" and rec.model.version == "3"
    assert rec.usage.total_tokens == 21 and rec.completion == "5" and rec.latency_ms == pytest.approx(120.0)
    assert t["scores"] == [{"name": "correct", "value": 1.0, "label": None, "source": "eval"},
                           {"name": "tone", "value": None, "label": "polite", "source": "api"}]
    from ctpipe.formats import joined

    (line,) = joined(("generation", json.dumps(rows[0]).encode(), None, [], "3"))  # a generation read from a JSON line
    assert line == {**t, "scores": []}


# An observation as Langfuse's blob-storage export writes it: its database's columns as they are,
# input and output as the JSON text Langfuse keeps them in, usage_details a Map(String, UInt64).
BLOB_OBSERVATION = {
    "id": "g1", "trace_id": "t1", "project_id": "p", "environment": "default", "type": "GENERATION",
    "parent_observation_id": None, "start_time": "2026-11-22 10:00:00.250", "end_time": "2026-11-22 10:00:01.450",
    "name": "chat", "metadata": {}, "level": "DEFAULT", "status_message": None, "version": None,
    "input": json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 plus 3?"}]),
    "output": json.dumps({"role": "assistant", "content": "5"}), "provided_model_name": "ctpipe-arith",
    "model_parameters": "{}", "cost_details": {}, "completion_start_time": None, "prompt_name": None, "prompt_version": None,
}


def test_langfuse_blob_storage_exports_read_as_written_in_jsonl_and_parquet():
    """As JSON lines (counts quoted, as ClickHouse writes 64-bit integers) and as Parquet (a map of
    counts), the export's texts of JSON read as Langfuse's API reads them; a 1.2 s call takes 1200 ms."""
    import pyarrow as pa

    from ctpipe.sources import _documents

    line = {**BLOB_OBSERVATION, "usage_details": {"input": "10", "output": "1", "total": "11"}}
    table = pa.Table.from_pylist([{**BLOB_OBSERVATION, "metadata": None, "cost_details": None,
                                   "usage_details": [("input", 10), ("output", 1), ("total", 11)]}],
                                 schema=pa.schema([(k, pa.string()) for k in BLOB_OBSERVATION if k not in (
                                     "metadata", "cost_details")] + [("usage_details", pa.map_(pa.string(), pa.uint64()))]))
    for row in (json.loads(json.dumps(line)), _documents(table.to_batches()[0], "observations.parquet", 1)[0]):
        (t,) = _joined([row])
        rec = decode(json.dumps(t))
        assert [(m.role, m.content) for m in rec.messages] == [("system", "Be brief."), ("user", "What is 2 plus 3?")]
        assert rec.completion == "5" and t["latency_ms"] == 1200.0
        assert (rec.usage.prompt_tokens, rec.usage.completion_tokens, rec.usage.total_tokens) == (10, 1, 11)
    texts = {"plain text": ("What is 2 plus 3?", "5", "What is 2 plus 3?", "5"),
             "a text that is JSON text": ('"What is 2 plus 3?"', '"5"', "What is 2 plus 3?", "5"),
             "text like JSON": ("[2, 3] plus [", "{5", "[2, 3] plus [", "{5"),
             "a number": ("23", "5", "23", "5")}
    for name, (given_in, given_out, want_in, want_out) in texts.items():
        (t,) = _joined([{**line, "input": given_in, "output": given_out}])
        assert (t["messages"], t["completion"]) == ([{"role": "user", "content": want_in}], want_out), name


# An observation of Langfuse's export of enriched observations (its default since its v4): the
# legacy columns, the trace's own (release, tags, ...) on every row, and no rows of traces.
ENRICHED_OBSERVATION = {**BLOB_OBSERVATION, "parent_observation_id": "", "status_message": "", "version": "",
                        "usage_details": {"input": 10, "output": 1, "total": 11}, "tool_calls": [], "tool_call_names": [],
                        "tool_definitions": {}, "user_id": "u", "session_id": "s", "trace_name": "chat", "tags": [],
                        "release": "v7", "bookmarked": False, "public": False, "is_root_observation": True}


def _blob_score(sid: str, kind: str, value: float, label: str | None = None) -> dict:
    return {"id": sid, "timestamp": "2026-11-22 10:00:03.000000", "project_id": "p", "environment": "default",
            "trace_id": "t1", "observation_id": "g1", "session_id": None, "dataset_run_id": None, "name": "judge",
            "value": value, "source": "EVAL", "comment": "why", "data_type": kind, "string_value": label}


def test_langfuse_enriched_observations_take_their_release_and_refuse_the_calls_listed_apart():
    """A row of enriched observations holds its trace's release: the model's version, as a trace row's
    is (a version of the observation's own comes first). Its answer's tool calls are in a column of
    their own: such an answer is a tool call, whatever its text."""
    (t,) = _joined([ENRICHED_OBSERVATION])
    assert (t["model"], t["completion"]) == ({"name": "ctpipe-arith", "version": "v7"}, "5")
    (t,) = _joined([{**ENRICHED_OBSERVATION, "version": "obs-2"}])
    assert t["model"]["version"] == "obs-2"
    call = '{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}'
    for calls in ([call], json.dumps([call])):  # a list, or its JSON text
        (e,) = _joined([{**ENRICHED_OBSERVATION, "tool_calls": calls}])
        assert (e.reason, str(e)) == ("no_text_answer", "observation g1: output: the answer is a tool call, its text "
                                                        "beside it no answer")
    (t,) = _joined([{**ENRICHED_OBSERVATION, "tool_calls": "[]"}])
    assert t["completion"] == "5"


def test_langfuse_scores_on_an_export_window_s_bound_count_once_and_text_scores_are_not_carried():
    """The windows of Langfuse's scheduled exports share their bounds: a score stamped on one is in
    both files, and counts once (the one read last, where an annotation was edited in between). A
    TEXT score is a comment (its value always 0), and is no more carried than a comment is, nor is a
    CORRECTION (an output as a person corrected it)."""
    rows = [ENRICHED_OBSERVATION, _blob_score("s1", "NUMERIC", 0.5), _blob_score("s2", "NUMERIC", 0.25),
            _blob_score("s3", "TEXT", 0, "Correct, but terse."), _blob_score("s1", "NUMERIC", 1.0),
            {**_blob_score(None, "NUMERIC", 0.75)}, {**_blob_score(None, "NUMERIC", 0.75)}]
    (t,) = _joined(rows)
    assert [s["value"] for s in t["scores"]] == [1.0, 0.25, 0.75, 0.75]  # scores without an id are all kept
    from ctpipe.formats import langfuse_entry

    assert langfuse_entry(_blob_score("s3", "TEXT", 0, "Correct, but terse.")) is None
    assert langfuse_entry({**_blob_score("s5", "CORRECTION", 0, "The answer is 5."), "name": "output"}) is None
    with pytest.raises(FormatError, match="dataType='RANKING' is not NUMERIC, BOOLEAN or CATEGORICAL"):
        langfuse_entry(_blob_score("s4", "RANKING", 1))


def test_langfuse_generations_sent_over_opentelemetry_read_their_messages_as_langfuse_keeps_them():
    """Langfuse keeps a generation it was sent as an OpenTelemetry span with its messages as the span
    had them: OpenLLMetry's as a list of answer messages, semconv's of typed parts."""
    base = {"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z", "model": "m"}
    question = {"role": "user", "parts": [{"type": "text", "content": "What is 3 plus 3?"}]}
    shapes = {
        "OpenLLMetry's": ([{"role": "user", "content": "What is 3 plus 3?"}],
                          [{"role": "assistant", "content": "6", "finish_reason": "stop"}]),
        "semconv's": ([question], [{"role": "assistant", "parts": [{"type": "text", "content": "6"}], "finish_reason": "stop"}]),
        "semconv's as text": (json.dumps([question]), json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "6"}]}])),
    }
    for name, (given_in, given_out) in shapes.items():
        (t,) = _joined([{**base, "input": given_in, "output": given_out}])
        assert (t["messages"], t["completion"]) == ([{"role": "user", "content": "What is 3 plus 3?"}], "6"), name
    refused = {
        "two answers": ([question], [{"role": "assistant", "content": "6"}, {"role": "assistant", "content": "six"}],
                        "invalid_field", "output holds 2 messages"),
        "a message of no parts": ([{"role": "user", "parts": []}], "6", "no_content", "input[0] has no parts"),
        "a refusal": ([question], [{"role": "assistant", "parts": [{"type": "refusal", "content": "No."}]}],
                      "no_text_answer", "the answer is a refusal"),
    }
    for name, (given_in, given_out, reason, says) in refused.items():
        (e,) = _joined([{**base, "input": given_in, "output": given_out}])
        assert isinstance(e, FormatError) and e.reason == reason and says in str(e), (name, e)


def test_litellms_logs_of_calls_take_their_times_and_a_failed_call_is_a_failed_request():
    """LiteLLM's StandardLoggingPayload: the request's messages beside the response, and the call's
    start and end in seconds (its response's ``created`` may be when the answer came, or an earlier
    call's, for a cached one); a failed call has no response, only the error."""
    payload = {"id": "chatcmpl-1", "call_type": "acompletion", "status": "success", "model": "gpt-4o-mini",
               "startTime": 1795340460.123, "endTime": 1795340462.623, "completionStartTime": 1795340460.9,
               "messages": OPENAI["request"]["messages"], "response": OPENAI["response"], "cache_hit": False,
               "hidden_params": {"model_id": "m1"}}
    (t,) = normalize(payload, "auto")
    assert (t["start_time"], t["end_time"], t["latency_ms"]) == ("2026-11-22T09:41:00.123000+00:00",
                                                                 "2026-11-22T09:41:02.623000+00:00", 2500.0)
    assert decode(json.dumps(t)).completion == "5"
    for start in (1795340100, 1795340100.0):  # a start without an end is no call's times: the response's created
        (alone,) = normalize({**payload, "startTime": start, "endTime": None}, "auto")
        assert alone["start_time"] == "2026-11-22T09:33:20+00:00"
    redacted = {**payload, "messages": [{"role": "user", "content": "redacted-by-litellm"}]}
    with pytest.raises(FormatError, match="LiteLLM wrote 'redacted-by-litellm' for the messages") as e:
        normalize(redacted, "auto")
    assert e.value.reason == "no_content"
    failed = {**payload, "status": "failure", "response": {}, "error_str": "RateLimitError: slow down"}
    assert detect(failed) == "openai"
    with pytest.raises(FormatError, match="the call failed: RateLimitError: slow down") as e:
        normalize(failed, "auto")
    assert e.value.reason == "failed_request"
    # A cache hit: its id LiteLLM's own, its response the stored answer of the call it repeats.
    hit = {**payload, "id": "chatcmpl-1_cache_hit1795340470.5", "cache_hit": True}
    with pytest.raises(FormatError, match=re.escape("call chatcmpl-1_cache_hit1795340470.5 is a cache hit: LiteLLM "
                                                    "answered with the stored answer of another call (chatcmpl-1)")) as e:
        normalize(hit, "auto")
    assert e.value.reason == "duplicate"


def test_litellms_logs_of_other_apis_are_read_as_their_bodies_are():
    """LiteLLM logs the answer of the API it served: Anthropic's messages API (its /v1/messages, as
    Claude Code calls it), the Responses API (the input logged as its messages, its parameters under
    model_parameters); read as Helicone's bodies are, the prompt's count with its cached tokens, the
    call's times LiteLLM's. LiteLLM leaves Anthropic's system prompt out of its logs (as prompt
    content, with the messages), but for a system message among them: without one, the prompt served
    cannot be told."""
    payload = {"id": "chatcmpl-2", "call_type": "anthropic_messages", "status": "success", "model": "claude-sonnet-4-5",
               "startTime": 1795340460.0, "endTime": 1795340461.5, "cache_hit": None,
               "model_parameters": {"max_tokens": 64, "system": "Be brief."},
               "messages": [{"role": "user", "content": [{"type": "text", "text": "What is 2 plus 3?"}]}],
               "response": {"id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
                            "content": [{"type": "text", "text": "5"}], "stop_reason": "end_turn",
                            "usage": {"input_tokens": 12, "output_tokens": 3, "cache_read_input_tokens": 2048}}}
    assert detect(payload) == "openai"
    (t,) = normalize(payload, "auto")
    assert (t["trace_id"], t["completion"], t["start_time"], t["latency_ms"]) == (
        "msg_2", "5", "2026-11-22T09:41:00+00:00", 1500.0)
    assert t["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 plus 3?"}]
    assert t["usage"] == {"prompt_tokens": 2060, "completion_tokens": 3, "total_tokens": 2063}
    with pytest.raises(FormatError, match="holds no system prompt") as e:
        normalize({**payload, "model_parameters": {"max_tokens": 64}}, "auto")
    assert e.value.reason == "invalid_field"
    call = {**payload, "response": {**payload["response"], "content": [
        {"type": "tool_use", "id": "t1", "name": "add", "input": {}}], "stop_reason": "tool_use"}}
    with pytest.raises(FormatError, match="the answer is a tool call") as e:
        normalize(call, "auto")
    assert e.value.reason == "no_text_answer"
    responses = {**payload, "call_type": "aresponses", "model_parameters": {"instructions": "Be brief."},
                 "messages": [{"role": "user", "content": "What is 2 plus 3?"}], "response": RESPONSES_RESPONSE}
    (r,) = normalize(responses, "auto")
    assert (r["trace_id"], r["completion"], r["messages"], r["latency_ms"]) == ("resp_1", "5", t["messages"], 1500.0)
    for continued in ({**responses, "model_parameters": {"previous_response_id": "resp_0"}},
                      {**responses, "response": {**RESPONSES_RESPONSE, "previous_response_id": "resp_0"}}):
        with pytest.raises(FormatError, match="continues a conversation the Responses API kept") as e:
            normalize(continued, "auto")
        assert e.value.reason == "invalid_field"
    # Other calls of LiteLLM's (embeddings, images) are no chat: in no format, as before.
    assert detect({**payload, "call_type": "aembedding", "response": {"data": [], "object": "list"}}) is None


def test_a_rating_kept_as_text_is_a_number():
    """OpenAI's stored completions keep every metadata value as text."""
    (t,) = normalize({**OPENAI, "metadata": {"rating": "4", "thumb": "up"}}, "openai")
    assert decode(json.dumps(t)).feedback.rating == 4.0
    # A stored completion keeps it in the completion (the response), as the request gave it (store=True).
    bare = {k: v for k, v in OPENAI.items() if k != "metadata"}
    for side in ("response", "request"):
        (t,) = normalize({**bare, side: {**bare[side], "metadata": {"rating": "2", "thumb": "down"}}}, "openai")
        assert (t["feedback"]["thumb"], decode(json.dumps(t)).feedback.rating) == ("down", 2.0)


def test_a_blank_prompt_is_refused_naming_it():
    for content in ("", "  \n"):
        doc = {**copy.deepcopy(OPENAI), "request": {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                                                          {"role": "user", "content": content}]}}
        (t,) = normalize(doc, "openai")
        with pytest.raises(InvalidTrace, match="the last user message, the prompt, is empty"):
            decode(json.dumps(t))


def test_a_tools_call_or_result_as_a_content_part_is_refused_in_a_prompt_and_is_no_answer():
    """Anthropic's tool blocks and the Responses API's items, as Langfuse and the older OTel names keep
    them in a message's content: the chat without them is not the one the model was served."""
    used = {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "4 C, rain"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "4 C, rain"}
    for message, kind in (({"role": "assistant", "content": [{"type": "text", "text": "Let me check."}, used]}, "tool_use"),
                          ({"role": "user", "content": [result]}, "tool_result"),
                          ({"role": "user", "content": [output]}, "function_call_output"),
                          ({"role": "assistant", "content": [{"type": "web_search_tool_result", "content": []}]},
                           "web_search_tool_result")):
        chat = [{"role": "user", "content": "Weather in Oslo?"}, message, {"role": "user", "content": "And tomorrow?"}]
        (generation,) = _joined([{"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z",
                                  "model": "m", "input": chat, "output": "Rain."}])
        assert generation.reason == "tool_call_in_prompt" and f"input[1] holds a part of type {kind}" in str(generation)
        with pytest.raises(FormatError, match=f"gen_ai.prompt\\[1\\] holds a part of type {kind}") as e:
            normalize(otlp([kv("gen_ai.prompt", json.dumps(chat)), kv("gen_ai.completion", "[]")]), "otel")
        assert e.value.reason == "tool_call_in_prompt"
        flattened = otlp([kv("gen_ai.prompt.0.role", "user"), kv("gen_ai.prompt.0.content", "Weather in Oslo?"),
                          kv("gen_ai.prompt.1.role", message["role"]), kv("gen_ai.prompt.1.content", json.dumps(message["content"])),
                          kv("gen_ai.prompt.2.role", "user"), kv("gen_ai.prompt.2.content", "And tomorrow?"),
                          kv("gen_ai.completion.0.content", "Rain.")])
        with pytest.raises(FormatError, match=f"gen_ai.prompt.1.content holds a part of type {kind}") as e:
            normalize(flattened, "otel")
        assert e.value.reason == "tool_call_in_prompt"
    (answer,) = _joined([{"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z", "model": "m",
                          "input": "Weather in Oslo?", "output": {"role": "assistant", "content": [
                              {"type": "text", "text": "Let me check."}, used]}}])
    assert answer.reason == "no_text_answer" and "a part of type tool_use" in str(answer)


def test_a_semconv_refusal_part_in_a_prompt_is_what_the_assistant_said():
    chat = [{"role": "user", "parts": _parts(["How do I pick a lock?"], "content")},
            {"role": "assistant", "parts": [{"type": "refusal", "content": "I can't help with that."}]},
            {"role": "user", "parts": _parts(["How do I open my own door, then?"], "content")}]
    span = otlp([kv("gen_ai.request.model", "m"), kv("gen_ai.input.messages", json.dumps(chat)),
                 kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": _parts(["Call a locksmith."], "content")}]))])
    (t,) = normalize(span, "otel")
    assert t["messages"][1] == {"role": "assistant", "content": "I can't help with that."}


def test_a_langfuse_count_null_is_not_counted_as_one_missing_is():
    row = {"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z", "model": "m",
           "input": "What is 2 plus 3?", "output": "5"}
    for usage in ({"input": 7, "output": None, "total": None}, {"input": 7, "output": 2, "total": None}):
        (t,) = _joined([{**row, "usageDetails": usage}])
        assert t["usage"] == {"prompt_tokens": 7, "completion_tokens": usage["output"] or 0,
                              "total_tokens": 7 + (usage["output"] or 0)}


def test_langfuse_usage_types_count_as_langfuse_counts_them():
    """Langfuse keeps cached and reasoning tokens apart from ``input`` and ``output``, as usage types of
    their own, and counts every type whose name holds "input" as input, "output" as output: so does
    the reader, as it counts OpenAI's prompt_tokens with their cached ones. The legacy usage object
    names only the two (and costs beside them)."""
    row = {"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z", "model": "m",
           "input": "Prove it.", "output": "Done."}
    for usage, counts in [
        ({"input": "224", "input_cached_tokens": "1024", "output": "180", "output_reasoning_tokens": "1472", "total": "2900"},
         (1248, 1652, 2900)),  # as the blob-storage export quotes them
        ({"input": 10, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20, "output": 1, "reasoning": 3},
         (130, 1, 131)),  # Anthropic's names; a type of neither counts in neither
        ({"input_cached_tokens": 5, "output": 1}, (5, 1, 6)),  # no input beside it: the cached ones all the same
        ({"input": 7, "input_audio_tokens": None, "output": 2}, (7, 2, 9)),
    ]:
        (t,) = _joined([{**row, "usageDetails": usage}])
        assert tuple(t["usage"].values()) == counts, usage
    (t,) = _joined([{**row, "usage": {"input": 7, "output": 2, "inputCost": 0.5, "unit": "TOKENS"}}])
    assert tuple(t["usage"].values()) == (7, 2, 9)
    (t,) = _joined([{**row, "usageDetails": {"input": 7, "input_cached_tokens": "many", "output": 2}}])
    with pytest.raises(InvalidTrace, match="usage.prompt_tokens"):
        traces.convert(t)


def test_an_earlier_refusal_is_what_the_assistant_said_and_audio_is_no_text():
    said = [{"role": "user", "content": "How do I pick a lock?"},
            {"role": "assistant", "content": None, "refusal": "I can't help with that."},
            {"role": "user", "content": "How do I open my own door, then?"}]
    parts = [*said[:1], {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help with that."}]}, said[2]]
    for messages in (said, parts):
        (t,) = normalize({**copy.deepcopy(OPENAI), "request": {"messages": messages}}, "openai")
        assert t["messages"][1] == {"role": "assistant", "content": "I can't help with that."}
    spoken = [*said[:1], {"role": "assistant", "content": None, "audio": {"id": "audio_1"}}, said[2]]
    with pytest.raises(FormatError, match=r"request.messages\[1\] holds audio") as e:
        normalize({**copy.deepcopy(OPENAI), "request": {"messages": spoken}}, "openai")
    assert e.value.reason == "non_text_content"
    log = copy.deepcopy(OPENAI)
    log["response"]["choices"][0]["message"] = {"role": "assistant", "content": None,
                                                "audio": {"id": "audio_2", "data": "UklGRg==", "transcript": "5"}}
    with pytest.raises(FormatError, match="choice 0: the answer is audio, not text") as e:
        normalize(log, "openai")
    assert e.value.reason == "no_text_answer"
    log["response"]["choices"][0]["message"] = {"role": "assistant", "content": parts[1]["content"]}  # refused as parts
    with pytest.raises(FormatError, match="choice 0: the answer is a refusal, not text"):
        normalize(log, "openai")


def test_a_langfuse_join_of_each_traces_rows_apart_gives_the_traces_of_the_whole_export():
    """A trace's rows joined without the others give what the whole export does: ids of other types
    (1 is not "1") and Parquet's datetimes come back as they went in, the last release read wins."""
    from datetime import datetime, timezone

    from ctpipe.formats import langfuse_entry

    def generation(i):
        return {"id": i if i % 3 else str(i), "traceId": f"t{i % 4}", "type": "GENERATION",
                "startTime": datetime(2026, 11, 22, 10, i, tzinfo=timezone.utc), "model": "m",
                "input": [{"role": "user", "content": f"q{i}"}], "output": f"a{i}"}

    rows = []
    for i in range(12):
        rows.append(generation(i))
        rows.append({"id": f"s{i}", "traceId": f"t{i % 4}", "observationId": str(i), "name": "judge", "value": i,
                     "dataType": "NUMERIC", "source": "EVAL"})
        rows.append({"id": f"r{i}", "traceId": f"t{i % 4}", "name": "trace-level", "value": 1, "dataType": "BOOLEAN",
                     "source": "API"})
        rows.append({"id": f"t{i % 4}", "timestamp": "2026-11-22T10:00:00Z", "release": f"v{i}"})  # the last one wins
    whole = _joined(rows)
    apart = [t for k in range(4) for t in _joined([r for r in rows if r.get("traceId", r["id"]) == f"t{k}"])]
    assert sorted(apart, key=lambda t: t["trace_id"]) == sorted(whole, key=lambda t: t["trace_id"])
    assert [t["trace_id"] for t in whole] == [f"t{i % 4}:{i}" for i in range(12)]
    by_id = {t["trace_id"]: t for t in whole}
    assert [s["value"] for s in by_id["t3:3"]["scores"]] == [3.0, 1.0, 1.0, 1.0]  # "3": its own judge score
    assert [s["value"] for s in by_id["t1:1"]["scores"]] == [1.0, 1.0, 1.0]  # 1 is not "1": no judge score
    assert {t["model"]["version"] for t in by_id.values()} == {"v8", "v9", "v10", "v11"}
    assert by_id["t2:2"]["start_time"] == "2026-11-22T10:02:00+00:00"
    assert langfuse_entry({"id": "t9", "timestamp": "2026-11-22T10:00:00Z", "sessionId": "s"}) is None  # no release


BATCH_REQUEST = {"custom_id": "q-1", "method": "POST", "url": "/v1/chat/completions",
                 "body": {"model": "ctpipe-arith", "messages": OPENAI["request"]["messages"], "max_tokens": 64}}
BATCH_OUTPUT = {"id": "batch_req_1", "custom_id": "q-1", "error": None,
                "response": {"status_code": 200, "request_id": "req_1", "body": OPENAI["response"]}}


def _batch(*lines: dict) -> list:
    """The traces (or FormatErrors) of a batch's lines, each output joined with the input lines read."""
    from ctpipe.formats import join, joined

    entries = [held.entry(("f", i)) for i, line in enumerate(lines) for held in normalize(line, "auto")]
    return [t for record in join(entries) for t in joined(record)]


def test_a_batchs_output_joins_its_request_by_custom_id_whichever_file_comes_first():
    """OpenAI's Batch API and vLLM's run_batch write the answers apart from the requests, which the
    output does not repeat: they join by custom_id, as Langfuse rows join by id."""
    assert detect(BATCH_REQUEST) == detect(BATCH_OUTPUT) == "openai"
    (t,) = _batch(BATCH_OUTPUT, BATCH_REQUEST)
    assert _batch(BATCH_REQUEST, BATCH_OUTPUT) == [t] and t["trace_id"] == "chatcmpl-1" and t["completion"] == "5"
    assert t["messages"] == OPENAI["request"]["messages"] and decode(json.dumps(t)).usage.total_tokens == 21
    assert _batch(BATCH_REQUEST, BATCH_OUTPUT, BATCH_REQUEST) == [t]  # the same request read twice is one
    assert _batch(BATCH_REQUEST) == []  # a request not answered yet: nothing to read (the run counts it)


@pytest.mark.parametrize("lines, reason, detail", [
    ([BATCH_OUTPUT], "no_request", "batch request q-1: no line of the batch's input file has its custom_id"),
    ([BATCH_REQUEST, {**BATCH_REQUEST, "body": {**BATCH_REQUEST["body"], "messages": [{"role": "user", "content": "1+1?"}]}},
      BATCH_OUTPUT], "ambiguous_request", "batch request q-1: different requests have its custom_id"),
    ([BATCH_REQUEST, {**BATCH_OUTPUT, "response": None, "error": {"code": "batch_expired", "message": "This request could not be executed"}}],
     "failed_request", "batch request q-1 failed (status None): This request could not be executed"),
    ([BATCH_REQUEST, {**BATCH_OUTPUT, "response": {"status_code": 400, "request_id": "r", "body": {
        "error": {"message": "Invalid 'messages'", "type": "invalid_request_error"}}}}],
     "failed_request", "batch request q-1 failed (status 400): Invalid 'messages'"),
    ([{**BATCH_REQUEST, "url": "/v1/embeddings"}, BATCH_OUTPUT], "invalid_field",
     "url='/v1/embeddings' is neither a chat completion nor a response"),
    ([{**BATCH_REQUEST, "body": "hi"}, BATCH_OUTPUT], "invalid_field", "batch request q-1: body='hi' is not an object"),
], ids=["no request", "ambiguous", "error", "status 400", "not a chat", "body not an object"])
def test_a_batch_output_that_cannot_be_a_trace_says_why(lines, reason, detail):
    (refused,) = _batch(*lines)
    assert isinstance(refused, FormatError) and refused.reason == reason and detail in str(refused), str(refused)


def test_any_value_anywhere_in_a_batchs_lines_gives_traces_or_the_errors_that_say_why():
    from tests.conftest import mutated

    for request, output in [*((m, BATCH_OUTPUT) for m in mutated(BATCH_REQUEST)),
                            *((BATCH_REQUEST, m) for m in mutated(BATCH_OUTPUT))]:
        try:
            found = _batch(request, output)
        except FormatError:  # a line that is no batch line, or whose custom_id is no text
            continue
        _validated(found)


def _validated(found: list) -> None:
    """Each trace of a reader's ``found`` through the trace's validation, which may refuse it, but only so."""
    from ctpipe.traces import convert

    for trace in found:
        if not isinstance(trace, FormatError):
            try:
                convert(trace)
            except InvalidTrace:
                pass


def test_a_helicone_export_gives_its_requests_with_their_times_feedback_and_scores():
    assert detect(HELICONE) == "helicone"
    (t,) = normalize(HELICONE, "auto")
    assert t["trace_id"] == HELICONE["request_id"] and t["messages"] == OPENAI["request"]["messages"]
    assert (t["start_time"], t["end_time"], t["latency_ms"]) == ("2026-11-22T10:15:02.125000+00:00",
                                                                 "2026-11-22T10:15:03.375000+00:00", 1250.0)
    assert t["feedback"] == {"thumb": "up", "rating": None}
    assert t["scores"] == [{"name": "accuracy", "value": 90.0, "label": None, "source": "helicone"}]
    rec = decode(json.dumps(t))
    assert rec.completion == "5" and rec.usage.prompt_tokens == 19 and rec.model.name == "ctpipe-arith"
    # Its request API's other query (Postgres): ISO times, bodies as JSON text, scores with their types, a rating.
    postgres = {**HELICONE, "request_created_at": "2026-11-22T10:15:02.125Z", "delay_ms": None,
                "response_created_at": "2026-11-22T10:15:02.625Z", "request_body": json.dumps(OPENAI["request"]),
                "response_body": json.dumps({**OPENAI["response"], "usage": None}), "feedback_rating": False,
                "scores": {"accuracy": {"value": 90, "valueType": "number"}}}
    (t,) = normalize(postgres, "helicone")
    assert (t["start_time"], t["latency_ms"], t["feedback"]["thumb"]) == ("2026-11-22T10:15:02.125000+00:00", 500.0, "down")
    assert t["usage"] == {"prompt_tokens": 19, "completion_tokens": 2, "total_tokens": 21}  # Helicone's own counts
    (t,) = normalize({**postgres, "prompt_tokens": "x"}, "helicone")
    with pytest.raises(InvalidTrace, match="prompt_tokens"):  # a count that is none is the trace's validation's to name
        decode(json.dumps(t))
    (t,) = normalize({**HELICONE, "scores": {"correct-hcone-bool": "1"}, "cache_reference_id": HELICONE["request_id"]}, "auto")
    assert t["scores"] == [{"name": "correct", "value": 1.0, "label": None, "source": "helicone"}]  # Helicone's suffix gone
    two = {**HELICONE, "response_body": {**OPENAI["response"], "choices": [OPENAI["response"]["choices"][0]] * 2}}
    assert [t["trace_id"] for t in normalize(two, "auto")] == [f"{HELICONE['request_id']}:0", f"{HELICONE['request_id']}:0"]


def test_a_helicone_request_to_anthropic_is_read_as_its_messages_api_writes_it():
    anthropic = {**HELICONE, "provider": "ANTHROPIC", "request_body": {
        "model": "claude-sonnet-4-5", "max_tokens": 512, "system": [{"type": "text", "text": "Be brief."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "What is 2 plus 3?"}]}]},
        "response_body": {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
                          "content": [{"type": "thinking", "thinking": "2 and 3", "signature": "s"},
                                      {"type": "text", "text": "5"}],
                          "stop_reason": "end_turn", "usage": {"input_tokens": 15, "output_tokens": 30}}}
    (t,) = normalize(anthropic, "auto")
    assert t["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 plus 3?"}]
    assert t["completion"] == "5" and t["model"]["name"] == "claude-sonnet-4-5-20250929"
    assert t["usage"] == {"prompt_tokens": 15, "completion_tokens": 30, "total_tokens": 45}
    cached = {**anthropic["response_body"], "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0,
                                                      "cache_read_input_tokens": 1805, "output_tokens": 5}}
    (t,) = normalize({**anthropic, "response_body": cached}, "auto")  # Anthropic counts cached input apart
    assert t["usage"] == {"prompt_tokens": 1817, "completion_tokens": 5, "total_tokens": 1822}
    body = anthropic["response_body"]
    refused = {
        "a tool use": ({**body, "content": [{"type": "text", "text": "Let me add."},
                                            {"type": "tool_use", "id": "t1", "name": "add", "input": {}}],
                        "stop_reason": "tool_use"}, "no_text_answer", "the answer is a tool call"),
        "a web search": ({**body, "content": [{"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
                                              {"type": "text", "text": "5"}]}, "no_text_answer", "the answer is a tool call"),
        "a refusal": ({**body, "content": [], "stop_reason": "refusal"}, "no_text_answer", "stopped by the content filter"),
        "a refusal after some text": ({**body, "content": [{"type": "text", "text": "I can"}], "stop_reason": "refusal"},
                                      "no_text_answer", "stopped by the content filter"),
    }
    for name, (answer, reason, says) in refused.items():
        with pytest.raises(FormatError, match=says) as e:
            normalize({**anthropic, "response_body": answer}, "auto")
        assert e.value.reason == reason, name
    request = anthropic["request_body"]
    for message, reason in [({"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "u"}},
                                                          {"type": "text", "text": "What is this?"}]}, "non_text_content"),
                            ({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "5"}]},
                             "tool_call_in_prompt")]:
        with pytest.raises(FormatError, match=re.escape(f"request {HELICONE['request_id']}: request_body.messages[0] holds")) as e:
            normalize({**anthropic, "request_body": {**request, "messages": [message]}}, "auto")  # its place, not the system's
        assert e.value.reason == reason


@pytest.mark.parametrize("change, reason, says", [
    ({"response_status": 429, "response_body": {"error": {"message": "Rate limit reached"}}}, "failed_request",
     "failed (response_status 429): Rate limit reached"),
    ({"response_status": 500, "request_body": "Be brief.systemWhat is 2 plus 3?user", "response_body": ""},
     "failed_request", "failed (response_status 500)"),  # its bodies kept elsewhere: the status says it all
    ({"response_status": 0, "response_body": '{"helicone_message": "fetching body from signed_url..."}'},
     "failed_request", "has no answer (response_status 0: pending or cancelled)"),
    # Quoted, as ClickHouse writes a 64-bit integer: a partial answer was published to train on.
    ({"response_status": "429", "response_body": {"error": {"message": "Rate limit reached"}}}, "failed_request",
     "failed (response_status 429): Rate limit reached"),
    ({"response_status": "-1"}, "failed_request", "has no answer (response_status -1: pending or cancelled)"),
    ({"request_body": "Be brief.systemWhat is 2 plus 3?user"}, "no_content", "is Helicone's text preview of it"),
    ({"response_body": {"model": "gpt-4o-mini"}}, "no_content", "Helicone was told to omit it (Helicone-Omit-Request"),
    ({"cache_reference_id": "5d9e6c1a-0000-4000-8000-000000000001"}, "duplicate",
     "is a cache hit: Helicone answered with the stored answer of request 5d9e6c1a-0000-4000-8000-000000000001"),
    ({"target_url": "https://api.openai.com/v1/embeddings", "request_body": {"model": "e", "input": "hello"},
      "response_body": {"object": "list", "data": [{"embedding": [0.1]}]}}, "invalid_field",
     "https://api.openai.com/v1/embeddings is not a chat completion"),
    ({"target_url": "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:embedContent",
      "request_body": {"content": {"parts": [{"text": "hello"}]}}, "response_body": {"embedding": {"values": [0.1]}}},
     "invalid_field", "gemini-2.5-flash:embedContent is not a chat completion"),
    ({"request_body": {"helicone_message": "fetching body from signed_url... contact engineering@helicone.ai"}},
     "no_content", "export with the bodies: @helicone/export --include-body"),
    ({"response_body": None}, "no_content", "response_body=None is not an object"),
    ({"request_created_at": "yesterday"}, "invalid_field", "request_created_at='yesterday' is not an ISO 8601 time"),
    ({"scores": {"accuracy": "high"}}, "invalid_field", "scores.accuracy='high' is not a number"),
    ({"scores": {"accuracy": "NaN"}}, "non_finite_number", "scores.accuracy"),
], ids=["429", "500 without bodies", "pending", "429 quoted", "-1 quoted", "preview text", "omitted", "cache hit", "embeddings",
        "gemini", "no body", "null body", "bad time", "score text", "score NaN"])
def test_a_helicone_request_that_cannot_be_a_trace_says_why(change, reason, says):
    with pytest.raises(FormatError, match=re.escape(says)) as e:
        normalize({**HELICONE, **change}, "auto")
    assert e.value.reason == reason


def test_any_value_anywhere_in_a_helicone_request_gives_traces_or_the_errors_that_say_why():
    from tests.conftest import mutated

    for doc in mutated(HELICONE):
        try:
            found = normalize(doc, "auto")
        except FormatError:
            continue
        _validated(found)


def test_a_portkey_export_is_read_as_openai_logs_with_its_own_time_latency_and_status():
    assert detect(PORTKEY) == "openai"
    (t,) = normalize(PORTKEY, "auto")
    assert (t["trace_id"], t["start_time"], t["end_time"], t["latency_ms"]) == (
        "chatcmpl-1", "2026-11-22T10:04:11.482000+00:00", "2026-11-22T10:04:12.394000+00:00", 912.0)
    assert decode(json.dumps(t)).completion == "5"
    # A call of Anthropic's messages API (Claude Code pointed at Portkey): its bodies read as Helicone's are.
    anthropic = {**PORTKEY, "ai_org": "anthropic", "request_url": "https://api.anthropic.com/v1/messages",
                 "request": {"model": "claude-sonnet-4-5", "max_tokens": 64, "system": "Be brief.",
                             "messages": [{"role": "user", "content": "What is 2 plus 3?"}]},
                 "response": {"id": "msg_5", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
                              "content": [{"type": "text", "text": "5"}], "stop_reason": "end_turn",
                              "usage": {"input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 3}}}
    (a,) = normalize(anthropic, "auto")
    assert (a["trace_id"], a["completion"], a["start_time"], a["latency_ms"]) == ("msg_5", "5", t["start_time"], 912.0)
    assert a["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 plus 3?"}]
    assert a["usage"] == {"prompt_tokens": 105, "completion_tokens": 3, "total_tokens": 108}
    nested = {**PORTKEY, "request": {"body": OPENAI["request"]}, "response": {"body": OPENAI["response"], "status": 200}}
    assert normalize(nested, "auto") == [t]  # as its older export docs name the columns (request.body)
    as_text = {**PORTKEY, "request": json.dumps(OPENAI["request"]), "response": {"body": json.dumps(OPENAI["response"])}}
    assert normalize(as_text, "auto") == [t]  # bodies kept as JSON text
    for change, reason, says in [
        ({"response_status_code": 429, "is_success": 0, "response": {"error": {"message": "Rate limit reached"}}},
         "failed_request", "failed (status 429): Rate limit reached"),
        ({"is_success": False}, "failed_request", "failed (status 200)"),
        ({"is_success": 0, "response_status_code": None}, "failed_request", "failed (is_success 0)"),
        ({"request": None, "response": None}, "no_content", "holds no request or response body"),
        ({"created_at": "soon"}, "invalid_field", "created_at='soon' is not an ISO 8601 time"),
    ]:
        doc = {k: v for k, v in {**PORTKEY, **change}.items() if v is not None}
        assert detect(doc) == "openai"
        with pytest.raises(FormatError, match=re.escape(says)) as e:
            normalize(doc, "auto")
        assert e.value.reason == reason


def test_litellm_spend_logs_are_read_from_the_bodies_the_proxy_kept():
    """LiteLLM's spend logs keep the request body as the proxy got it (an Anthropic call's system
    prompt with it, which its loggers' payload leaves out), and the answer, where told to."""
    assert detect(SPEND_LOG) == "openai"
    (t,) = normalize(SPEND_LOG, "auto")
    assert (t["trace_id"], t["start_time"], t["end_time"], t["latency_ms"]) == (
        "chatcmpl-1", "2026-11-22T10:04:11.482000+00:00", "2026-11-22T10:04:12.394000+00:00", 912.0)
    assert (t["messages"], t["completion"], t["usage"]) == (
        OPENAI["request"]["messages"], "5", {"prompt_tokens": 19, "completion_tokens": 2, "total_tokens": 21})
    assert decode(json.dumps(t)).completion == "5"
    as_objects = {**SPEND_LOG, "proxy_server_request": OPENAI["request"], "response": OPENAI["response"],
                  "startTime": "2026-11-22 10:04:11.482+00"}  # jsonb exported as objects; a time with its zone
    assert normalize(as_objects, "auto") == [t]
    anthropic = {**SPEND_LOG, "call_type": "anthropic_messages", "proxy_server_request": json.dumps(
        {"model": "claude-sonnet-4-5", "max_tokens": 64, "system": "Be brief.",
         "messages": [{"role": "user", "content": "What is 2 plus 3?"}]}),
        "response": json.dumps({"id": "msg_5", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                                "content": [{"type": "text", "text": "5"}], "stop_reason": "end_turn",
                                "usage": {"input_tokens": 5, "output_tokens": 3}})}
    (a,) = normalize(anthropic, "auto")
    assert (a["trace_id"], a["completion"], a["latency_ms"]) == ("msg_5", "5", 912.0)
    assert a["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 plus 3?"}]
    responses = {**SPEND_LOG, "call_type": "aresponses", "proxy_server_request": json.dumps(RESPONSES_REQUEST),
                 "response": json.dumps(RESPONSES_RESPONSE)}
    (r,) = normalize(responses, "auto")
    assert (r["trace_id"], r["completion"], r["messages"][0]) == ("resp_1", "5", {"role": "system", "content": "Be brief."})
    cut = "x" * 700 + "... (litellm_truncated skipped 4000 chars) ..." + "y" * 1300
    long = {**OPENAI["request"], "messages": [{"role": "user", "content": cut}]}
    for change, reason, says in [
        ({"status": "failure", "response": "{}", "metadata": json.dumps(
            {"status": "failure", "error_information": {"error_code": "429", "error_message": "Rate limit reached"}})},
         "failed_request", "the call failed: Rate limit reached"),
        ({"status": None, "metadata": json.dumps({"status": "failure"})}, "failed_request", "the call failed"),
        ({"cache_hit": "True"}, "duplicate", "is a cache hit"),
        ({"proxy_server_request": "{}", "response": "{}"}, "no_content", "only with store_prompts_in_spend_logs"),
        ({"proxy_server_request": json.dumps(long)}, "invalid_field", "cut a text of its proxy_server_request short"),
        ({"call_type": "aembedding", "proxy_server_request": json.dumps({"model": "e", "input": ["hi"]}),
          "response": json.dumps({"object": "list", "data": [{"embedding": [0.1]}], "model": "e"})},
         "invalid_field", "its call (aembedding) is not a chat completion"),
        ({"startTime": "soon"}, "invalid_field", "startTime='soon' is not an ISO 8601 time"),
    ]:
        doc = {**SPEND_LOG, **change}
        assert detect(doc) == "openai"
        with pytest.raises(FormatError, match=re.escape(says)) as e:
            normalize(doc, "auto")
        assert e.value.reason == reason, change


def _chunk(index, delta, finish=None, **more):
    return {"id": "chatcmpl-S", "object": "chat.completion.chunk", "created": 1795342502, "model": "gpt-4o-mini",
            "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}], **more}


def test_a_helicone_stream_is_read_from_its_chunks():
    """Helicone keeps a stream as its own merge of the chunks beside the chunks (streamed_data); its merge
    keeps no choice's finish reason and merges choices by position, so the chunks are read instead."""
    def streamed(chunks):  # the merge as Helicone leaves it: one choice, the text joined, no finish reason
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        return {**chunks[0], "object": "chat.completion.chunk", "streamed_data": chunks,
                "choices": [{"delta": {"role": "assistant", "content": text}, "message": {"role": "assistant", "content": text}}]}

    plain = [_chunk(0, {"role": "assistant", "content": ""}), _chunk(0, {"content": "The answer"}),
             _chunk(0, {"content": " is 5."}), _chunk(0, {}, "stop"),
             {**_chunk(0, {}), "choices": [], "usage": {"prompt_tokens": 19, "completion_tokens": 6, "total_tokens": 25}}]
    (t,) = normalize({**HELICONE, "response_body": streamed(plain)}, "auto")
    assert t["completion"] == "The answer is 5." and t["usage"]["completion_tokens"] == 6
    filtered = plain[:3] + [_chunk(0, {}, "content_filter")]
    with pytest.raises(FormatError, match="stopped by the content filter"):
        normalize({**HELICONE, "response_body": streamed(filtered)}, "auto")
    two = [_chunk(0, {"role": "assistant", "content": ""}), _chunk(1, {"role": "assistant", "content": ""}),
           _chunk(0, {"content": "Five"}), _chunk(1, {"content": "5"}), _chunk(0, {"content": "."}), _chunk(0, {}, "stop"),
           _chunk(1, {}, "stop")]
    found = normalize({**HELICONE, "response_body": streamed(two)}, "auto")
    assert [(t["trace_id"][-2:], t["completion"]) for t in found] == [(":0", "Five."), (":1", "5")]
    eleven = [_chunk(i, {"role": "assistant", "content": str(i)}, "stop") for i in range(11)]
    found = normalize({**HELICONE, "response_body": streamed(eleven)}, "auto")
    assert [t["completion"] for t in found] == [str(i) for i in range(11)]  # 2 before 10
    call = [_chunk(0, {"role": "assistant", "content": None, "tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}),
        _chunk(0, {}, "tool_calls")]
    with pytest.raises(FormatError, match="the answer is a tool call"):
        normalize({**HELICONE, "response_body": streamed(call)}, "auto")


def test_an_openai_log_of_a_stream_is_read_from_its_chunks_or_its_events_text():
    """A proxy logs a streamed call's response as it came: the chunks, or the server-sent events' text."""
    chunks = [_chunk(0, {"role": "assistant", "content": ""}), _chunk(0, {"content": "The answer"}),
              _chunk(0, {"content": " is 5."}, "stop"),
              {**_chunk(0, {}), "choices": [], "usage": {"prompt_tokens": 19, "completion_tokens": 6, "total_tokens": 25}}]
    events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    for response in (chunks, events):
        doc = {**OPENAI, "request": {**OPENAI["request"], "stream": True}, "response": response}
        assert detect(doc) == "openai"
        (t,) = normalize(doc, "auto")
        assert (t["trace_id"], t["completion"], t["model"]["name"], t["usage"]["total_tokens"]) == \
               ("chatcmpl-S", "The answer is 5.", "gpt-4o-mini", 25)
    cut = {**OPENAI, "response": chunks[:2] + [_chunk(0, {}, "content_filter")]}
    with pytest.raises(FormatError, match="stopped by the content filter"):
        normalize(cut, "auto")
    with pytest.raises(FormatError, match="response: line 1 of its stream is no JSON: {\"id\": \"chatcmpl-S"):
        normalize({**OPENAI, "response": events[:150] + "\n\n" + events[300:]}, "auto")
    two = [_chunk(0, {"role": "assistant", "content": "Five"}), _chunk(1, {"role": "assistant", "content": "5"}, "stop"),
           _chunk(0, {}, "stop")]
    assert [t["completion"] for t in normalize({**OPENAI, "response": two}, "auto")] == ["Five", "5"]
    # Azure's first chunk names no call ("", 0): the call is the later chunks'; a comment and data: null say nothing
    azure = [{"choices": [], "created": 0, "id": "", "model": "", "object": "", "prompt_filter_results": []}, *chunks]
    (t,) = normalize({**OPENAI, "response": azure}, "auto")
    assert (t["trace_id"], t["model"]["name"], t["completion"]) == ("chatcmpl-S", "gpt-4o-mini", "The answer is 5.")
    (t,) = normalize({**OPENAI, "response": ": OPENROUTER PROCESSING\n\ndata: null\n\n" + events}, "auto")
    assert t["completion"] == "The answer is 5."
    # cut short (no finish reason), or broken off by an error: no whole answer
    for cut in (chunks[:2], chunks[:2] + [{"error": {"message": "The server had an error", "type": "server_error"}}],
                chunks[:2] + [{"object": "error", "message": "vLLM ran out of memory"}]):
        with pytest.raises(FormatError, match="failed_request|stream ended before choice 0's answer did"):
            normalize({**OPENAI, "response": cut}, "auto")
    finished = chunks[:3] + [{"error": {"message": "late"}}]  # an error after the answer finished leaves it whole
    assert normalize({**OPENAI, "response": finished}, "auto")[0]["completion"] == "The answer is 5."


# A call of OpenAI's Responses API, as a log keeps it (request beside response) and as Helicone does.
RESPONSES_REQUEST = {"model": "gpt-4.1-mini", "instructions": "Be brief.",
                     "input": [{"role": "user", "content": [{"type": "input_text", "text": "What is 2 plus 3?"}]}]}
RESPONSES_RESPONSE = {
    "id": "resp_1", "object": "response", "created_at": 1795342502, "status": "completed", "model": "gpt-4.1-mini-2025-04-14",
    "output": [{"type": "reasoning", "id": "rs_1", "summary": []},
               {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": "5", "annotations": []}]}],
    "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}}


def test_a_responses_api_call_is_read_as_a_chat_completion():
    doc = {"request": RESPONSES_REQUEST, "response": RESPONSES_RESPONSE}
    assert detect(doc) == "openai"
    (t,) = normalize(doc, "auto")
    assert (t["trace_id"], t["start_time"], t["completion"]) == ("resp_1", "2026-11-22T10:15:02+00:00", "5")
    assert t["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 plus 3?"}]
    assert t["usage"] == {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    assert normalize({**doc, "request": {**RESPONSES_REQUEST, "input": "What is 2 plus 3?"}}, "auto") == [t]
    (h,) = normalize({**HELICONE, "request_body": RESPONSES_REQUEST, "response_body": RESPONSES_RESPONSE}, "auto")
    assert (h["trace_id"], h["completion"], h["messages"]) == (HELICONE["request_id"], "5", t["messages"])
    refused = {
        "a function call": ({"output": [{"type": "function_call", "call_id": "c", "name": "add", "arguments": "{}"}]},
                            "no_text_answer", "the answer is a tool call"),
        "filtered": ({"status": "incomplete", "incomplete_details": {"reason": "content_filter"}}, "no_text_answer",
                     "stopped by the content filter"),
        "a refusal": ({"output": [{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}]},
                      "no_text_answer", "the answer is a refusal"),
        "failed": ({"status": "failed", "error": {"code": "server_error", "message": "boom"}}, "failed_request", "boom"),
    }
    for name, (change, reason, says) in refused.items():
        with pytest.raises(FormatError, match=says) as e:
            normalize({**doc, "response": {**RESPONSES_RESPONSE, **change}}, "auto")
        assert e.value.reason == reason, name
    for change, reason, says in [
        ({"previous_response_id": "resp_0"}, "invalid_field", "continues a conversation the Responses API kept"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]}, "non_text_content",
         "request.input[0] holds a part of type input_image"),
        ({"input": [{"role": "user", "content": "q"}, {"type": "function_call_output", "call_id": "c", "output": "5"}]},
         "tool_call_in_prompt", "request.input[1] holds an item of type function_call_output"),
        # An item or a part that is no object was left out: the prompt read was another than the one served.
        ({"input": ["stray", {"role": "user", "content": "q"}]}, "invalid_field", "request.input[0]=stray is not an item"),
        ({"input": [{"role": "user", "content": ["plain", {"type": "input_text", "text": "q"}]}]}, "invalid_field",
         "is neither text nor a list of parts"),
    ]:
        with pytest.raises(FormatError, match=re.escape(says)) as e:
            normalize({**doc, "request": {**RESPONSES_REQUEST, **change}}, "auto")
        assert e.value.reason == reason


# A call of Gemini's generateContent: its request and its answer as the REST API writes them (camelCase).
GEMINI_REQUEST = {"systemInstruction": {"parts": [{"text": "Be brief."}]},
                  "contents": [{"role": "user", "parts": [{"text": "What is 2 plus 3?"}]}],
                  "generationConfig": {"maxOutputTokens": 512, "thinkingConfig": {"includeThoughts": True}}}
GEMINI_RESPONSE = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "Add them.", "thought": True}, {"text": "5"}]},
                    "finishReason": "STOP", "avgLogprobs": -0.2}],
    "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 1, "thoughtsTokenCount": 30, "totalTokenCount": 41},
    "modelVersion": "gemini-2.5-flash", "responseId": "y0S_aMGPArCYqsMPntGNyA4", "createTime": "2026-11-22T10:15:02.034753Z"}
# A row of Vertex AI's request-response logging table (BigQuery), as a query gives it: its JSON columns as objects.
VERTEX = {"endpoint": None, "deployed_model_id": None, "logging_time": "2026-11-22T10:15:03.284Z",
          "request_id": "5374205265901353984", "request_payload": [], "response_payload": [],
          "model": "publishers/google/models/gemini-2.5-flash", "model_version": "default", "api_method": "GenerateContent",
          "full_request": {**GEMINI_REQUEST, "model": "projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash"},
          "full_response": GEMINI_RESPONSE, "metadata": {"request_latency": 1250.0}, "otel_log": None}


def test_a_batch_of_the_responses_api_is_read_as_its_calls_are():
    """The Batch API takes /v1/responses as well: its output's body is the Response, read as a logged
    Responses API call is."""
    request = {**BATCH_REQUEST, "url": "/v1/responses", "body": RESPONSES_REQUEST}
    output = {**BATCH_OUTPUT, "response": {**BATCH_OUTPUT["response"], "body": RESPONSES_RESPONSE}}
    (logged,) = normalize({"request": RESPONSES_REQUEST, "response": RESPONSES_RESPONSE}, "auto")
    assert _batch(request, output) == [logged] and logged["completion"] == "5"


def _gemini_chunks(texts, finish="STOP"):
    """A streamed answer's chunks: a text each, the finish reason and counts on the last."""
    chunks = [{"candidates": [{"content": {"role": "model", "parts": [{"text": t}]}}], "modelVersion": "gemini-2.5-flash",
               "responseId": "r1", "usageMetadata": {"promptTokenCount": 10}} for t in texts]
    chunks[-1]["candidates"][0]["finishReason"] = finish
    chunks[-1]["usageMetadata"] = {"promptTokenCount": 10, "candidatesTokenCount": 4, "totalTokenCount": 14}
    return chunks


def test_a_gemini_call_is_read_as_a_chat_completion_in_helicone_and_vertex_ai_logs():
    gemini = {**HELICONE, "provider": "GOOGLE", "request_body": GEMINI_REQUEST, "response_body": GEMINI_RESPONSE,
              "target_url": "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"}
    (t,) = normalize(gemini, "auto")
    assert t["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 plus 3?"}]
    assert (t["trace_id"], t["completion"], t["model"]["name"]) == (HELICONE["request_id"], "5", "gemini-2.5-flash")
    assert t["usage"] == {"prompt_tokens": 10, "completion_tokens": 31, "total_tokens": 41}  # its thoughts are answer tokens
    assert detect(VERTEX) == "vertex"
    (v,) = normalize(VERTEX, "auto")
    own = ("trace_id", "start_time", "end_time", "latency_ms", "feedback", "scores")  # Helicone's, or the row's
    assert {k: v[k] for k in v if k not in own} == {k: t[k] for k in t if k not in own}
    # Its logging time is when the call had answered: it started its latency before.
    assert (v["trace_id"], v["start_time"], v["end_time"], v["latency_ms"]) == \
        ("5374205265901353984", "2026-11-22T10:15:02.034000+00:00", "2026-11-22T10:15:03.284000+00:00", 1250.0)
    # As BigQuery's export to newline-delimited JSON writes the row: JSON columns and numbers as text, times with " UTC".
    exported = {**VERTEX, **{k: json.dumps(VERTEX[k]) for k in ("full_request", "full_response", "metadata")},
                "logging_time": "2026-11-22 10:15:03.284 UTC"}
    assert normalize(exported, "auto") == [v]
    for rid in (5374205265901353984, Decimal("5374205265901353984.000000000")):  # as JSON or Parquet hold it
        assert normalize({**VERTEX, "request_id": rid}, "vertex") == [v]
    (n,) = normalize({**VERTEX, "metadata": None}, "vertex")  # no latency: from its answer's createTime
    assert (n["start_time"], n["latency_ms"]) == ("2026-11-22T10:15:02.034753+00:00", 1249.247)
    # A stream, as its chunks (and as Helicone keeps it: its own merge, with the first chunk's finish reason, beside them).
    chunks = _gemini_chunks(["The answer", " is ", "5."])
    (s,) = normalize({**VERTEX, "full_response": chunks}, "vertex")
    assert (s["completion"], s["usage"]["completion_tokens"]) == ("The answer is 5.", 4)
    merged = {**chunks[0], "candidates": [{**chunks[0]["candidates"][0], "finishReason": "STOP"}], "streamed_data":
              _gemini_chunks(["The answer", " is ", "5."], "SAFETY")}
    with pytest.raises(FormatError, match="finish reason 'SAFETY'"):
        normalize({**gemini, "response_body": merged}, "auto")
    (h,) = normalize({**gemini, "response_body": chunks}, "auto")  # unmerged, as Helicone keeps a stream sent without SSE
    assert h["completion"] == "The answer is 5."
    two = {**GEMINI_RESPONSE, "candidates": [{**GEMINI_RESPONSE["candidates"][0], "index": 1},
                                             {"index": 0, "content": {"role": "model", "parts": [{"text": "five"}]}}]}
    assert [(t["trace_id"][-2:], t["completion"]) for t in normalize({**VERTEX, "full_response": two}, "vertex")] == \
        [(":0", "five"), (":1", "5")]
    drawn = {"index": 0, "content": {"role": "model", "parts": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}]}}
    refused, kept = normalize({**VERTEX, "full_response": {**two, "candidates": [drawn, two["candidates"][0]]}}, "vertex")
    assert (refused.reason, kept["completion"]) == ("non_text_content", "5")  # the candidate alone, in its place
    assert "candidate 0 holds a part of type inlineData" in str(refused)
    # An earlier answer of the model's is the assistant's turn; a turn that names no role is the user's.
    turns = [{"role": "user", "parts": [{"text": "Hi"}]}, {"role": "model", "parts": [{"text": "Hello."}]},
             {"parts": [{"text": "What is 2 plus 3?"}]}]
    (c,) = normalize({**VERTEX, "full_request": {**GEMINI_REQUEST, "contents": turns}}, "vertex")
    assert [m["role"] for m in c["messages"]] == ["system", "user", "assistant", "user"]


@pytest.mark.parametrize("request_change, response_change, reason, says", [
    (None, {"candidates": None, "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}}, "no_text_answer",
     "Gemini blocked the prompt (PROHIBITED_CONTENT)"),
    (None, {"candidates": [{**GEMINI_RESPONSE["candidates"][0], "finishReason": "RECITATION"}]}, "no_text_answer",
     "by a safety check (finish reason 'RECITATION')"),
    (None, {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "add", "args": {}}}]},
                            "finishReason": "STOP"}]}, "no_text_answer", "the answer is a tool call"),
    ({"contents": [{"role": "user", "parts": [{"text": "What is this?"}, {"inlineData": {"mimeType": "image/png", "data": "AA=="}}]}]},
     None, "non_text_content", "full_request.contents[0] holds a part of type inlineData"),
    ({"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "add", "response": {"sum": 5}}}]}]},
     None, "tool_call_in_prompt", "full_request.contents[0] holds a part of type functionResponse"),
    ({"systemInstruction": {"parts": [{"fileData": {"fileUri": "gs://b/f.pdf"}}]}}, None, "non_text_content",
     "full_request.systemInstruction holds a part of type fileData"),
], ids=["blocked", "recitation", "function call", "image", "function response", "file"])
def test_a_gemini_call_that_cannot_be_a_trace_says_why(request_change, response_change, reason, says):
    row = {**VERTEX, "full_request": {**GEMINI_REQUEST, **(request_change or {})},
           "full_response": {**GEMINI_RESPONSE, **(response_change or {})}}
    with pytest.raises(FormatError, match=re.escape(says)) as e:
        normalize(row, "auto")
    assert e.value.reason == reason


def test_a_vertex_ai_row_that_cannot_be_a_trace_says_why():
    for change, reason, says in [
        ({"full_response": {"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}}},
         "failed_request", "Vertex AI request 5374205265901353984 failed: Resource exhausted"),
        ({"full_response": None}, "no_content", "full_response=None"),
        ({"full_request": "{not json"}, "no_content", "full_request='{not json'"),
        ({"request_id": None, "full_response": {**GEMINI_RESPONSE, "responseId": None}}, "invalid_field", "request_id=None"),
        ({"logging_time": "today"}, "invalid_field", "logging_time='today' is not an ISO 8601 time"),
        ({"api_method": "Predict", "full_request": {"instances": [{"x": 1}]}, "full_response": {"predictions": [1]}},
         "invalid_field", "Predict of publishers/google/models/gemini-2.5-flash is not a chat completion"),
    ]:
        with pytest.raises(FormatError, match=re.escape(says)) as e:
            normalize({**VERTEX, **change}, "auto")
        assert e.value.reason == reason
    # Claude on Vertex AI (rawPredict): Anthropic's messages API, streamed (streamRawPredict) as its events.
    claude = {**VERTEX, "model": "publishers/anthropic/models/claude-sonnet-4-5", "api_method": "RawPredict",
              "full_request": {"anthropic_version": "vertex-2023-10-16", "max_tokens": 64, "system": "Be brief.",
                               "messages": [{"role": "user", "content": "What is 2 plus 3?"}]},
              "full_response": ANTHROPIC_EVENTS}
    (t,) = normalize(claude, "auto")
    assert (t["completion"], t["model"]["name"], t["usage"]) == \
        ("The answer is 5.", "claude-sonnet-4-5-20250929", {"prompt_tokens": 15, "completion_tokens": 7, "total_tokens": 22})
    assert t["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 plus 3?"}]


# A streamed answer of Anthropic's messages API, its events as Bedrock and Vertex AI log them.
ANTHROPIC_EVENTS = [
    {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
                                          "model": "claude-sonnet-4-5-20250929", "usage": {"input_tokens": 15, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "2 and 3"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "The answer"}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": " is 5."}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 7}},
    {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 15, "outputTokenCount": 7,
                                                                  "invocationLatency": 848, "firstByteLatency": 309}}]

# A record of Amazon Bedrock's model invocation logging (gzipped JSON Lines under AWSLogs/.../BedrockModelInvocationLogs/
# <region>/YYYY/MM/DD/HH/), of a call of its Converse API.
BEDROCK = {
    "schemaType": "ModelInvocationLog", "schemaVersion": "1.0", "timestamp": "2026-11-22T10:15:02Z",
    "accountId": "123456789012", "identity": {"arn": "arn:aws:iam::123456789012:user/u"}, "region": "us-east-1",
    "requestId": "9b6c3dc7-5ace-4a53-94f4-8dd7e551f41a", "operation": "Converse",
    "modelId": "anthropic.claude-3-5-sonnet-20240620-v1:0",
    "input": {"inputContentType": "application/json", "inputTokenCount": 16, "inputBodyJson": {
        "system": [{"text": "Be brief."}], "messages": [{"role": "user", "content": [{"text": "What is 2 plus 3?"}]}],
        "inferenceConfig": {"maxTokens": 512}, "additionalModelRequestFields": {"top_k": 250}}},
    "output": {"outputContentType": "application/json", "outputTokenCount": 2, "outputBodyJson": {
        "output": {"message": {"role": "assistant", "content": [{"text": "5"}]}}, "stopReason": "end_turn",
        "metrics": {"latencyMs": 1250}, "usage": {"inputTokens": 16, "outputTokens": 2, "totalTokens": 18}}}}


def _bedrock(operation="Converse", request=None, response=None, **fields):
    """BEDROCK, of another operation, bodies or fields."""
    doc = {**BEDROCK, "operation": operation, **fields}
    if request is not None:
        doc["input"] = {**BEDROCK["input"], "inputBodyJson": request}
    if response is not None:
        doc["output"] = {**BEDROCK["output"], "outputBodyJson": response}
    return doc


def test_an_answer_that_continues_the_assistants_last_turn_is_that_whole_turn():
    """A prefill (the assistant's turn a prompt ends in, which the answer continues: Anthropic's API
    always, vLLM's when asked, Mistral's and DeepSeek's for a turn marked ``prefix``, a Claude or Nova
    model through any API or gateway) is taken out of the prompt and put before the answer, once:
    left as a turn of its own, TRL's preference layout renders prompt + chosen as two turns. OpenAI's
    API answers in a turn of its own; an answer that is none stays none."""
    asked = [{"role": "user", "content": "Give 2 plus 3 as JSON."}]
    said = [{"role": "system", "content": "Be brief."}, *asked]
    whole = '{"sum": 5}'

    def read(doc) -> tuple[list, str]:
        (t,) = normalize(doc, "auto")
        return t["messages"], t["completion"]

    def anthropic(prefill, answer=({"type": "text", "text": " 5}"},)):
        return {**HELICONE, "provider": "ANTHROPIC", "request_body": {
            "model": "claude-sonnet-4-5", "max_tokens": 512, "system": "Be brief.",
            "messages": [*asked, {"role": "assistant", "content": prefill}]},
            "response_body": {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                              "content": list(answer), "stop_reason": "end_turn",
                              "usage": {"input_tokens": 15, "output_tokens": 3}}}

    for prefill in ('{"sum":', [{"type": "text", "text": '{"sum":', "cache_control": {"type": "ephemeral"}}]):
        assert read(anthropic(prefill)) == (said, whole)
    with pytest.raises(FormatError) as e:
        normalize(anthropic("Let me add.", [{"type": "tool_use", "id": "t1", "name": "add", "input": {}}]), "auto")
    assert e.value.reason == "no_text_answer"
    for answer in ([], [{"type": "text", "text": " "}]):  # no answer: not the prefill alone
        assert read(anthropic('{"sum":', answer))[1].strip() == ""

    converse = _bedrock(request={**BEDROCK["input"]["inputBodyJson"], "messages": [
        {"role": "user", "content": [{"text": "Give 2 plus 3 as JSON."}]}, {"role": "assistant", "content": [{"text": '{"sum":'}]}]},
        response={**BEDROCK["output"]["outputBodyJson"], "output": {"message": {"role": "assistant", "content": [{"text": " 5}"}]}}})
    assert read(converse) == (said, whole)
    llama = _bedrock(modelId="meta.llama3-70b-instruct-v1:0", request=converse["input"]["inputBodyJson"],
                     response=converse["output"]["outputBodyJson"])
    assert read(llama)[1] == " 5}"  # Converse's API passes it on: the model's to continue, or not

    def openai(last: dict, answer=" 5}", model="gpt-5", asked=None, messages=said, **request):
        log = copy.deepcopy(OPENAI)
        log["request"].update(messages=[*messages, last], model=asked or model, **request)
        log["response"].update(model=model)
        log["response"]["choices"][0]["message"]["content"] = answer
        return read(log)

    prefill = {"role": "assistant", "content": '{"sum":'}
    assert openai(prefill, continue_final_message=True) == (said, whole)  # vLLM
    assert openai(prefill, whole, continue_final_message=True, echo=True) == (said, whole)  # vLLM, echoing it
    assert openai(prefill, '{"sum":', continue_final_message=True, echo=True) == (said, "")  # nothing said: no answer
    assert openai(prefill, continue_final_message=True, messages=[]) == ([prefill], " 5}")  # no prompt: its validation's
    assert openai({**prefill, "prefix": True}) == (said, whole)  # another's: what follows, told by its start
    assert openai({**prefill, "prefix": True}, whole) == (said, whole)  # ... or the whole turn
    deepseek = {"role": "assistant", "content": "[", "prefix": True}
    assert openai(deepseek, "[1, 0], [0, 1]]", "deepseek-chat") == (said, "[[1, 0], [0, 1]]")  # what follows, always
    assert openai(deepseek, "[[1, 0], [0, 1]]", "mistral-large-latest") == (said, "[[1, 0], [0, 1]]")  # the whole turn
    for model in ("claude-sonnet-4-5", "anthropic/claude-3.5-sonnet:beta", "us.anthropic.claude-sonnet-4-5-v1:0",
                  "bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0", "vertex_ai/claude-3-5-sonnet@20240620",
                  "amazon.nova-pro-v1:0", "amazon/nova-lite-v1"):  # through a gateway: LiteLLM, OpenRouter, ...
        assert openai(prefill, model=model) == (said, whole), model
    for model in ("gpt-5", "Qwen3-8B-Claude-4.5-Opus-Distill", "someone/claude-distill-qwen", "ft:gpt-4o:acme:claude-style:x",
                  "reedmayhew/claude-3.7-sonnet-reasoning-gemma3-12B"):  # OpenAI's API, vLLM without the flag, others'
        assert openai(prefill, model=model) == openai(prefill, model=model, continue_final_message=False) == \
            ([*said, prefill], " 5}"), model
    assert openai(prefill, model="gpt-4o", asked="claude-sonnet-4-5")[1] == " 5}"  # a gateway's fallback answered

    def span(output=" 5}", **values):
        inputs = [{"role": "user", "parts": [{"type": "text", "content": asked[0]["content"]}]},
                  {"role": "assistant", "parts": [{"type": "text", "content": '{"sum":'}]}]
        outputs = [{"role": "assistant", "parts": [{"type": "text", "content": output}]}] if output is not None else []
        attributes = [kv("gen_ai.input.messages", json.dumps(inputs)), kv("gen_ai.output.messages", json.dumps(outputs)),
                      *(kv(k, v) for k, v in values.items())]
        (t,) = normalize(otlp(attributes), "auto")
        return t["messages"], t["completion"]

    for provider in ({"gen_ai.provider.name": "anthropic"}, {"gen_ai.system": "Anthropic"},
                     {"gen_ai.provider.name": "aws.bedrock", "gen_ai.request.model": "anthropic.claude-sonnet-4-5-v1:0"},
                     {"gen_ai.provider.name": "openai", "gen_ai.request.model": "claude-sonnet-4-5"}):
        assert span(**{"gen_ai.request.model": "m", **provider}) == (asked, whole)
        assert span(None, **{"gen_ai.request.model": "m", **provider})[1] == ""  # none recorded: not the prefill alone
    assert span(**{"gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-5"})[1] == " 5}"
    assert span(**{"gen_ai.system": "AWS", "gen_ai.request.model": "nova-pro-v1:0"}) == (asked, whole)  # OpenLLMetry's
    assert span(**{"gen_ai.request.model": "claude-sonnet-4-5", "gen_ai.response.model": "gpt-4o"})[1] == " 5}"

    (t,) = _joined([{"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z",
                     "model": "claude-3-5-sonnet-20241022", "input": [*asked, prefill], "output": {"role": "assistant", "content": " 5}"}}])
    assert (t["messages"], t["completion"]) == (asked, whole)


def test_a_bedrock_invocation_log_gives_its_call_through_any_of_its_apis():
    assert detect(BEDROCK) == "bedrock"
    (t,) = normalize(BEDROCK, "auto")
    assert (t["trace_id"], t["start_time"], t["end_time"], t["latency_ms"]) == \
        (BEDROCK["requestId"], "2026-11-22T10:15:02+00:00", "2026-11-22T10:15:03.250000+00:00", 1250.0)
    assert t["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 plus 3?"}]
    assert (t["completion"], t["model"]["name"]) == ("5", BEDROCK["modelId"])
    assert t["usage"] == {"prompt_tokens": 16, "completion_tokens": 2, "total_tokens": 18}
    same = {k: v for k, v in t.items() if k not in ("latency_ms", "end_time", "model", "usage")}

    def read(doc, completion="5"):
        (found,) = normalize(doc, "auto")
        assert {k: v for k, v in found.items() if k in same} == {**same, "completion": completion}
        return found

    # ConverseStream: its answer as one, as Converse's; prompt caching counts the cached input with the rest.
    cached = {**BEDROCK["output"]["outputBodyJson"], "usage": {"inputTokens": 6, "outputTokens": 2, "totalTokens": 1808,
                                                               "cacheReadInputTokens": 1800, "cacheWriteInputTokens": 0}}
    assert read(_bedrock("ConverseStream", response=cached))["usage"] == \
        {"prompt_tokens": 1806, "completion_tokens": 2, "total_tokens": 1808}
    # InvokeModel of Claude: Anthropic's messages API; of Amazon Nova: its own, Converse's shape; of gpt-oss: OpenAI's.
    claude = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 512, "system": "Be brief.",
              "messages": [{"role": "user", "content": [{"type": "text", "text": "What is 2 plus 3?"}]}]}
    answer = {"id": "msg_bdrk_01", "type": "message", "role": "assistant", "model": "claude-3-5-sonnet-20240620",
              "content": [{"type": "text", "text": "5"}], "stop_reason": "end_turn", "usage": {"input_tokens": 16, "output_tokens": 2}}
    found = read(_bedrock("InvokeModel", claude, answer))
    assert (found["latency_ms"], found["model"]["name"]) == (0.0, BEDROCK["modelId"])  # not its answer's dated name
    nova = {"schemaVersion": "messages-v1", "system": [{"text": "Be brief."}],
            "messages": [{"role": "user", "content": [{"text": "What is 2 plus 3?"}]}], "inferenceConfig": {"maxTokens": 512}}
    nova_answer = {"output": {"message": {"role": "assistant", "content": [{"text": "5"}]}}, "stopReason": "end_turn",
                   "usage": {"inputTokens": 16, "outputTokens": 2, "totalTokens": 18}}
    assert read(_bedrock("InvokeModel", nova, nova_answer, modelId="amazon.nova-lite-v1:0"))["model"]["name"] == "amazon.nova-lite-v1:0"
    gpt = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 plus 3?"}],
           "max_completion_tokens": 512}
    read(_bedrock("InvokeModel", gpt, {**OPENAI["response"], "model": "openai.gpt-oss-20b-1:0"}))
    # InvokeModelWithResponseStream: the answer as its stream's chunks, Bedrock's metrics on the last.
    streamed = read(_bedrock("InvokeModelWithResponseStream", claude, ANTHROPIC_EVENTS), "The answer is 5.")
    assert (streamed["latency_ms"], streamed["usage"]["completion_tokens"]) == (848.0, 7)
    chunks = [_chunk(0, {"role": "assistant", "content": "5"}), {**_chunk(0, {}, "stop"),
              "amazon-bedrock-invocationMetrics": {"invocationLatency": 412}}]
    assert read(_bedrock("InvokeModelWithResponseStream", gpt, chunks))["latency_ms"] == 412.0
    # The model named by an inference profile's ARN: its id. Counts only in the log: the log's.
    arn = "arn:aws:bedrock:us-west-2:123456789012:inference-profile/global.anthropic.claude-opus-4-6-v1"
    uncounted = {k: v for k, v in BEDROCK["output"]["outputBodyJson"].items() if k != "usage"}
    found = read(_bedrock(response=uncounted, modelId=arn))
    assert (found["model"]["name"], found["usage"]) == ("global.anthropic.claude-opus-4-6-v1",
                                                        {"prompt_tokens": 16, "completion_tokens": 2, "total_tokens": 18})


@pytest.mark.parametrize("doc, reason, says", [
    (_bedrock(errorCode="ThrottlingException"), "failed_request", "failed: ThrottlingException"),
    ({**BEDROCK, "input": {"inputContentType": "application/json", "inputTokenCount": 30000, "inputBodyS3Path":
      "s3://logs/AWSLogs/123456789012/BedrockModelInvocationLogs/us-east-1/2026/11/22/10/data/9b6c_input.json.gz"}},
     "no_content", "input.inputBodyJson is not in the log: Bedrock kept it apart, at s3://logs/AWSLogs/"),
    ({**BEDROCK, "output": {"outputTokenCount": 2}}, "no_content", "output.outputBodyJson is not in the log: not delivered"),
    (_bedrock("InvokeModel", {"prompt": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>Hi<|eot_id|>"},
              {"generation": "Hello", "prompt_token_count": 9, "generation_token_count": 2, "stop_reason": "stop"},
              modelId="meta.llama3-8b-instruct-v1:0"),
     "invalid_field", "meta.llama3-8b-instruct-v1:0 was sent one text (input.inputBodyJson.prompt), not chat messages"),
    (_bedrock("InvokeModel", {"texts": ["hello"]}, {"embeddings": [[0.1]]}, modelId="cohere.embed-english-v3"),
     "invalid_field", "the bodies of InvokeModel of cohere.embed-english-v3 are of no chat API this reader knows"),
    (_bedrock(response={**BEDROCK["output"]["outputBodyJson"], "stopReason": "guardrail_intervened",
                        "output": {"message": {"role": "assistant", "content": [{"text": "Sorry, I cannot help."}]}}}),
     "no_text_answer", "stopped by the content filter"),
    (_bedrock(response={**BEDROCK["output"]["outputBodyJson"], "stopReason": "tool_use", "output": {"message": {
        "role": "assistant", "content": [{"text": "Let me add."}, {"toolUse": {"toolUseId": "t", "name": "add", "input": {}}}]}}}),
     "no_text_answer", "the answer is a tool call"),
    (_bedrock(request={"messages": [{"role": "user", "content": [{"toolResult": {"toolUseId": "t", "content": [{"text": "5"}]}}]}]}),
     "tool_call_in_prompt", "input.inputBodyJson.messages[0] holds a part of type toolResult"),
    (_bedrock(request={"messages": [{"role": "user", "content": [{"text": "What is this?"}, {"image": {
        "format": "png", "source": {"s3Uri": "s3://logs/data/9b6c_input_media_00.png"}}}]}]}),
     "non_text_content", "input.inputBodyJson.messages[0] holds a part of type image"),
    (_bedrock(timestamp="now"), "invalid_field", "timestamp='now' is not an ISO 8601 time"),
], ids=["error", "body kept apart", "no body", "text prompt", "embeddings", "guardrail", "tool use", "tool result", "image",
        "bad time"])
def test_a_bedrock_record_that_cannot_be_a_trace_says_why(doc, reason, says):
    with pytest.raises(FormatError, match=re.escape(says)) as e:
        normalize(doc, "auto")
    assert e.value.reason == reason


@pytest.mark.parametrize("doc", [BEDROCK, _bedrock("InvokeModelWithResponseStream", {"messages": [
    {"role": "user", "content": "q"}]}, ANTHROPIC_EVENTS[:3] + ANTHROPIC_EVENTS[-2:]), VERTEX,
    {**VERTEX, "full_response": _gemini_chunks(["a", "b"])}], ids=["converse", "stream", "vertex", "vertex stream"])
def test_any_value_anywhere_in_a_cloud_log_gives_traces_or_the_errors_that_say_why(doc):
    from tests.conftest import mutated

    for mutant in mutated(doc):
        try:
            found = normalize(mutant, "auto")
        except FormatError:
            continue
        _validated(found)


def test_the_formats_a_run_may_be_told_are_those_read():
    from typing import get_args

    from ctpipe.config import DatasetConfig
    from ctpipe.formats import Format

    assert get_args(DatasetConfig.model_fields["format"].annotation) == ("auto", *get_args(Format))


def test_what_a_cloud_log_says_of_a_call_beyond_its_text_is_heeded():
    """Guardrails answering in the model's place, reasoning in the answer's text, a prompt kept
    server-side, a stream cut short, text parts in their order: none may put other text in a dataset."""
    claude = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
              "messages": [{"role": "user", "content": [{"type": "text", "text": "What is 2 plus 3?"}]}]}
    canned = {"id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "Sorry."}],
              "stop_reason": "end_turn", "usage": {"input_tokens": 9, "output_tokens": 2},
              "amazon-bedrock-guardrailAction": "INTERVENED"}
    intervened = [ANTHROPIC_EVENTS[0], {**ANTHROPIC_EVENTS[-1], "amazon-bedrock-guardrailAction": "INTERVENED"}]
    for doc in (_bedrock("InvokeModel", claude, canned), _bedrock("InvokeModelWithResponseStream", claude, intervened)):
        with pytest.raises(FormatError, match=re.escape("stopped by the content filter (Bedrock's guardrail)")):
            normalize(doc, "auto")
    gpt = {"messages": [{"role": "user", "content": "What is 2 plus 3?"}]}
    reasoned = {**OPENAI["response"], "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": "<reasoning>The user asks for 2 plus 3.\nIt is 5.</reasoning>5"}}]}
    (t,) = normalize(_bedrock("InvokeModel", gpt, reasoned, modelId="openai.gpt-oss-20b-1:0"), "auto")
    assert t["completion"] == "5"
    cached = {**VERTEX, "full_request": {**GEMINI_REQUEST, "cachedContent": "projects/p/locations/l/cachedContents/123"}}
    with pytest.raises(FormatError, match=re.escape("full_request.cachedContent='projects/p/locations/l/cachedContents/123'")) as e:
        normalize(cached, "auto")
    assert e.value.reason == "invalid_field"
    for cut in ([*ANTHROPIC_EVENTS[:6], {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}],
                [*_gemini_chunks(["The answer", " is"])[:1], {"error": {"code": 500, "message": "Internal error"}}]):
        claude_on_vertex = {"anthropic_version": "vertex-2023-10-16", "messages": [{"role": "user", "content": "q"}]}
        row = {**VERTEX, "full_response": cut, **({"full_request": claude_on_vertex} if "type" in cut[0] else {})}
        with pytest.raises(FormatError, match="(ended in an error): (Overloaded|Internal error)") as e:
            normalize(row, "auto")
        assert e.value.reason == "failed_request"
    # Guarded text in its place among the others; an image to guard is an image.
    blocks = [{"text": "Context:"}, {"guardContent": {"text": {"text": "the doc", "qualifiers": ["grounding_source"]}}},
              {"text": "Question: what is 2 plus 3?"}]
    (t,) = normalize(_bedrock(request={"messages": [{"role": "user", "content": blocks}]}), "auto")
    assert t["messages"] == [{"role": "user", "content": "Context:\nthe doc\nQuestion: what is 2 plus 3?"}]
    image = [{"text": "Describe this"}, {"guardContent": {"image": {"format": "png", "source": {"bytes": "AA=="}}}}]
    with pytest.raises(FormatError, match=re.escape("messages[0] (guardContent) holds a part of type image")):
        normalize(_bedrock(request={"messages": [{"role": "user", "content": image}]}), "auto")
    # Gemini cuts one answer into parts anywhere, as a stream into chunks: joined as they are.
    split = {**GEMINI_RESPONSE, "candidates": [{"content": {"role": "model", "parts": [{"text": "The answer "}, {"text": "is 5."}]},
                                                "finishReason": "STOP"}]}
    (t,) = normalize({**VERTEX, "full_response": split}, "auto")
    assert t["completion"] == "The answer is 5."


def test_calls_a_cloud_log_holds_that_are_no_chat_say_so():
    # A call Gemini failed to make: a tool call, no text; its counts of 0 left out, as Gemini's JSON does.
    failed_call = {"candidates": [{"finishReason": "MALFORMED_FUNCTION_CALL"}],
                   "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3}}
    with pytest.raises(FormatError, match="the answer is a tool call") as e:
        normalize({**VERTEX, "full_response": failed_call}, "auto")
    assert e.value.reason == "no_text_answer"
    (t,) = normalize({**VERTEX, "full_response": {**GEMINI_RESPONSE, "usageMetadata": {"promptTokenCount": 3}}}, "auto")
    assert t["usage"] == {"prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3}
    # Gemini's other endpoints, through Helicone: named, not taken for a blocked prompt.
    tokens = {**HELICONE, "request_body": GEMINI_REQUEST, "response_body": {"totalTokens": 12},
              "target_url": "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:countTokens"}
    with pytest.raises(FormatError, match=re.escape("gemini-2.5-flash:countTokens is not a chat completion")):
        normalize(tokens, "auto")
    # Amazon Nova's stream, as InvokeModelWithResponseStream logs it.
    nova = {"system": [{"text": "Be brief."}], "messages": [{"role": "user", "content": [{"text": "What is 2 plus 3?"}]}]}
    events = [{"messageStart": {"role": "assistant"}},
              {"contentBlockDelta": {"delta": {"text": "The answer"}, "contentBlockIndex": 0}},
              {"contentBlockDelta": {"delta": {"text": " is 5."}, "contentBlockIndex": 0}},
              {"contentBlockStop": {"contentBlockIndex": 0}}, {"messageStop": {"stopReason": "end_turn"}},
              {"metadata": {"usage": {"inputTokens": 9, "outputTokens": 6}, "metrics": {}},
               "amazon-bedrock-invocationMetrics": {"invocationLatency": 300}}]
    (t,) = normalize(_bedrock("InvokeModelWithResponseStream", nova, events, modelId="amazon.nova-lite-v1:0"), "auto")
    assert (t["completion"], t["usage"]["prompt_tokens"], t["latency_ms"]) == ("The answer is 5.", 9, 300.0)
    tool = [{"contentBlockStart": {"start": {"toolUse": {"toolUseId": "t", "name": "add"}}, "contentBlockIndex": 0}},
            {"contentBlockDelta": {"delta": {"toolUse": {"input": "{}"}}, "contentBlockIndex": 0}},
            {"messageStop": {"stopReason": "tool_use"}}]
    with pytest.raises(FormatError, match="the answer is a tool call"):
        normalize(_bedrock("InvokeModelWithResponseStream", nova, tool), "auto")
    with pytest.raises(FormatError, match=re.escape("requestId='' is no id")):
        normalize({**BEDROCK, "requestId": ""}, "auto")


def test_a_bedrock_body_kept_apart_is_read_only_from_bedrocks_own_layout():
    from ctpipe.formats import with_offloaded_bodies

    place = "s3://logs/AWSLogs/1/BedrockModelInvocationLogs/us-east-1/2026/11/22/10/data/9b6c_input.json.gz"
    kept = {**BEDROCK, "input": {"inputTokenCount": 16, "inputBodyS3Path": place}}
    read = {place: json.dumps(BEDROCK["input"]["inputBodyJson"]).encode()}
    assert normalize(with_offloaded_bodies(kept, read.__getitem__), "auto") == normalize(BEDROCK, "auto")
    with pytest.raises(FormatError, match="cannot be read: KeyError") as e:
        with_offloaded_bodies({**kept, "input": {"inputBodyS3Path": place.replace("9b6c", "gone")}}, read.__getitem__)
    assert e.value.reason == "no_content"
    with pytest.raises(FormatError, match="is not in a data folder of Bedrock's log layout: not read"):
        with_offloaded_bodies({**kept, "input": {"inputBodyS3Path": "/etc/passwd"}}, read.__getitem__)
    # The layout's folders under another scheme or host, or climbing out of them: a record is data.
    for other in (place.replace("s3://logs", "/tmp/outside"), place.replace("s3://", "http://127.0.0.1:8766/"),
                  place.replace("/data/", "/data/../../../../../../../../etc/data/")):
        asked = []
        with pytest.raises(FormatError, match="BodyS3Path=") as e:
            with_offloaded_bodies({**kept, "input": {"inputBodyS3Path": other}}, lambda p: asked.append(p) or b"{}")
        assert e.value.reason == "no_content" and not asked, other
    failed = {**kept, "errorCode": "ThrottlingException"}
    assert with_offloaded_bodies(failed, read.__getitem__) is failed  # its failure is what its reader says
    # A source that holds a copy of the logs (another bucket, a local folder; named at any depth): the
    # body is read from the copy, where the run's own credentials reach, before the place named.
    tail = "AWSLogs/1/BedrockModelInvocationLogs/us-east-1/2026/11/22/10/data/9b6c_input.json.gz"
    for source, copy in [("s3://copy/bedrock", f"s3://copy/bedrock/{tail}"),
                         ("/data/logs/AWSLogs/1/BedrockModelInvocationLogs/us-east-1/", f"/data/logs/{tail}"),
                         ("/data/logs/AWSLogs/1/BedrockModelInvocationLogs/us-east-1/2026/11/22/10/f.json.gz",
                          f"/data/logs/{tail}"),
                         ("gs://mirror/BedrockModelInvocationLogs/", f"gs://mirror/{tail[tail.index('Bedrock'):]}")]:
        asked = []
        body = {copy: read[place]}
        found = with_offloaded_bodies(kept, lambda p: asked.append(p) or body[p], source)
        assert (asked, found["input"]["inputBodyJson"]) == ([copy], BEDROCK["input"]["inputBodyJson"]), source
    asked = []
    assert with_offloaded_bodies(kept, lambda p: asked.append(p) or read[p], "s3://copy/bedrock")["input"]["inputBodyJson"]
    assert asked == [f"s3://copy/bedrock/{tail}", place]  # not in the copy: the place named


@pytest.mark.parametrize("latency, reason, said", [
    (float("nan"), "non_finite_number", "metadata.request_latency is nan"),
    ("-Infinity", "non_finite_number", "metadata.request_latency is -inf"),
    (-5, "invalid_field", "metadata.request_latency is -5.0, not a latency"),
    (1e300, "invalid_field", "metadata.request_latency is 1e+300 ms, which puts the call's start before 1970"),
])
def test_a_latency_that_is_none_is_refused_naming_it(latency, reason, said):
    """Not as a time before 1970 of fields the record does not have (created, startTime)."""
    with pytest.raises(FormatError, match=re.escape(said)) as e:
        list(normalize({**VERTEX, "metadata": {"request_latency": latency}}, "vertex"))
    assert e.value.reason == reason


def test_a_langfuse_generation_of_no_trace_is_refused_and_joins_no_score():
    """A null trace id would name the trace "None", and join every other generation and score of none."""
    from ctpipe.formats import langfuse_entry

    for key in ("trace_id", "id"):
        with pytest.raises(FormatError, match=f"observation .*: {'traceId' if key == 'trace_id' else 'id'} is null") as e:
            langfuse_entry({**ENRICHED_OBSERVATION, key: None})
        assert e.value.reason == "invalid_field"
    (t,) = _joined([ENRICHED_OBSERVATION, {**_blob_score("s1", "NUMERIC", 0.5), "trace_id": None, "observation_id": None}])
    assert t["scores"] == []


def test_json_text_nested_past_the_parser_in_a_span_is_too_deeply_nested_as_a_line_is():
    """It was invalid_field, its detail Python's RecursionError."""
    deep = "[" * 100_000 + "]" * 100_000
    for name in ("gen_ai.input.messages", "gen_ai.prompt", "gen_ai.system_instructions"):
        doc = otlp([kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "m"), kv(name, deep),
                    kv("gen_ai.output.messages" if name != "gen_ai.prompt" else "gen_ai.completion", "[]")])
        with pytest.raises(FormatError) as e:
            normalize(doc, "auto")
        assert e.value.reason == "too_deeply_nested", name


@pytest.mark.parametrize("kind", [5, None, ["GENERATION"]])
def test_a_langfuse_observation_whose_type_is_no_name_is_refused_not_passed_over(kind):
    """A span's or an event's observation is no trace and is passed over; one of type 5 was too, uncounted."""
    from ctpipe.formats import langfuse_entry

    row = {"id": "g1", "traceId": "t1", "type": kind, "startTime": "2026-11-22T10:00:00Z", "model": "m"}
    with pytest.raises(FormatError, match=r"observation g1: type=.* is not a name") as e:
        langfuse_entry(row)
    assert e.value.reason == "invalid_field"
    assert langfuse_entry({**row, "type": "SPAN"}) is None


def test_a_langfuse_categorical_score_keeps_its_categorys_number_where_a_config_maps_it():
    """Langfuse sets a categorical score's value to its category's number when a score config is linked,
    0 when none is: a categorical judge gave no signal at all."""
    from ctpipe.formats import langfuse_entry

    row = {"id": "s1", "traceId": "t1", "observationId": "g1", "name": "judge", "value": 1, "stringValue": "pass",
           "dataType": "CATEGORICAL", "source": "EVAL"}
    score = lambda r: pickle.loads(langfuse_entry(r)[3])[1]  # noqa: E731
    assert score({**row, "configId": "cfg1"}) == {"name": "judge", "value": 1.0, "label": "pass", "source": "eval"}
    assert score(row)["value"] is None  # no config: Langfuse's 0 is no number of the category's


def test_a_helicone_boolean_score_and_a_number_of_one_name_are_both_kept():
    """Its suffix taken off, the boolean replaced the number: the judge's 8 was lost to the later 1."""
    (t,) = normalize({**HELICONE, "scores": {"judge": "8", "judge-hcone-bool": "1"}}, "auto")
    assert [(s["name"], s["value"]) for s in t["scores"]] == [("judge", 8.0), ("judge", 1.0)]


@pytest.mark.parametrize("written", ["NaN", "Infinity", "-Infinity"])
def test_a_token_count_of_no_finite_number_in_a_span_is_non_finite_number(written):
    """OTLP JSON writes a double's NaN as a string: it was invalid_field, where a line's NaN is non_finite_number."""
    span = otlp([kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "m"),
                 kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}])),
                 kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "5"}]}])),
                 {"key": "gen_ai.usage.input_tokens", "value": {"doubleValue": written}}])
    with pytest.raises(FormatError) as e:
        normalize(span, "auto")
    assert e.value.reason == "non_finite_number" and "usage.prompt_tokens" in str(e.value)


@pytest.fixture
def refusing_truncated():
    """The readers as a run of truncated_answers=quarantine has them."""
    from ctpipe import formats

    token = formats.REFUSE_TRUNCATED.set(True)
    yield
    formats.REFUSE_TRUNCATED.reset(token)


def _cut_off() -> dict[str, dict]:
    """A call of each API whose answer its token limit cut off, in its own words."""
    openai = copy.deepcopy(OPENAI)
    openai["response"]["choices"][0]["finish_reason"] = "length"
    vertex = copy.deepcopy(VERTEX)
    vertex["full_response"]["candidates"][0]["finishReason"] = "MAX_TOKENS"
    anthropic = {**HELICONE, "provider": "ANTHROPIC", "target_url": "https://api.anthropic.com/v1/messages",
                 "request_body": {"model": "claude-sonnet-4-5", "max_tokens": 2, "system": "Be brief.",
                                  "messages": [{"role": "user", "content": "What is 2 plus 3?"}]},
                 "response_body": {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                                   "content": [{"type": "text", "text": "The sum"}], "stop_reason": "max_tokens",
                                   "usage": {"input_tokens": 15, "output_tokens": 2}}}
    return {"openai": openai, "vertex": vertex, "anthropic": anthropic}


def test_an_answer_cut_off_at_its_token_limit_is_kept_unless_the_run_refuses_it():
    for name, doc in _cut_off().items():
        (t,) = normalize(doc, "auto")
        assert t["completion"], name  # kept, as written: its label judges it


def test_an_answer_cut_off_is_truncated_answer_where_the_run_refuses_it(refusing_truncated):
    for name, doc in _cut_off().items():
        with pytest.raises(FormatError, match="the answer was cut off at its token limit") as refused:
            normalize(doc, "auto")
        assert refused.value.reason == "truncated_answer", name
    (t,) = normalize(OPENAI, "auto")  # a whole answer: read
    assert t["completion"] == "5"


def _with(doc: dict, path: tuple, value) -> dict:
    doc = json.loads(json.dumps(doc))
    *outer, last = path
    inner = doc
    for key in outer:
        inner = inner[key]
    inner[last] = value
    return doc


@pytest.mark.parametrize("doc, path, said", [
    (PORTKEY, ("response_time",), "response_time"), (HELICONE, ("delay_ms",), "delay_ms"),
    (BEDROCK, ("output", "outputBodyJson", "metrics", "latencyMs"), "metrics.latencyMs"),
    (VERTEX, ("metadata", "request_latency"), "metadata.request_latency"),
])
@pytest.mark.parametrize("latency", [{"ms": 3}, [5], True])
def test_a_latency_of_another_type_is_refused_in_every_format(doc, path, said, latency):
    """OpenAI's latency_ms of another type was refused; a gateway's or a cloud's was read as none, and
    the trace published with a latency of 0 or one from its times."""
    with pytest.raises(FormatError, match=re.escape(f"{said}={latency!r} is not a number")) as e:
        normalize(_with(doc, path, latency), "auto")
    assert e.value.reason == "invalid_field"
    with pytest.raises(FormatError, match=re.escape(f"{said} is an integer past what a double holds, not a latency")):
        normalize(_with(doc, path, 10 ** 399), "auto")
    # none given, or a text that is no number (a duration written otherwise): read as none, as before
    for none in (None, "", " ", "1.25s", "N/A"):
        assert normalize(_with(doc, path, none), "auto")


def test_a_cloudwatch_data_message_whose_events_are_no_list_is_refused_not_dropped():
    from ctpipe.formats import log_events

    record = {"messageType": "DATA_MESSAGE", "logGroup": "g", "logStream": "s", "logEvents": "oops"}
    with pytest.raises(FormatError, match=re.escape("logEvents='oops' is not a list")):
        log_events(record)
    assert log_events({**record, "messageType": "CONTROL_MESSAGE"}) == []


@pytest.mark.parametrize("doc, field", [(HELICONE, "request_body"), (HELICONE, "response_body")])
def test_json_text_nested_too_deep_in_a_field_is_too_deeply_nested(doc, field):
    """msgspec raises RecursionError, not DecodeError, past its depth: the record was refused as
    invalid_field, 'does not map: RecursionError ...'. (Python 3.13's json goes deeper than 3.11's: past
    100,000 in both.)"""
    with pytest.raises(FormatError) as e:
        normalize({**doc, field: "[" * 100_000 + "]" * 100_000}, "auto")
    assert e.value.reason == "too_deeply_nested"


@pytest.mark.parametrize("kind", [[], {}, 5], ids=["a list", "an object", "a number"])
def test_a_part_whose_type_is_no_name_is_refused_naming_it(kind):
    """Such a type ended the mapping with Python's own words ("TypeError: unhashable type: 'list'")."""
    part = [{"type": kind, "text": "What is 2+2?", "content": "What is 2+2?"}]
    semconv = otlp([kv("gen_ai.operation.name", "chat"), kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": part}])),
                    kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "finish_reason": "stop",
                                                              "parts": [{"type": "text", "content": "4"}]}]))])
    chat = {**OPENAI, "request": {**OPENAI["request"], "messages": [{"role": "user", "content": part}]}}
    responses = {"request": {**RESPONSES_REQUEST, "input": [{"role": "user", "content": part}]}, "response": RESPONSES_RESPONSE}
    anthropic = {"model": "claude-sonnet-4-5", "max_tokens": 512, "messages": [{"role": "user", "content": part}]}
    answer = {"id": "msg_01", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "4"}],
              "stop_reason": "end_turn", "usage": {"input_tokens": 15, "output_tokens": 30}}
    cases = [(semconv, "gen_ai.input.messages[0]"), (chat, "request.messages[0]"), (responses, "request.input[0]"),
             ({**HELICONE, "provider": "ANTHROPIC", "request_body": anthropic, "response_body": answer}, "request_body.messages[0]"),
             ({**HELICONE, "provider": "ANTHROPIC", "request_body": {**anthropic, "messages": [{"role": "user", "content": "Hi"}],
                                                                    "system": part}, "response_body": answer}, "request_body.system"),
             ({**HELICONE, "provider": "ANTHROPIC", "request_body": {**anthropic, "messages": [{"role": "user", "content": "Hi"}]},
               "response_body": {**answer, "content": part}}, "response msg_01: content")]
    for doc, where in cases:
        with pytest.raises(FormatError, match=re.escape(f"{where}: a part's type is {json.dumps(kind)}, not a name")) as e:
            list(normalize(doc, "auto"))
        assert e.value.reason == "invalid_field"
