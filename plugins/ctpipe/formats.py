"""Trace formats users already have, normalized into ctpipe's trace record (:mod:`ctpipe.traces`).

Each reader turns one decoded JSON document into trace dicts of the canonical shape (the fields
:class:`ctpipe.traces.TraceRecord` validates), plus ``scores``: evaluation results carried by the
source, as ``{"name", "value", "label", "source"}``. A document a reader cannot map raises
:class:`FormatError` naming the field, so the caller quarantines it with that reason.

* ``openai``: chat-completions logs, one object per line: the request (``messages``) and the
  response (``id``, ``created``, ``model``, ``choices``, ``usage``), either side by side under
  ``request``/``response`` or flat in one object (LiteLLM's logs, the rows of its spend logs and
  Portkey's export are such logs, with times of their own); a call of the Responses API is read as
  one (``input``, ``output`` items). Each choice becomes one trace; one that is no
  text answer (a tool call, with text or without; a refusal without text; an answer the content filter stopped) is
  refused as ``no_text_answer``. A batch's files (OpenAI's Batch API, vLLM's ``run_batch``): the
  lines of its output (or errors) join those of its input by ``custom_id`` (:class:`Held`,
  :func:`join`, :func:`_batch_traces`), the request not being repeated in the output.
* ``otel``: OTLP JSON (``resourceSpans`` → ``scopeSpans`` → ``spans``), one export per line as the
  OpenTelemetry file exporter writes it. A span is a generation when it carries GenAI content:
  the current ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (messages of ``parts``; the
  system prompt, which ``gen_ai.system_instructions`` keeps apart as JSON parts, first), or
  the older ``gen_ai.prompt`` / ``gen_ai.completion`` (JSON, on the span or, as semconv v1.26
  and v1.27 put them, on its ``gen_ai.content.prompt`` / ``.completion`` events; or flattened as
  OpenLLMetry writes them: ``gen_ai.prompt.<i>.role``/``.content``, the indices present, a content
  of typed parts as JSON text; ``gen_ai.completion.<i>.*`` per choice). Each output message
  (current names), message of the older JSON ``gen_ai.completion`` or flattened completion is a
  choice, and each choice a trace, ids as OpenAI's get them; one that is no text answer (a tool
  call, a refusal, an answer the content filter stopped) is ``no_text_answer``.
  Only model calls are read (``gen_ai.operation.name`` ``chat``, ``text_completion``,
  ``generate_content``, or none, unless OpenLLMetry's older ``llm.request.type`` says
  ``embedding`` or ``rerank``); agents', tools' and embeddings' spans are skipped as other spans
  are. ``gen_ai.evaluation.result`` events become scores. A span named a model call that holds no
  content joins the log records of its content (``resourceLogs``: a record per message and per
  choice, semconv v1.28 to v1.36, or one of the call's attributes from v1.37, and evaluation
  results), read across files as Langfuse rows are (:class:`Held`, :func:`join`); with none, it is
  ``no_content``, so that a source of them does not give nothing without a word. A span that holds
  its content joins its records too when asked to (``hold_spans``, for a source of evaluation
  results as log records), taking only those results.
* ``langfuse``: Langfuse exports (JSONL or Parquet rows): observations (``GENERATION`` ones become
  traces), scores (numeric, boolean, categorical; source API, EVAL or ANNOTATION) and traces
  (their ``release``/``version`` name the model version). Scores and traces attach to
  generations by id, across files, so :func:`join` takes an interval's rows at once.
  A time without a zone (text, or a naive Parquet timestamp) is UTC, as Langfuse's exports are.
  The columns may be named in camelCase (the API's) or snake_case (the blob-storage export's).
* ``helicone``: requests as Helicone's request API and its export tool (``@helicone/export``, JSONL
  or a JSON array) give them: the provider's ``request_body`` and ``response_body`` (OpenAI's chat
  completions, or Anthropic's messages), ``request_created_at``, ``delay_ms``; its user feedback
  (the ``helicone-score-feedback`` score, or ``feedback_rating``) as a thumb, its other scores as
  scores; a stream's choices rebuilt from its chunks. Each choice a trace, ids ``request_id``
  (``:<index>`` past one choice). An export made without its bodies holds none (``no_content``); a
  request that failed, is pending or was cancelled is ``failed_request``, a cache hit ``duplicate``.
* ``bedrock``: Amazon Bedrock's model invocation log records (``schemaType`` ``ModelInvocationLog``),
  id ``requestId``, starting at ``timestamp``, lasting the answer's latency; bodies of its Converse API, or the
  model's own for InvokeModel (Anthropic's, Amazon Nova's, OpenAI's; a stream's chunks or events).
  A body Bedrock kept apart (over 100 KB) is read by the caller (:func:`with_offloaded_bodies`).
* ``vertex``: rows of Vertex AI's request-response logging table (``full_request``,
  ``full_response``: Gemini's ``generateContent``, or Anthropic's messages API for Claude), id
  ``request_id``, ending at ``logging_time`` after ``metadata.request_latency``.
* ``ctpipe``: our own schema, unchanged.

The bodies of a provider's API are read in OpenAI's chat completion shape (:func:`_provider_bodies`),
whichever log holds them.

A message of typed parts is the text of its text parts, joined on a new line as vLLM joins them
for a chat template. One holding an image, audio or a file (:data:`MEDIA_PARTS`) is
``non_text_content``: in a prompt, its record is refused (the question without its image is
another one); in an answer, its choice.
A prompt holding the model's tool calls (:func:`tool_calls_in`, :data:`TOOL_PARTS`) is
``tool_call_in_prompt``: the messages are text, and the chat without its calls is another one.

:func:`detect` tells the format of a document from its keys; a document that matches none is
reported, never guessed at.
"""

from __future__ import annotations

import json
import math
import pickle
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Literal

import msgspec

Format = Literal["ctpipe", "openai", "otel", "langfuse", "helicone", "bedrock", "vertex"]


class FormatError(ValueError):
    """A document that does not map onto a trace: ``reason`` is machine-readable, the message names the
    field; ``record``, where one record of a document (an OTLP span, a choice) is what does not map."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.record: Any = None  # set by the reader that yields it in a record's place

    def __reduce__(self):  # to and from worker processes (the default would call cls(message))
        return type(self), (self.reason, str(self))


# What a cut leaves of a word, then of a number (digits in groups): a part of an address or of a
# phone or card number, which the scrubbing of the quarantine's details sees whole or not at all.
_CUT_WORD = re.compile(r"[^\s'\",;]*\Z")
_CUT_DIGITS = re.compile(r"[\d\s().+/-]*\Z")


def _excerpt(value: Any, n: int = 80) -> str:
    """The first ``n`` characters of ``value`` as text, for an error that quotes it, cut back to where
    a word and a number end (and marked cut)."""
    text = str(value)
    return text if len(text) <= n else _CUT_DIGITS.sub("", _CUT_WORD.sub("", text[:n])) + "…"


class _mapping:
    """Where a reader maps one document: a value of a type or range it did not expect, anywhere in
    user data, makes that document a FormatError (quarantined with its raw text), never a failed run.
    A class, not a generator: it is entered for every row, and contextlib's machinery cost a Langfuse
    export a tenth of its reading."""

    _UNEXPECTED = (TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError, RecursionError)

    def __init__(self, what: str):
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, traceback) -> bool:
        if kind is not None and issubclass(kind, self._UNEXPECTED) and not issubclass(kind, FormatError):
            raise FormatError("invalid_field", f"{self.what} does not map: {kind.__name__}: {error}") from None
        return False


_CTPIPE_KEYS = frozenset({"trace_id", "start_time", "end_time", "model", "messages", "completion", "usage", "latency_ms"})


def detect(doc: Any) -> Format | None:
    """The format of one decoded document, or None when it matches none.

    >>> detect({"resourceSpans": []}), detect({"request": {"messages": []}, "response": {"choices": []}})
    ('otel', 'openai')
    >>> detect({"trace_id": "t", "completion": "4", "messages": []}), detect({"hello": 1})
    ('ctpipe', None)
    >>> detect({"start_time": "...", "end_time": "...", "model": {}, "messages": [], "usage": {}})  # ours, fields missing
    'ctpipe'
    """
    if not isinstance(doc, dict):
        return None
    if "resourceSpans" in doc or "resourceLogs" in doc:
        return "otel"
    request, response = doc.get("request"), doc.get("response")  # side by side, or flat in one object
    if "choices" in (response if isinstance(response, dict) else doc) and \
            "messages" in (request if isinstance(request, dict) else doc):
        return "openai"
    if isinstance(request, dict) and "messages" in request and _streamed_response(response):
        return "openai"  # a response logged as its stream
    if _batch_kind(doc) or _failed_call(doc) or _portkey(doc) or _litellm(doc) or _spend_log(doc):
        return "openai"
    if isinstance(request, dict) and "input" in request and isinstance(response, dict) and response.get("object") == "response":
        return "openai"  # a call of the Responses API
    if "request_id" in doc and "request_created_at" in doc and ("request_body" in doc or "response_body" in doc):
        return "helicone"
    if doc.get("schemaType") == "ModelInvocationLog":
        return "bedrock"
    if "full_request" in doc and ("full_response" in doc or "logging_time" in doc):
        return "vertex"
    if "trace_id" in doc and "completion" in doc:
        return "ctpipe"
    if langfuse_kind(doc) is not None:
        return "langfuse"
    if len(_CTPIPE_KEYS & doc.keys()) >= len(_CTPIPE_KEYS) // 2:
        return "ctpipe"  # ours with fields missing: validation names them, which "unknown format" would not
    return None


def chat_completion_url(url: Any) -> bool:
    """Whether a batch's request goes to the chat completions endpoint (``/v1/chat/completions``)."""
    return isinstance(url, str) and url.rstrip("/").endswith("/chat/completions")


def _answering_url(url: Any) -> bool:
    """Whether a batch's request asks for a model's answer: of the chat completions endpoint, or of the
    Responses API's (``/v1/responses``), which the Batch API takes as well."""
    return chat_completion_url(url) or isinstance(url, str) and url.rstrip("/").endswith("/responses")


def _batch_kind(doc: dict) -> Literal["request", "response"] | None:
    """Which line of a batch's files ``doc`` is, as OpenAI's Batch API and vLLM's ``run_batch`` write
    them: of its input ("request": ``custom_id``, ``url``, ``body``), of its output or error file
    ("response": ``custom_id``, a ``response`` with its ``status_code``, or none and an ``error``)."""
    if "custom_id" not in doc:
        return None
    if "body" in doc and "url" in doc:
        return "request"
    response = doc.get("response")
    if isinstance(response, dict) and "status_code" in response or response is None and doc.get("error"):
        return "response"
    return None


# What LiteLLM logs in the place of a call's messages and answer when told not to log them.
_LITELLM_REDACTED = "redacted-by-litellm"


def _redacted(doc: dict) -> bool:
    """Whether ``doc`` is LiteLLM's log of a call it was told not to log. Only its own flat layout,
    which the fast path never takes."""
    messages = doc.get("messages")
    return "request" not in doc and isinstance(messages, list) and any(
        isinstance(m, dict) and m.get("content") == _LITELLM_REDACTED for m in messages)


# LiteLLM's types of calls of APIs other than chat completions that give an answer to train on
# (Anthropic's messages API, the Responses API); its logs of chat completions are OpenAI's shape.
_LITELLM_CALLS = ("anthropic_messages", "responses", "aresponses")


def _litellm(doc: dict) -> bool:
    """Whether ``doc`` is LiteLLM's log (its ``StandardLoggingPayload``) of a call of an API other than
    chat completions (:data:`_LITELLM_CALLS`): the request's ``messages`` beside the response."""
    return doc.get("call_type") in _LITELLM_CALLS and "messages" in doc and "response" in doc


def _litellm_request(doc: dict, response: dict | list) -> dict:
    """The request of LiteLLM's log of a call of another API, as that API's: its messages, and the
    parameters LiteLLM keeps apart (``model_parameters``: the Responses API's ``instructions`` and
    ``previous_response_id``; not Anthropic's ``system``, which LiteLLM leaves out of its logs as
    prompt content, so that a call whose system prompt is not there is ``invalid_field``: the
    prompt served cannot be told)."""
    params = doc.get("model_parameters") if isinstance(doc.get("model_parameters"), dict) else {}
    if isinstance(response, dict) and response.get("object") == "response":  # the input, which LiteLLM logs as its messages
        return {**params, "input": doc.get("messages")}
    request = {**params, "messages": doc.get("messages")}
    messages = request["messages"] if isinstance(request["messages"], list) else []
    anthropic = "content" in response if isinstance(response, dict) else \
        any(c.get("type") == "message_start" for c in response)  # or its stream's events
    if anthropic and not request.get("system") and not any(
            isinstance(m, dict) and m.get("role") == "system" for m in messages):
        raise FormatError("invalid_field", f"call {doc.get('id')}: LiteLLM's log of an Anthropic messages call holds "
                                           "no system prompt (LiteLLM leaves `system` out of its logs): the prompt "
                                           "served cannot be told")
    return request


def _spend_log(doc: dict) -> bool:
    """Whether ``doc`` is a row of LiteLLM's spend logs (its proxy's ``LiteLLM_SpendLogs`` table, as a
    database export writes it): the request body under ``proxy_server_request`` and the answer under
    ``response``, each JSON text, where the proxy keeps them (``store_prompts_in_spend_logs``)."""
    return "request_id" in doc and "proxy_server_request" in doc and "call_type" in doc and "startTime" in doc


# What LiteLLM's spend logs put in the middle of a text longer than they keep
# (MAX_STRING_LENGTH_PROMPT_IN_DB characters), where the rest of it was.
_LITELLM_CUT = "(litellm_truncated skipped "


def _spend_log_call(doc: dict) -> dict:
    """A row of LiteLLM's spend logs as the side-by-side log :func:`from_openai` reads, its bodies in
    OpenAI's chat completion shape (see :func:`_provider_bodies`) and its times LiteLLM's. FormatError
    for a call that failed, a cache hit (``duplicate``), a row kept without its bodies
    (``no_content``), or one whose texts LiteLLM cut short to keep them (``invalid_field``: what was
    served cannot be told)."""
    where = f"LiteLLM spend log {doc.get('request_id')}"
    meta = _stored_json(doc.get("metadata"))
    meta = meta if isinstance(meta, dict) else {}
    if "failure" in (doc.get("status"), meta.get("status")):  # older LiteLLM keeps it in the metadata alone
        error = meta.get("error_information")
        message = error.get("error_message") if isinstance(error, dict) else None
        raise FormatError("failed_request", f"{where}: the call failed" + (f": {str(message)[:300]}" if message else ""))
    if str(doc.get("cache_hit")).lower() == "true":  # kept as text: "True"
        raise FormatError("duplicate", f"{where} is a cache hit: LiteLLM answered with the stored answer of "
                                       "another call")
    request, response = (_stored_json(doc.get(k)) for k in ("proxy_server_request", "response"))
    if not (request and isinstance(request, dict) and response and isinstance(response, dict)):
        raise FormatError("no_content", f"{where} holds no request or answer: LiteLLM keeps them in its spend logs only "
                                        "with store_prompts_in_spend_logs")
    for name, body in (("proxy_server_request", request), ("response", response)):
        if _LITELLM_CUT in json.dumps(body):
            raise FormatError("invalid_field", f"{where}: LiteLLM cut a text of its {name} short to keep it (its "
                                               "MAX_STRING_LENGTH_PROMPT_IN_DB): what was served cannot be told")
    request, response = _provider_bodies(request, response, where, "proxy_server_request",
                                         f"its call ({doc.get('call_type')}) is not a chat completion")
    return {"request": request, "response": response, "startTime": _epoch(doc.get("startTime"), f"{where}: startTime"),
            "endTime": _epoch(doc.get("endTime") or doc.get("startTime"), f"{where}: endTime")}


def _failed_call(doc: dict) -> bool:
    """Whether ``doc`` is LiteLLM's log of a call that failed (its ``StandardLoggingPayload``: the
    request's ``messages`` beside a ``status`` of failure and the error, and no response)."""
    return doc.get("status") == "failure" and "messages" in doc and "error_str" in doc


def _portkey(doc: dict) -> bool:
    """Whether ``doc`` is a log of Portkey's export (its Logs Export API's JSONL): the request and
    response bodies beside its own fields (provider, status, ``created_at``, ``response_time`` in ms)."""
    return "ai_org" in doc and ("response_status_code" in doc or "is_success" in doc)


def _portkey_log(doc: dict) -> dict:
    """A Portkey log as the side-by-side log :func:`from_openai` reads (its time and latency its own,
    see :func:`_call_times`); FormatError for a request that failed, or a log exported without its bodies."""
    status, bodies = doc.get("response_status_code"), [doc.get(k) for k in ("request", "response")]
    bodies = [b.get("body") if isinstance(b, dict) and isinstance(b.get("body"), (dict, str)) else b for b in bodies]
    bodies = [_stored_json(b) for b in bodies]  # JSON text, as a CSV export or a warehouse keeps a body
    if type(status) is int and not 200 <= status < 300 or doc.get("is_success") == 0:  # 0, or false
        said = f"status {status}" if status is not None else "is_success 0"
        raise FormatError("failed_request", f"Portkey log {doc.get('id')} failed ({said}){_error_said(bodies[1])}")
    if not all(isinstance(b, dict) for b in bodies):
        raise FormatError("no_content", f"Portkey log {doc.get('id')} holds no request or response body (not among "
                                        "the export's requested_data, denied by its export settings, or not logged)")
    return {**doc, "request": bodies[0], "response": bodies[1]}


def langfuse_kind(doc: dict) -> Literal["observation", "score", "trace"] | None:
    """Which Langfuse export row ``doc`` is, from the keys each kind always has.

    >>> langfuse_kind({"id": "o", "traceId": "t", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z"})
    'observation'
    >>> langfuse_kind({"id": "s", "traceId": "t", "name": "correct", "dataType": "BOOLEAN", "source": "EVAL"})
    'score'
    """
    if ("traceId" in doc and "startTime" in doc or "trace_id" in doc and "start_time" in doc) and "type" in doc:
        return "observation"
    if ("traceId" in doc and "dataType" in doc or "trace_id" in doc and "data_type" in doc) and "source" in doc and "name" in doc:
        return "score"
    if "id" in doc and "timestamp" in doc and ("release" in doc or "observations" in doc or "sessionId" in doc
                                               or "session_id" in doc):
        return "trace"
    return None


# Langfuse's blob-storage export (its S3/GCS integration) names the columns in snake_case, where
# its API and the exports of its UI use camelCase, which the readers read.
_CAMEL_CASE = {"trace_id": "traceId", "observation_id": "observationId", "start_time": "startTime",
               "end_time": "endTime", "provided_model_name": "model", "usage_details": "usageDetails",
               "data_type": "dataType", "string_value": "stringValue", "session_id": "sessionId"}


def _camel_case(row: dict) -> dict:
    """A Langfuse row with its snake_case columns under the camelCase names too (a camelCase one wins)."""
    snake = _CAMEL_CASE.keys() & row.keys()
    if not snake:
        return row
    out = dict(row)
    for key in snake:
        out.setdefault(_CAMEL_CASE[key], row[key])
    return out


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _iso_nanos(ns: int, where: str) -> str:
    """An OTLP time (nanoseconds since 1970) cut to the microsecond, all a datetime holds. In whole
    numbers: as float seconds a time of this century is a quarter of a microsecond apart from the
    next, and rounding put a span half a microsecond before the hour in the next hour's interval."""
    try:
        return (_EPOCH + timedelta(microseconds=ns // 1000)).isoformat()
    except OverflowError:
        raise FormatError("invalid_field", f"{where} is {ns} nanoseconds since 1970, not a time") from None


def _iso(epoch_s: float, where: str) -> str:
    try:
        return datetime.fromtimestamp(epoch_s, timezone.utc).isoformat()
    except (OverflowError, ValueError, OSError):  # beyond what a datetime (or the platform's time_t) holds
        raise FormatError("invalid_field", f"{where} is {epoch_s!r} seconds since 1970, not a time") from None


_KINDS = {int: "an integer", float: "a number", str: "text", list: "a list", dict: "an object"}


def _need(obj: dict, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):  # bool is an int to isinstance, never wanted here
        kinds = kind if isinstance(kind, tuple) else (kind,)
        said = "a number" if float in kinds else " or ".join(_KINDS.get(k, k.__name__) for k in kinds)
        raise FormatError("invalid_field", f"{where}{key}={value!r} is not {said}")
    return value


def _object(obj: dict, key: str, where: str) -> dict:
    """An optional object: {} when absent or null (or empty), FormatError when it is anything else."""
    value = obj.get(key) or {}
    if not isinstance(value, dict):
        raise FormatError("invalid_field", f"{where}{key}={value!r} is not an object")
    return value


def _total(prompt_tokens: Any, completion_tokens: Any) -> Any:
    """The total of two token counts a source left to add; 0 when they are not both integers (the
    trace's validation then names whichever is not)."""
    both = isinstance(prompt_tokens, int) and isinstance(completion_tokens, int)
    return prompt_tokens + completion_tokens if both else 0


def _usage(prompt_tokens: Any, completion_tokens: Any, total_tokens: Any, answers: int) -> dict:
    """The token counts of each trace of a call of ``answers`` choices. The call's completion count is
    of all its answers: with several, no trace has its own, so each gets 0, as a call that recorded
    none does, and its prompt's count as its total (a sum of the traces' counts is then the call's
    prompt counted once a choice, never its answers counted again). Counts that are not counts come
    as they are, for the trace's validation to name."""
    given = (prompt_tokens, completion_tokens, total_tokens)
    for name, count in zip(("prompt_tokens", "completion_tokens", "total_tokens"), given):
        _finite(count, f"usage.{name}")  # NaN in an OTLP doubleValue: non_finite_number, as a line's NaN is
    if answers == 1 or not all(type(c) is int and 0 <= c < 2**63 for c in given):
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": total_tokens}
    return {"prompt_tokens": prompt_tokens, "completion_tokens": 0, "total_tokens": prompt_tokens}


# Parts that a text dataset cannot hold: OpenAI's (``image_url``, ``input_audio``, ``file``; its
# Responses API's ``input_image``, ``input_file``), semconv's (``blob``, ``uri``, ``file``),
# Anthropic's (``image``, ``document``), as Langfuse keeps its inputs, pydantic-ai's before its
# instrumentation's version 4 (``image-url``, ``audio-url``, ``video-url``, ``document-url``,
# ``binary``) and Google ADK's (``file_data``).
# A prompt that showed the model one reads as another question without it, so its trace is refused.
MEDIA_PARTS = frozenset({"image_url", "input_audio", "file", "blob", "uri", "image", "document", "input_image",
                         "input_file", "image-url", "audio-url", "video-url", "document-url", "binary", "file_data"})
# Tool calls in a prompt, as semconv's parts (a call, and the result that answers it) and as OpenAI's
# message fields: the dataset's messages are text, and a chat read without its calls (an empty
# assistant turn, then a tool's answer to nothing) is not the one the model was served.
TOOL_PARTS = frozenset({"tool_call", "tool_call_response", "tool-call", "tool-result"})  # and the Vercel AI SDK's
TOOL_FIELDS = ("tool_calls", "function_call")
# LangChain's messages, as Langfuse's callback handler logs them, hold their tool calls apart as well:
# before its v3.3.4, only under additional_kwargs, in OpenAI's shape; calls that did not parse, always
# under invalid_tool_calls.
LANGCHAIN_KWARGS, LANGCHAIN_INVALID = "additional_kwargs", "invalid_tool_calls"
# Other vendors' content parts that are a tool's call or result, by the end of their type: Anthropic's
# blocks (tool_use, tool_result, and its server tools' own, such as web_search_tool_result) and the
# Responses API's items (function_call, function_call_output, web_search_call, ...), as Langfuse and
# the older OTel names keep them in a message's content.
TOOL_TYPE_ENDINGS = ("tool_use", "tool_result", "_call", "_call_output", "_call_response")
# Text parts are joined as vLLM joins them to render a message for a chat template: the model that
# serves the trained checkpoint then sees the prompt it was trained on.
PART_SEPARATOR = "\n"
TEXT_PARTS = frozenset({"text", "input_text", "output_text"})  # the Responses API's too
# A reasoning model's parts, dropped from what it said (its thinking is no answer).
REASONING_PARTS = frozenset({"reasoning", "thinking", "redacted_thinking"})


def _a_part(kind: Any) -> bool:
    """Whether ``kind`` is a content part's type the readers know, not one of a JSON answer's own."""
    return kind in TEXT_PARTS or kind in REASONING_PARTS or kind == "refusal" or kind in MEDIA_PARTS or tool_part(kind)


def _media(kinds: Iterable[Any], where: str, media: Iterable[Any] = MEDIA_PARTS) -> None:
    kinds = list(kinds)
    _typed(kinds, where)
    for kind in kinds:
        if kind in media:
            raise FormatError("non_text_content", f"{where} holds a part of type {kind}, which a text dataset cannot hold")


def tool_part(kind: Any) -> bool:
    """Whether a content part of type ``kind`` is a tool's call or result (:data:`TOOL_PARTS`,
    :data:`TOOL_TYPE_ENDINGS`)."""
    return isinstance(kind, str) and (kind in TOOL_PARTS or kind.endswith(TOOL_TYPE_ENDINGS))


def tool_calls_in(m: dict) -> str | None:
    """The field of a message shaped as OpenAI's that holds the model's tool calls, if one does:
    OpenAI's own (:data:`TOOL_FIELDS`) or LangChain's (:data:`LANGCHAIN_KWARGS`, :data:`LANGCHAIN_INVALID`)."""
    kwargs = m.get(LANGCHAIN_KWARGS)
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    return (next((f for f in TOOL_FIELDS if m.get(f)), None)
            or next((f"{LANGCHAIN_KWARGS}.{f}" for f in TOOL_FIELDS if kwargs.get(f)), None)
            or (LANGCHAIN_INVALID if m.get(LANGCHAIN_INVALID) else None))


def _no_tool_call(found: Any, where: str) -> None:
    """FormatError ``tool_call_in_prompt`` where a prompt's message at ``where`` holds what ``found`` names."""
    if found:
        raise FormatError("tool_call_in_prompt", f"{where} holds {found}, which the dataset's messages (text only) "
                                                 "cannot hold")


def _prompt_message(m: dict, where: str, role: Any = None) -> dict:
    """A prompt's message as OpenAI shapes them (its content a text or typed parts; ``role`` when it
    names none); FormatError ``tool_call_in_prompt`` for one holding tool calls. An assistant's
    earlier refusal (``refusal`` beside a null content) is its text: what the model said then; its
    earlier answer's parts are joined as written, as the answer's were (:func:`turn_joined`)."""
    _no_tool_call(tool_calls_in(m), where)
    if m.get("audio"):  # an assistant's spoken answer, referred to by id
        raise FormatError("non_text_content", f"{where} holds audio, which a text dataset cannot hold")
    refusal, role = m.get("refusal"), _role(m.get("role") or role)
    text = _text(m.get("content"), where, said=True, joined=turn_joined(role)) or (refusal if isinstance(refusal, str) else "")
    return {"role": role, "content": text}


def _join_parts(texts: list[str], prompt: bool, joined: str | None) -> str:
    """A message's text parts as one text: joined by ``joined``, else a prompt's on a new line, as vLLM
    renders them, and an answer's as written, one text however its writer cut it up."""
    return (joined if joined is not None else PART_SEPARATOR if prompt else "").join(texts)


def turn_joined(role: Any) -> str:
    """What a prompt's message's text parts are joined by: a new line, as vLLM renders them, but an
    assistant's earlier answer's, joined as written, the text its own trace's answer has."""
    return "" if role == "assistant" else PART_SEPARATOR


def _chat_message(m: dict, where: str) -> dict:
    """A prompt's message of semconv's typed parts, or shaped as OpenAI's (no ``parts``): sources that
    say they write the first write either."""
    return _prompt_parts(m, where) if m.get("parts") is not None else _prompt_message(m, where)


# Roles by other names, as chat templates know them: OpenAI's legacy ``function`` (a function's
# result, before tools came) is the ``tool`` role that took its place; Gemini's ``model`` and
# Cohere's ``chatbot`` (as OpenLLMetry's and LlamaIndex's messages keep them) are the assistant's.
_ROLES = {"function": "tool", "model": "assistant", "chatbot": "assistant"}


def _role(role: Any) -> Any:
    """A role of OpenAI's messages (see :data:`_ROLES`)."""
    return _ROLES.get(role, role) if isinstance(role, str) else role


def _text(content: Any, where: str, said: bool = False, joined: str | None = None) -> str:
    """Message content as text: a string, or OpenAI's list of typed parts (with ``said``, of an earlier
    turn, its text parts joined on a new line and an assistant's refusal parts, which are what it said
    then; without, an answer's, its text parts as written, one text however its writer cut it up;
    ``joined`` says otherwise);
    FormatError ``non_text_content`` for one holding an image, audio or a file; for one holding a
    tool's call or result (:func:`tool_part`), ``tool_call_in_prompt`` in an earlier turn and
    ``no_text_answer`` in an answer."""
    if content is None:  # an assistant's turn of no text (its refusal, if any, is read beside it)
        return ""
    if isinstance(content, str):
        return content
    given = content
    if isinstance(content, dict):  # a Gemini Content (google-genai's instrumentation), or one part alone (a stream's)
        content = content["parts"] if isinstance(content.get("parts"), list) else [content]
    # Anything else is refused, not read as no text: the chat would be another than the one served.
    if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
        raise FormatError("invalid_field", f"{where}: {_excerpt(given)} is neither text nor a list of parts")
    if content and not any("type" in p for p in content):  # Gemini's parts, keyed by their kind (Vertex AI's)
        parts = [{k: v for k, v in p.items() if v is not None} for p in content]  # google-genai's model_dump
        # Each a part of Gemini's, of its keys alone, its text text: not a JSON answer's objects
        # ([{"text": "Ada", "label": "PERSON"}]), whose texts joined would be another answer.
        if not all(p and p.keys() <= _GEMINI_PART and isinstance(p.get("text", ""), str) for p in parts):
            raise FormatError("invalid_field", f"{where}: {_excerpt(given)} is neither text nor a list of parts")
        text, calls = _gemini_text({"parts": parts}, where, prompt=said, joined=joined)
        if calls:
            raise FormatError("no_text_answer", f"{where}: the answer holds a tool's call")
        return text
    _media((p.get("type") for p in content), where)
    if tool := next((kind for p in content if tool_part(kind := p.get("type"))), None):
        if said:
            _no_tool_call(f"a part of type {tool}", where)
        raise FormatError("no_text_answer", f"{where}: the answer holds a tool's call (a part of type {tool})")
    # A part of a kind not read (retrieved context such as Anthropic's search_result, a kind unknown
    # here) is refused, not passed over: the message without it is another one.
    if other := next((kind for p in content if not (_a_part(kind := p.get("type")))), None):
        raise FormatError("non_text_content", f"{where} holds a part of type {other}, which is not read as text")
    kinds = TEXT_PARTS | {"refusal"} if said else TEXT_PARTS
    # OpenAI's text is a part's "text" (a refusal's "refusal"), semconv's its "content".
    texts = [p.get("refusal") if kind == "refusal" else p.get("text", p.get("content"))
             for p in content if (kind := p.get("type")) in kinds]
    if not all(isinstance(t, str) for t in texts):
        raise FormatError("invalid_field", f"{where}: a part of {_excerpt(content)} holds no text")
    return _join_parts(texts, said, joined)


def _typed(kinds: Iterable[Any], where: str) -> None:
    """FormatError ``invalid_field`` for a part's type that is no name (a list, an object, a number),
    which the readers' sets of kinds cannot hold."""
    if (kind := next((k for k in kinds if not isinstance(k, str | None)), None)) is not None:
        raise FormatError("invalid_field", f"{where}: a part's type is {_excerpt(kind)}, not a name")


def _messages_of(messages: Any, where: str) -> Iterator[tuple[int, dict]]:
    """The messages of a chat, each with its place; FormatError ``invalid_field`` for a chat that is
    not a list, or one of whose items is no message: left out, the chat would be another than the
    one served."""
    if not isinstance(messages, list):
        raise FormatError("invalid_field", f"{where}={_excerpt(messages)} is not a list of messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise FormatError("invalid_field", f"{where}[{i}]={_excerpt(m)} is not a message")
        yield i, m


def _answers_of(outputs: Any, where: str, answer: Callable[[dict, str], str | FormatError]) -> list[tuple[int, str | FormatError]]:
    """Each choice of a list of answer messages (the ``i``-th named ``f"{where} {i}"``), as ``answer``
    reads it; one that is no message is a FormatError in its place, as an answer that is none is."""
    return [(i, answer(m, f"{where} {i}") if isinstance(m, dict)
             else FormatError("invalid_field", f"{where} {i}={_excerpt(m)} is not a message"))
            for i, m in enumerate(outputs if isinstance(outputs, list) else [])]


# Finish reasons of an answer Gemini's checks stopped (safety, recitation, blocklists, personal data).
_GEMINI_STOPPED = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
                             "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION"})
# Finish reasons of an answer that is no whole answer, whatever its text: one a content filter or
# safety check stopped (Gemini's reasons, as Google's instrumentation passes them on, included), one
# refused partway (Anthropic's "refusal", after the text it streamed), and one an error broke off
# (OpenTelemetry's instrumentations give a stream that failed "error", after writing its text so far).
# Anthropic's "pause_turn" is a turn its server tools paused, its text so far; Converse's and Titan's
# filter reasons come raw from OpenLLMetry's Bedrock instrumentation, as Cohere's do from its own.
STOPPED = frozenset({"content_filter", "refusal", "pause_turn", "content_filtered", "CONTENT_FILTERED", "ERROR_TOXIC", "USER_CANCEL",
                     *_GEMINI_STOPPED, *map(str.lower, _GEMINI_STOPPED)})
FAILED = frozenset({"error", "ERROR"})  # Cohere's in capitals
# The finish reasons of an answer that called a tool (OpenAI's, semconv's, Anthropic's stop reason):
# a writer may log the calls apart from the message, or not at all, and its text is no answer.
TOOL_FINISHES = frozenset({"tool_calls", "tool_call", "function_call", "tool_use", "TOOL_CALL"})  # the last Cohere's
NOT_ANSWERS = STOPPED | FAILED | TOOL_FINISHES  # the fast paths leave these to the readers
# Finish reasons of an answer cut off at its token limit (OpenAI's and semconv's "length", Anthropic's
# and Converse's "max_tokens", Gemini's "MAX_TOKENS"): kept, or refused where the run says so
# (DatasetConfig.truncated_answers, set here for the run by the materializer): a classifier's
# one-token answers end so as often as a long answer cut short does.
TRUNCATED = frozenset({"length", "LENGTH", "max_tokens", "MAX_TOKENS", "ERROR_LIMIT", "model_context_window_exceeded"})
REFUSE_TRUNCATED: ContextVar[bool] = ContextVar("refuse_truncated", default=False)


def not_answers() -> frozenset[str]:
    """:data:`NOT_ANSWERS`, and :data:`TRUNCATED` where this run refuses answers cut off."""
    return NOT_ANSWERS | TRUNCATED if REFUSE_TRUNCATED.get() else NOT_ANSWERS


def _text_answer(text: str, where: str, tool_call: bool = False, refusal: bool = False,
                 finish: Any = None, audio: bool = False) -> str | FormatError:
    """``text``, or FormatError ``no_text_answer`` in its place for an answer that is not one to train
    on: a tool call, with text or without (the text beside a call, such as "Let me look that up.",
    is no answer: the answer comes after the tool's), a refusal or audio without text (the datasets
    hold text answers), or any answer the content filter stopped or that was refused partway
    (:data:`STOPPED`: its text, if any, is cut off or a placeholder such as OpenLLMetry's
    "FILTERED"); ``failed_request`` for one an error broke off. A blank answer of none of these is
    left to the trace's validation, which calls it empty. In its place, not raised: the other
    choices of the call are traces all the same."""
    blank = not text or text.isspace()
    finish = finish if isinstance(finish, str) else None  # any other value is the trace's to refuse, or none
    if finish in FAILED:
        return FormatError("failed_request", f"{where}: the answer was broken off by an error (finish reason {finish!r})")
    if finish == "content_filter":
        return FormatError("no_text_answer", f"{where}: the answer was stopped by the content filter")
    if finish in STOPPED:
        return FormatError("no_text_answer", f"{where}: the answer was stopped, refused or by a safety check "
                                             f"(finish reason {finish!r})")
    if tool_call or finish in TOOL_FINISHES:
        beside = "not text" if blank else "its text beside it no answer"
        return FormatError("no_text_answer", f"{where}: the answer is a tool call, {beside}")
    if finish in TRUNCATED and REFUSE_TRUNCATED.get():
        return FormatError("truncated_answer", f"{where}: the answer was cut off at its token limit (finish reason "
                                               f"{finish!r})")
    if blank and (refusal or audio):
        return FormatError("no_text_answer", f"{where}: the answer is {'a refusal' if refusal else 'audio'}, not text")
    return text


def _number(value: Any) -> Any:
    """A number that may come as text, as OpenAI's stored completions keep every metadata value; any
    other value as it is, for the trace's validation to name."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def _answer(message: dict, where: str, finish_reason: Any) -> str | FormatError:
    """The text of an answer message as OpenAI shapes them (``content``, ``tool_calls``, ``refusal``),
    or the FormatError of one that is none, to stand in its place beside the other choices."""
    content = message.get("content")
    refused = isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "refusal" for p in content)
    try:
        return _text_answer(_text(content, f"{where}: content"), where,
                            tool_call=tool_calls_in(message) is not None,
                            refusal=bool(message.get("refusal")) or refused, finish=finish_reason,
                            audio=bool(message.get("audio")))
    except FormatError as e:
        return e


def _parts_answer(m: dict, where: str) -> str | FormatError:
    """The text of an answer message of semconv's typed parts, or the FormatError of one that is none,
    to stand in its place beside the other choices."""
    try:
        parts = _blocks(m.get("parts"), where) or []
        text = _parts_text(parts, where, joined="")  # one answer's parts, as written
        kinds = {p.get("type") for p in parts if isinstance(p, dict)}
        return _text_answer(text, where, tool_call=any(map(tool_part, kinds)), refusal="refusal" in kinds,
                            finish=m.get("finish_reason"))
    except FormatError as e:
        return e


def _message_answer(m: dict, where: str) -> str | FormatError:
    """:func:`_parts_answer` of a message of typed parts, :func:`_answer` of one shaped as OpenAI's."""
    if m.get("parts") is None and any(k in m for k in ("content", "refusal", "audio", *TOOL_FIELDS)):
        return _answer(m, where, m.get("finish_reason"))
    return _parts_answer(m, where)


def _from_responses_api(request: dict, response: dict, where: str) -> tuple[dict, dict]:
    """A call of OpenAI's Responses API (``input`` and ``instructions``; ``output`` items) as the chat
    completion :func:`from_openai` reads: its items as messages, its answer's text a choice. Its
    reasoning is dropped, as a reasoning model's is; its tools' calls and results are tool calls; a
    request continuing an earlier response server-side (``previous_response_id``, ``conversation``)
    is refused, its prompt missing the turns before."""
    for key in ("previous_response_id", "conversation"):  # the response repeats them, where a log keeps no request's
        if found := request.get(key) or response.get(key):
            raise FormatError("invalid_field", f"{where}request.{key}={_excerpt(found)!r}: the prompt continues "
                                               "a conversation the Responses API kept, whose turns the log does not hold")
    if response.get("status") == "failed":
        raise FormatError("failed_request", f"{where}response {response.get('id')} failed: {str(response.get('error'))[:300]}")
    items = request.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else items if isinstance(items, list) else []
    instructions = request.get("instructions") or response.get("instructions")
    if isinstance(instructions, list):  # a stored prompt's (prompt: {id, version}): input items of their own
        items, instructions = [*instructions, *items], None
    system = [{"role": "system", "content": instructions}] if instructions else []
    messages = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):  # left out, the prompt would be another than the one served
            raise FormatError("invalid_field", f"{where}request.input[{i}]={_excerpt(item)} is not an item")
        if item.get("type") == "reasoning":
            continue
        # A tool's call or result, a web search's, ...: tool calls, refused where they are, as images are.
        _no_tool_call(None if "role" in item else f"an item of type {item.get('type')}", f"{where}request.input[{i}]")
        content = _responses_parts(item.get("content"))
        _media((p.get("type") for p in content if isinstance(p, dict)) if isinstance(content, list) else (),
               f"{where}request.input[{i}]")
        messages.append({**item, "content": content})
    output = [i for i in response.get("output") or [] if isinstance(i, dict) and i.get("type") != "reasoning"]
    said = [p for i in output if i.get("type") == "message" for p in _responses_parts(i.get("content")) or []]
    incomplete = response.get("incomplete_details") if isinstance(response.get("incomplete_details"), dict) else {}
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    prompt, answer = usage.get("input_tokens"), usage.get("output_tokens")
    answer_message = {"role": "assistant", "content": said,
                      "tool_calls": [i for i in output if i.get("type") != "message"] or None}
    return {**request, "messages": system + messages}, {
        **response, "object": "chat.completion", "created": response.get("created_at"),
        "choices": [{"index": 0, "message": answer_message,
                     "finish_reason": {"content_filter": "content_filter", "max_output_tokens": "length"}.get(
                         incomplete.get("reason"), "stop")}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": answer, "total_tokens": usage.get("total_tokens",
                                                                                             _total(prompt, answer))}
        if usage else {}}


def _responses_parts(content: Any) -> Any:
    """A Responses API message's content as OpenAI's chat parts: its text parts (``input_text``,
    ``output_text``) text parts; the others as they are (a refusal, an image, a file)."""
    if not isinstance(content, list):
        return content
    return [{**p, "type": "text"} if isinstance(p, dict) and p.get("type") in ("input_text", "output_text") else p
            for p in content]  # a part that is no object is _text's to refuse


def _ms(value: Any, where: str) -> float | None:
    """A latency in milliseconds given as a number, or as text (quoted); None for none, or a text that
    is no number (a duration written otherwise: the caller's fallback, the call's times, says it);
    FormatError, naming ``where``, for a value of another type (an object, a list, a boolean: read
    as none, the trace's latency was published as 0), or a NaN, infinite, negative or huge one."""
    if value is None or isinstance(value, str):
        value = _number(value)
        if not isinstance(value, float):
            return None
    elif not isinstance(value, (int, float)) or isinstance(value, bool):
        raise FormatError("invalid_field", f"{where}={_excerpt(repr(value))} is not a number")
    try:
        value = float(value)
    except OverflowError:
        raise FormatError("invalid_field", f"{where} is an integer past what a double holds, not a latency") from None
    if (value := _finite(value, where)) < 0:
        raise FormatError("invalid_field", f"{where} is {value}, not a latency")
    return value


def _ms_between(start: float, end: float) -> float:
    """Milliseconds from ``start`` to ``end`` (seconds), in whole microseconds as the times are."""
    return round((end - start) * 1e6) / 1000


def _error_said(body: Any) -> str:
    """``: <message>`` of a response body's ``error`` (an object with its message, or a text), as
    providers and gateways write them; "" for none."""
    error = body.get("error") if isinstance(body, dict) else None
    error = error.get("message", error) if isinstance(error, dict) else error
    return f": {str(error)[:300]}" if error else ""


def _call_times(doc: dict, response: dict) -> tuple[float, float]:
    """(start, in seconds since 1970; latency in ms) of a logged call: LiteLLM's ``startTime`` and
    ``endTime``, Portkey's ``created_at`` and ``response_time``, else the response's ``created`` and
    a ``latency_ms`` beside it (or none). Only the last needs ``created``, which Anthropic's answers,
    say, do not have."""
    if all(type(doc.get(k)) in (int, float) for k in ("startTime", "endTime")):
        return doc["startTime"], _ms_between(doc["startTime"], doc["endTime"])
    if _portkey(doc):
        latency = _ms(doc.get("response_time"), f"Portkey log {doc.get('id')}: response_time") or 0.0
        if doc.get("created_at") is not None:
            return _epoch(doc["created_at"], f"Portkey log {doc.get('id')}: created_at"), latency
    else:  # none when absent or null; another type is refused, not read as none
        latency = 0.0 if doc.get("latency_ms") is None else float(_need(doc, "latency_ms", (int, float), ""))
    return _need(response, "created", (int, float), "response."), latency


def _stream_chunks(value: Any) -> list | None:
    """The chunks of a response logged as its stream, as proxies log one: a list of chunk objects, or
    the server-sent events' text (``data: {...}`` lines, up to ``data: [DONE]``); None for any other
    value. A line that is no JSON is FormatError ``invalid_json``, naming it."""
    if isinstance(value, list):
        return value if _chunk_list(value) else None
    if not isinstance(value, str) or not value.lstrip().startswith(_STREAM_FIELDS):
        return None
    chunks = []
    for n, line in enumerate(value.splitlines(), 1):
        payload = line[5:].strip() if line.startswith("data:") else None
        if payload and payload != "[DONE]":
            try:
                chunk = json.loads(payload)
            except ValueError:
                raise FormatError("invalid_json", f"response: line {n} of its stream is no JSON: {_excerpt(payload)}") from None
            if isinstance(chunk, dict):  # data: null says nothing
                chunks.append(chunk)
    return chunks or None


def _streamed_response(value: Any) -> bool:
    """Whether :func:`_stream_chunks` finds a stream, or a damaged one, in ``value``, told without
    reading its chunks' JSON (which its reader does): :func:`detect` asks it of every log."""
    if isinstance(value, list):
        return _chunk_list(value)
    return isinstance(value, str) and value.lstrip().startswith(_STREAM_FIELDS) and _STREAM_OBJECT.search(value) is not None


def _chunk_list(value: list) -> bool:
    return bool(value) and all(isinstance(c, dict) for c in value) and any("choices" in c or "type" in c for c in value)


# What begins the server-sent events' text: its fields' names, or a comment (OpenRouter's
# ": OPENROUTER PROCESSING"); and a line of one of its chunks (an object: data: null says nothing).
_STREAM_FIELDS = ("data:", "event:", "id:", "retry:", ":")
_STREAM_OBJECT = re.compile(r"^data:[ \t]*\{", re.M)


# Where a converter of another API's answer (Gemini's) puts its refusal of one choice, for from_openai
# to give in its place: a key no JSON document's choice can hold a FormatError under.
_REFUSED = "ctpipe_refused"


def from_openai(doc: dict) -> Iterator[dict | FormatError | Held]:
    """One trace per choice of a logged chat completion; a choice that is no text answer comes as its
    FormatError, in its place. A line of a batch's files is :class:`Held` for its join (see
    :func:`_batch_traces`)."""
    batch = _batch_kind(doc)
    if batch:
        yield Held(batch, _need(doc, "custom_id", str, ""), "", doc)
        return
    if _spend_log(doc):
        doc = _spend_log_call(doc)
    if _failed_call(doc):
        raise FormatError("failed_request", f"the call failed: {str(doc['error_str'])[:300]}")
    if doc.get("cache_hit") is True and "call_type" in doc:  # LiteLLM's
        stored = doc.get("response") if isinstance(doc.get("response"), dict) else {}
        raise FormatError("duplicate", f"call {doc.get('id')} is a cache hit: LiteLLM answered with the stored answer "
                                       f"of another call ({stored.get('id')})")
    if _portkey(doc):
        doc = _portkey_log(doc)
    if _redacted(doc):
        raise FormatError("no_content", f"LiteLLM wrote {_LITELLM_REDACTED!r} for the messages (its "
                                        "turn_off_message_logging, or a request's redaction): no prompt or answer to read")
    request = doc.get("request") if isinstance(doc.get("request"), dict) else doc
    response = doc.get("response") if isinstance(doc.get("response"), dict) else _stream_chunks(doc.get("response")) or doc
    if "choices" not in response:  # another API's bodies, as gateways log them: Anthropic's, the Responses API's, ...
        if _litellm(doc):
            request = _litellm_request(doc, response)
        streamed = isinstance(response, list)
        call = f"call {next((c.get('id') for c in response if c.get('id')), None) if streamed else response.get('id')}"
        request, response = _chat_bodies(request, response, call, "request") or (request, response)
        if isinstance(response, list):
            raise FormatError("invalid_field", f"{call}: its response is a stream of no chat API's chunks")
    messages = _need(request, "messages", list, "request.")
    rid = _need(response, "id", str, "response.")
    model = _need(response, "model", str, "response.")
    # The log's metadata, else the stored completion's (its response), else the request's (store=True's)
    meta = next((m for m in (doc.get("metadata"), response.get("metadata"), request.get("metadata")) if isinstance(m, dict)), {})
    usage = _object(response, "usage", "response.")
    start, latency_ms = _call_times(doc, response)
    choices = _need(response, "choices", list, "response.")
    if not choices:
        raise FormatError("empty_completion", f"response {rid} has no choices")
    prompt = [_prompt_message(m, f"request.messages[{i}]") for i, m in _messages_of(messages, "request.messages")]
    prompt, prefill = _prefill(prompt, _continues(request, messages, model))
    for position, choice in enumerate(choices):
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise FormatError("invalid_field", f"response {rid}: a choice has no message")
        index = position if choice.get("index") is None else choice["index"]  # its place, where it says none
        refused = choice.get(_REFUSED)  # a converter's refusal of this choice alone
        answer = refused if isinstance(refused, FormatError) else \
            _answer(message, f"response {rid}: choice {index}", choice.get("finish_reason"))
        if isinstance(answer, FormatError):
            answer.record = choice
            yield answer
            continue
        yield {
            "trace_id": rid if len(choices) == 1 else f"{rid}:{index}",
            "start_time": _iso(start, f"response {rid}: created or startTime"),
            "end_time": _iso(start + latency_ms / 1000, f"response {rid}: created + latency_ms, or endTime"),
            "model": {"name": model, "version": str(meta.get("model_version") or response.get("system_fingerprint") or model)},
            "messages": prompt,
            "completion": _whole_turn(prefill, answer),
            "usage": _usage(*(usage.get(k, 0) for k in ("prompt_tokens", "completion_tokens", "total_tokens")), len(choices)),
            "feedback": {"thumb": meta.get("thumb"), "rating": _number(meta.get("rating"))},
            "latency_ms": latency_ms,
            "scores": [],
        }


# A prefill: the assistant's turn a prompt ends in, which the answer continues (``{`` to steer a JSON
# answer). Its trace's answer is the whole turn, that turn's text and the answer's: left in the
# prompt, a chat template would close that turn and open another before the answer (TRL's
# preference layout renders prompt + chosen so). How an answer holds it, by API:
_AFTER = "after"  # the answer is what follows it (Anthropic's, vLLM's continue_final_message, DeepSeek's prefix)
_WHOLE = "whole"  # the answer holds it already (vLLM's continue_final_message with echo, Mistral's prefix)
_EITHER = "either"  # another's prefix: told by the answer's start
_CONTINUED = "_continued"  # a reader's mark on a prompt's last message that its API's answer continues
# Model ids, split at "/" and ":" (a gateway's, a cloud's, an ARN's parts), by what their prefix gives:
# the models that continue a prompt's last turn whichever API or gateway serves them, Anthropic's
# (claude-sonnet-4-5, anthropic/claude-3.5-sonnet:beta, us.anthropic.claude-..., models/claude-...@...)
# and Amazon Nova (amazon.nova-pro-v1:0, amazon/nova-lite-v1, nova-pro-v1:0); DeepSeek's, whose
# prefix answer follows it; Mistral's, whose prefix answer holds it. A model of another's named after
# one (someone/claude-distill-qwen, ft:gpt-4o:acme:claude-style:x) is none of them: an id is told by
# its own name (a first part), or by one after its maker's or a gateway's name.
_PREFILLING = re.compile(r"(?:[a-z]{2,7}\.)?(?:anthropic\.claude-|amazon\.nova-)", re.IGNORECASE)
_MODEL_NAMES = {_AFTER: re.compile(r"claude-(?:\d|instant|v\d|opus|sonnet|haiku)|nova-(?:pro|lite|micro|premier)", re.IGNORECASE),
                "deepseek": re.compile(r"deepseek-", re.IGNORECASE),
                "mistral": re.compile(r"(?:open-)?(?:mistral|mixtral|ministral|magistral|codestral|devstral|pixtral)-", re.IGNORECASE)}
_MAKERS = frozenset({"anthropic", "amazon", "deepseek", "deepseek-ai", "mistral", "mistralai", "models", "bedrock", "vertex_ai",
                     "openrouter", "litellm_proxy", "azure_ai"})


def _model_kind(name: Any) -> str | None:
    """Which of the kinds above a model's id names (``after``: one that continues a prefill), or None.

    >>> [_model_kind(n) for n in ("claude-sonnet-4-5", "us.anthropic.claude-3-5-sonnet-20240620-v1:0", "gpt-4o",
    ...                          "someone/claude-distill-qwen", "mistral-large-latest", "deepseek/deepseek-chat")]
    ['after', 'after', None, None, 'mistral', 'deepseek']
    """
    parts = re.split(r"[/:]", name) if isinstance(name, str) else []
    for i, part in enumerate(parts):
        if _PREFILLING.match(part):
            return _AFTER
        if i == 0 or parts[i - 1].lower() in _MAKERS:
            kind = next((k for k, named in _MODEL_NAMES.items() if named.match(part)), None)
            if kind:
                return kind
    return None


def _continues(request: dict, messages: list, model: Any) -> str | None:
    """How a call's answer holds the prefill its prompt ends in (see above), or None where it ends in
    no turn its answer continues (OpenAI's API answers in a turn of its own): asked for
    (``continue_final_message``, vLLM's; ``prefix``, Mistral's and DeepSeek's), marked by its reader, or
    by the model that answered (not the one asked for: a gateway's fallback answers for it)."""
    last = messages[-1] if messages else {}
    if last.get("role") != "assistant":
        return None
    if request.get("continue_final_message") is True:
        return _WHOLE if request.get("echo") is True else _AFTER
    kind = _model_kind(model)
    if last.get(_CONTINUED) or kind == _AFTER:
        return _AFTER
    if last.get("prefix") is True:
        return {"deepseek": _AFTER, "mistral": _WHOLE}.get(kind, _EITHER)
    return None


def _prefilled(messages: list) -> list:
    """A prompt's messages, the last marked as the one its answer continues where it is the assistant's,
    for an API whose answer always does (see :func:`_continues`)."""
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    return [*messages[:-1], {**last, _CONTINUED: True}] if last.get("role") == "assistant" else messages


def _prefill(prompt: list[dict], how: str | None) -> tuple[list[dict], tuple[str, str | None]]:
    """(a prompt's messages without the prefill it ends in, (that prefill's text, how the answer holds
    it)), for :func:`_whole_turn`; the prompt as it is where its answer continues no turn, or where the
    prefill is all it holds (which its validation names)."""
    if not how or len(prompt) < 2 or prompt[-1]["role"] != "assistant":
        return prompt, ("", None)
    return prompt[:-1], (prompt[-1]["content"], how)


def _whole_turn(prefill: tuple[str, str | None], answer: Any) -> Any:
    """The whole turn of an answer that continues a prefill (see :func:`_prefill`). An answer that is
    none (a refusal in its place, a blank one, none recorded, or the prefill alone where the answer
    holds it) stays none: the prefill alone is no answer."""
    text, how = prefill
    if not text or not isinstance(answer, str):
        return answer
    if how == _WHOLE or (how == _EITHER and answer.startswith(text)):
        return answer if answer[len(text):].strip() else ""
    return text + answer if answer.strip() else answer


# ------------------------------------------------------------------------------------------ helicone

_HELICONE_FEEDBACK = "helicone-score-feedback"  # the score Helicone keeps a request's user feedback in (1: up)
_HELICONE_BOOLEAN = "-hcone-bool"  # the suffix Helicone gives a boolean score's name where it keeps it
_HELICONE_NO_CACHE = ("", "00000000-0000-0000-0000-000000000000")  # cache_reference_id of a request not served from cache


def from_helicone(doc: dict) -> Iterator[dict | FormatError]:
    """The traces of a request as Helicone exports it (see the module's docstring): its bodies those of
    the provider's API (:func:`_provider_bodies`), its times, latency, feedback and scores Helicone's own."""
    rid = _need(doc, "request_id", str, "")
    where = f"request {rid}"
    _helicone_answered(doc, where)
    request = _helicone_body(doc.get("request_body"), f"{where}: request_body")
    response = _helicone_body(doc.get("response_body"), f"{where}: response_body", chunks=True)
    start, latency_ms = _helicone_times(doc, where)
    endpoint = doc.get("target_url") or doc.get("request_path") or "its endpoint"
    request, response = _provider_bodies(request, response, where, "request_body", f"{endpoint} is not a chat completion "
                                         "(its request has no messages, or its answer no choices)")
    usage = _object(response, "usage", f"{where}: response_body.")
    if not usage:  # a body without its counts: Helicone's own (quoted, as ClickHouse writes 64-bit integers)
        prompt, answer = (_quoted_count(doc.get(k)) or 0 for k in ("prompt_tokens", "completion_tokens"))
        usage = {"prompt_tokens": prompt, "completion_tokens": answer, "total_tokens": _total(prompt, answer)}
    thumb, scores = _helicone_scores(doc, where)
    for t in _call_traces(rid, request, {**response, "usage": usage}, start, latency_ms,
                          doc.get("model") or doc.get("request_model")):
        if isinstance(t, dict):
            t.update(feedback={"thumb": thumb, "rating": None}, scores=scores)
        yield t


def _helicone_answered(doc: dict, where: str) -> None:
    """FormatError for a request the model did not answer itself: one that failed, is pending or was
    cancelled (its status says so before its bodies, of which Helicone often keeps none), or a
    cache hit (``duplicate``: the stored answer of the request it names)."""
    status = doc.get("response_status")
    if isinstance(status, str) and status.isascii() and status.removeprefix("-").isdigit():
        status = int(status)  # quoted, as ClickHouse writes a 64-bit integer in JSON
    if type(status) is int and not 200 <= status < 300:
        said = f"failed (response_status {status})" if status > 0 else f"has no answer (response_status {status}: pending or cancelled)"
        raise FormatError("failed_request", f"{where} {said}{_error_said(_stored_json(doc.get('response_body')))}")
    cached = doc.get("cache_reference_id")
    if isinstance(cached, str) and cached not in (*_HELICONE_NO_CACHE, doc["request_id"]):
        raise FormatError("duplicate", f"{where} is a cache hit: Helicone answered with the stored answer of request {cached}")


def _helicone_times(doc: dict, where: str) -> tuple[float, float]:
    """(when a request began, in seconds since 1970; its latency in ms): its ``request_created_at``
    (ClickHouse's text of it has no zone: UTC), and its ``delay_ms``, or the time to its response."""
    start = _epoch(doc.get("request_created_at"), f"{where}: request_created_at")
    delay = _ms(doc.get("delay_ms"), f"{where}: delay_ms")
    if delay is not None:
        return start, delay
    if doc.get("response_created_at"):
        return start, _ms_between(start, _epoch(doc["response_created_at"], f"{where}: response_created_at"))
    return start, 0.0


def _helicone_body(body: Any, where: str, chunks: bool = False) -> dict | list:
    """A request's or response's body: an object, or the JSON text of one (as Helicone keeps them in
    ClickHouse), or with ``chunks`` a stream's chunks (as it keeps Gemini's); FormatError
    ``no_content`` where Helicone holds none: its note in the place of a body (an export without
    ``--include-body``, a body too large or expired), the text preview it keeps of a body it stored
    elsewhere, or the model alone (a body it was told to omit)."""
    body = _stored_json(body)
    hint = "export with the bodies: @helicone/export --include-body"
    if isinstance(body, str):
        raise FormatError("no_content", f"{where} is Helicone's text preview of it, not the body ({hint})")
    if not isinstance(body, dict) and not (chunks and isinstance(body, list) and body):
        raise FormatError("no_content" if body is None else "invalid_field", f"{where}={_excerpt(repr(body))} is not an object")
    if isinstance(body, list):
        return body
    if "helicone_message" in body and len(body) == 1:
        raise FormatError("no_content", f"{where} holds no body, but Helicone's note {_excerpt(body['helicone_message'], 200)!r} ({hint})")
    if body.keys() == {"model"}:
        raise FormatError("no_content", f"{where} holds its model alone: Helicone was told to omit it (Helicone-Omit-Request "
                                        "or Helicone-Omit-Response)")
    return body


def _streamed(response: dict) -> dict:
    """A streamed chat completion with its choices rebuilt from its chunks (``streamed_data``) by their
    index: Helicone's own merge of them keeps neither a choice's finish reason (a stream the content
    filter stopped read as an answer) nor their indices (the choices of ``n`` > 1 read as one). A
    choice the stream gave no finish reason is ``failed_request`` in its place: the stream was cut
    short, or an error broke it off."""
    choices: dict[Any, dict] = {}
    usage, error = response.get("usage"), None
    response = dict(response)
    for chunk in response["streamed_data"]:
        if not isinstance(chunk, dict):
            continue
        for key in ("id", "model", "created", "system_fingerprint"):  # the call's, where its log kept the chunks alone
            if not response.get(key) and chunk.get(key):  # Azure's first chunk: "" and 0 (its prompt filter's results)
                response[key] = chunk[key]
        if isinstance(chunk.get("error"), dict):  # an error in the stream's place (OpenAI's, vLLM's)
            error = chunk["error"]
        elif chunk.get("object") == "error":
            error = chunk
        usage = chunk["usage"] if isinstance(chunk.get("usage"), dict) else usage
        for c in chunk.get("choices") or []:
            delta = c.get("delta") if isinstance(c, dict) else None
            if not isinstance(delta, dict):
                continue
            got = choices.setdefault(c.get("index", 0), {"index": c.get("index", 0), "finish_reason": None,
                                                          "message": {"role": "assistant", "content": ""}})
            message = got["message"]
            for key in ("content", "refusal"):  # text, in pieces
                if isinstance(delta.get(key), str):
                    message[key] = (message.get(key) or "") + delta[key]
            for key in (*TOOL_FIELDS, "audio"):
                message[key] = message.get(key) or delta.get(key)
            got["finish_reason"] = c.get("finish_reason") or got["finish_reason"]
    for i, choice in choices.items():  # a stream cut short, or broken off by an error: its answer goes on past it
        if choice["finish_reason"] is None:
            said = f": {_excerpt(str(error.get('message') or error), 300)}" if error else " (no finish reason)"
            choice[_REFUSED] = FormatError("failed_request", f"the stream ended before choice {i}'s answer did{said}")
    return {**response, "choices": [choices[i] for i in _by_index(choices)], "usage": usage}


def _helicone_scores(doc: dict, where: str) -> tuple[str | None, list[dict]]:
    """(the thumb of a request's user feedback, its other scores as ours). Scores come as Helicone's
    ClickHouse keeps them (a number, maybe quoted; a boolean one's name with a suffix) or as its
    Postgres API gives them ({"value", "valueType"})."""
    given = _object(doc, "scores", f"{where}: ")
    values = []  # a boolean score and a number of one name are two scores (the judge's mean), not the later alone
    for name, value in given.items():
        value = _number(value.get("value") if isinstance(value, dict) else value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FormatError("invalid_field", f"{where}: scores.{name}={value!r} is not a number")
        values.append((name.removesuffix(_HELICONE_BOOLEAN), _finite(float(value), f"{where}: scores.{name}")))
    feedback = next((v for k, v in reversed(values) if k == _HELICONE_FEEDBACK), None)
    rating = doc.get("feedback_rating")
    thumb = ("up" if feedback >= 1 else "down") if feedback is not None else \
        ("up" if rating else "down") if isinstance(rating, bool) else None
    return thumb, [{"name": k, "value": v, "label": None, "source": "helicone"} for k, v in values if k != _HELICONE_FEEDBACK]


def _anthropic_request(body: dict, where: str) -> dict:
    """A request to Anthropic's messages API (``where``: the body's place) in OpenAI's shape: its
    ``system`` (a text or text blocks) a first message; tool use and results in a prompt are tool
    calls, as OpenAI's."""
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    for i, m in enumerate(messages):
        blocks = m.get("content") if isinstance(m, dict) and isinstance(m.get("content"), list) else []
        kinds = [b.get("type") for b in blocks if isinstance(b, dict)]
        _no_tool_call(next((f"a block of type {k}" for k in ("tool_use", "tool_result") if k in kinds), None),
                      f"{where}.messages[{i}]")
        _media(kinds, f"{where}.messages[{i}]")  # here, where its place is its own
    system = body.get("system")
    if isinstance(system, list):
        _typed((b.get("type") for b in system if isinstance(b, dict)), f"{where}.system")
    return {**body, "messages": _prefilled([{"role": "system", "content": system}, *messages] if system else messages)}


def _anthropic_response(body: dict) -> dict:
    """An answer of Anthropic's messages API in OpenAI's shape (its thinking dropped, as a reasoning
    model's is), for :func:`from_openai`. Its prompt's count is of all its input tokens: Anthropic
    counts those read from or written to its prompt cache apart, OpenAI's count holds them."""
    blocks = [b for b in body.get("content") or [] if isinstance(b, dict)]
    _typed((b.get("type") for b in blocks), f"response {body.get('id')}: content")
    texts = [b for b in blocks if b.get("type") == "text"]
    # One answer in blocks: cited words are blocks of their own within its sentences, joined as they are.
    said = "".join(b["text"] for b in texts) if all(isinstance(b.get("text"), str) for b in texts) else texts
    message = {"role": "assistant", "content": said,
               # its tools' calls and those it ran itself (server_tool_use, as a web search): no answer to train on
               "tool_calls": [b for b in blocks if str(b.get("type")).endswith("tool_use")] or None}
    # Stopped for a refusal: its classifiers intervened, as a content filter does, whatever text came before.
    stop = "content_filter" if body.get("stop_reason") == "refusal" else body.get("stop_reason")
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    inputs = [usage.get(k) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
    prompt = inputs[0] if type(inputs[0]) is not int else inputs[0] + sum(c for c in inputs[1:] if type(c) is int)
    answer = usage.get("output_tokens")
    return {**body, "choices": [{"index": 0, "message": message, "finish_reason": stop}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": answer, "total_tokens": _total(prompt, answer)}
            if usage else {}}


def _anthropic_streamed(events: list, call: str) -> dict:
    """An answer of Anthropic's messages API rebuilt from its stream's events (``message_start``, each
    block's start and deltas, ``message_delta``), as Bedrock and Vertex AI log a streamed call;
    FormatError ``failed_request`` for a stream that ended in an error, its text cut short."""
    message: dict = {"content": [], "usage": {}}
    blocks: dict[Any, dict] = {}
    for e in (e for e in events if isinstance(e, dict)):
        kind, delta = e.get("type"), e.get("delta") if isinstance(e.get("delta"), dict) else {}
        if kind == "error":
            raise FormatError("failed_request", f"{call}: the stream ended in an error{_error_said(e)}")
        if kind == "message_start" and isinstance(e.get("message"), dict):
            message.update({k: v for k, v in e["message"].items() if k != "content"})
        elif kind == "content_block_start" and isinstance(e.get("content_block"), dict):
            blocks[e.get("index")] = dict(e["content_block"])
        elif kind == "content_block_delta" and isinstance(delta.get("text"), str):
            block = blocks.setdefault(e.get("index"), {"type": "text", "text": ""})
            block["text"] = (block.get("text") or "") + delta["text"]
        elif kind == "message_delta":
            usage = message["usage"] if isinstance(message.get("usage"), dict) else {}
            message.update(stop_reason=delta.get("stop_reason", message.get("stop_reason")),
                           usage={**usage, **(e["usage"] if isinstance(e.get("usage"), dict) else {})})
    return {**message, "content": [blocks[i] for i in _by_index(blocks)]}


def _by_index(indices: Iterable[Any]) -> list[Any]:
    """Choices' or blocks' indices in their order: 2 before 10, an index that is no number after them."""
    return sorted(indices, key=lambda i: (type(i) is not int, i if type(i) is int else str(i)))


# ------------------------------------------------------------------------------- gemini, converse

# Parts of Gemini's messages (REST names, and the proto's, which its JSON parser takes too) and
# content blocks of Bedrock's Converse API: objects keyed by their kind, that are a tool's call or
# its result, or that hold media.
_GEMINI_TOOLS = ("functionCall", "functionResponse", "executableCode", "codeExecutionResult", "toolCall",
                 "toolResponse", "function_call", "function_response", "executable_code", "code_execution_result")
_GEMINI_MEDIA = ("inlineData", "fileData", "inline_data", "file_data")
# What a Gemini part may hold (both spellings: the REST API's, the Python SDK's model_dump's).
_GEMINI_PART = frozenset({"text", "thought", "thoughtSignature", "thought_signature", "videoMetadata", "video_metadata",
                          "partMetadata", "part_metadata", "mediaResolution", "media_resolution", *_GEMINI_TOOLS,
                          *_GEMINI_MEDIA})
_CONVERSE_TOOLS = ("toolUse", "toolResult")
_CONVERSE_MEDIA = ("image", "document", "video", "audio")
# What a Converse block read holds: any other (retrieved context, a searchResult) is refused, not passed over.
_CONVERSE_KEYS = frozenset({"text", "guardContent", "citationsContent", "reasoningContent", "cachePoint",
                            *_CONVERSE_TOOLS, *_CONVERSE_MEDIA})
# Bedrock's stop reasons of an answer its guardrails stopped.
_CONVERSE_FILTERED = frozenset({"guardrail_intervened", "content_filtered"})
# Input tokens Converse (and Amazon Nova's API) counts apart from inputTokens: read from or written
# to the prompt cache, input all the same.
CONVERSE_CACHED = ("cacheReadInputTokens", "cacheWriteInputTokens", "cacheReadInputTokenCount", "cacheWriteInputTokenCount")
# Gemini's finish reasons in OpenAI's words, where they have one.
_GEMINI_FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}  # a check's reason is kept: the quarantine says which
# Gemini's finish reasons of an answer that was to be a tool's call, and failed.
_GEMINI_CALLS = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"})


def _keyed_parts(parts: Any, where: str, prompt: bool, tools: tuple[str, ...], media: tuple[str, ...]) -> tuple[list[dict], list[dict]]:
    """(a message's parts that are objects keyed by their kind; those that are a tool's call). One
    holding media is ``non_text_content``; in a prompt, a tool's call or result ``tool_call_in_prompt``."""
    parts = [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []
    kinds = {k for p in parts for k in p}
    if prompt:
        _no_tool_call(next((f"a part of type {k}" for k in tools if k in kinds), None), where)
    _media((k for k in media if k in kinds), where, media)  # in the order named: the message names the first
    return parts, [p for p in parts if any(k in p for k in tools)]


def _gemini_text(content: Any, where: str, prompt: bool, joined: str | None = None) -> tuple[str, list[dict]]:
    """(the text of a Gemini ``Content``, its thoughts left out as a reasoning model's are; its tools'
    calls). An answer's parts are one text cut anywhere, as a stream's chunks are (Gemini's SDKs join
    them so); a prompt's are joined as other typed parts are, or by ``joined``."""
    parts, calls = _keyed_parts(content.get("parts") if isinstance(content, dict) else None, where, prompt,
                                _GEMINI_TOOLS, _GEMINI_MEDIA)
    texts = [p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")]
    return _join_parts(texts, prompt, joined), calls


def _gemini_request(body: dict, where: str) -> dict:
    """A request of Gemini's ``generateContent`` (``systemInstruction``; ``contents`` of parts, roles
    ``user``, ``model`` or none, the user's) in OpenAI's shape."""
    cached = body.get("cachedContent", body.get("cached_content"))
    if cached:  # the prompt's start, kept server-side: not in the log
        raise FormatError("invalid_field", f"{where}.cachedContent={_excerpt(cached, 120)!r}: the prompt begins with content "
                                           "Gemini kept (a context cache), which the log does not hold")
    system = body.get("systemInstruction", body.get("system_instruction"))
    messages = [{"role": "system", "content": _gemini_text(system, f"{where}.systemInstruction", True)[0]}] if system else []
    contents = body.get("contents")
    for i, content in enumerate(contents if isinstance(contents, list) else []):
        role = "assistant" if isinstance(content, dict) and content.get("role") == "model" else "user"
        messages.append({"role": role, "content": _gemini_text(content, f"{where}.contents[{i}]", True, turn_joined(role))[0]})
    return {**body, "messages": messages}


def _gemini_response(body: dict | list, call: str) -> dict:
    """An answer of Gemini's ``generateContent`` in OpenAI's shape, a choice per candidate. A streamed
    one (its chunks) has each candidate's text joined from its chunks, the last finish reason and
    counts given. A prompt Gemini blocked (no candidates; ``promptFeedback.blockReason``) is
    ``no_text_answer``."""
    merged: dict = {}
    choices: dict[Any, dict] = {}
    for chunk in (c for c in (body if isinstance(body, list) else [body]) if isinstance(c, dict)):
        if chunk.get("error"):  # a stream cut short: the text before it is no whole answer
            raise FormatError("failed_request", f"{call}: the answer ended in an error{_error_said(chunk)}")
        merged.update((k, v) for k, v in chunk.items() if v is not None)
        for position, c in enumerate(chunk.get("candidates") or []):
            if not isinstance(c, dict):
                continue
            got = choices.setdefault(c.get("index", position), {"text": [], "calls": [], "finish": None, "refused": None})
            got["finish"] = c.get("finishReason") or got["finish"]
            try:
                text, calls = _gemini_text(c.get("content"), f"{call}: candidate {c.get('index', position)}", False)
            except FormatError as e:  # media: this candidate's refusal, in its place beside the others
                got["refused"] = got["refused"] or e
                continue
            got["text"].append(text)
            got["calls"] += calls
    if not choices:
        feedback = merged.get("promptFeedback") if isinstance(merged.get("promptFeedback"), dict) else {}
        why = f"Gemini blocked the prompt ({feedback['blockReason']})" if feedback.get("blockReason") else "no candidates"
        raise FormatError("no_text_answer", f"{call}: {why}")
    usage = merged.get("usageMetadata") if isinstance(merged.get("usageMetadata"), dict) else {}
    # Gemini's JSON leaves a count of 0 out; its thoughts are answer tokens, as OpenAI counts a reasoning model's.
    prompt, answer, thoughts = (usage.get(k, 0) for k in ("promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount"))
    if type(answer) is int and type(thoughts) is int:
        answer += thoughts
    return {**merged, "id": merged.get("responseId"), "model": merged.get("modelVersion"),
            "choices": [{"index": i, "finish_reason": _GEMINI_FINISH.get(choices[i]["finish"], choices[i]["finish"]),
                         _REFUSED: choices[i]["refused"],
                         "message": {"role": "assistant", "content": "".join(choices[i]["text"]),
                                     # a call it failed to make is a tool call too, with no text beside it
                                     "tool_calls": choices[i]["calls"] or (choices[i]["finish"] in _GEMINI_CALLS or None)}}
                        for i in _by_index(choices)],
            "usage": {"prompt_tokens": prompt, "completion_tokens": answer,
                      "total_tokens": usage.get("totalTokenCount", _total(prompt, answer))} if usage else {}}


def _converse_text(blocks: Any, where: str, prompt: bool, joined: str | None = None) -> tuple[str, list[dict]]:
    """(the text of a Converse message's content blocks, its reasoning left out, joined as
    :func:`_gemini_text` joins parts; its tools' calls). Text a guardrail was to check
    (``guardContent``) is text of the message."""
    blocks, calls = _keyed_parts(blocks, where, prompt, _CONVERSE_TOOLS, _CONVERSE_MEDIA)
    if other := next((next(iter(b), None) for b in blocks if not _CONVERSE_KEYS.intersection(b)), None):
        raise FormatError("non_text_content", f"{where} holds a block of type {other}, which is not read as text")
    texts = []
    for b in blocks:
        guarded = b.get("guardContent") if isinstance(b.get("guardContent"), dict) else {}
        _keyed_parts([guarded], f"{where} (guardContent)", prompt, (), _CONVERSE_MEDIA)  # an image to guard
        cited = b.get("citationsContent") if isinstance(b.get("citationsContent"), dict) else {}
        if cited:  # an answer's cited words, within its sentences
            texts += [c["text"] for c in cited.get("content") or [] if isinstance(c, dict) and isinstance(c.get("text"), str)]
        text = b.get("text", guarded.get("text") if isinstance(guarded.get("text"), dict) else None)
        text = text.get("text") if isinstance(text, dict) else text
        if isinstance(text, str):
            texts.append(text)
    return _join_parts(texts, prompt, joined), calls


def _converse_request(body: dict, where: str) -> dict:
    """A request of Bedrock's Converse API, or of Amazon Nova's own (``system`` and ``messages`` of
    content blocks), in OpenAI's shape."""
    system = body.get("system")
    messages = [{"role": "system", "content": _converse_text(system, f"{where}.system", True)[0]}] if system else []
    for i, m in enumerate(body.get("messages") or []):
        m = m if isinstance(m, dict) else {}
        role = m.get("role")
        messages.append({"role": role, "content": _converse_text(m.get("content"), f"{where}.messages[{i}]", True,
                                                                 turn_joined(_role(role)))[0]})
    return {**body, "messages": messages}  # a prefill its model's, not the API's (see _continues)


def _converse_response(body: dict, call: str) -> dict:
    """An answer of Bedrock's Converse API, or of Amazon Nova's own, in OpenAI's shape. Its prompt's
    count is of all its input tokens, those read from or written to the prompt cache with them."""
    output = body["output"]["message"]
    text, calls = _converse_text(output.get("content") if isinstance(output, dict) else None, f"{call}: output.message", False)
    stop = body.get("stopReason")
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    prompt, answer = usage.get("inputTokens"), usage.get("outputTokens")
    for cached in CONVERSE_CACHED:
        prompt = prompt + usage[cached] if type(prompt) is int and type(usage.get(cached)) is int else prompt
    return {**body, "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": calls or None},
                                 "finish_reason": "content_filter" if stop in _CONVERSE_FILTERED else
                                 "length" if stop == "max_tokens" else stop}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": answer,
                      "total_tokens": usage.get("totalTokens", _total(prompt, answer))} if usage else {}}


def _provider_bodies(request: dict, response: dict | list, call: str, request_at: str,
                     not_chat: str) -> tuple[dict, dict]:
    """A call's request and response bodies in OpenAI's chat completion shape, from the API their shape
    says: OpenAI's chat completions (or its chunks), its Responses API, Anthropic's messages API (or
    its stream's events), Gemini's ``generateContent`` (or its chunks), Bedrock's Converse API (or
    Amazon Nova's, or its stream's events). ``call`` names the call in errors, ``request_at`` the
    request body's place; FormatError ``invalid_field`` saying ``not_chat`` for bodies of another API."""
    bodies = _chat_bodies(request, response, call, request_at)
    if bodies is None:
        raise FormatError("invalid_field", f"{call}: {not_chat}")
    return bodies


def _chat_bodies(request: dict, response: dict | list, call: str, request_at: str) -> tuple[dict, dict] | None:
    """:func:`_provider_bodies`, or None for bodies of another API."""
    where = f"{call}: {request_at}"
    chunks = response if isinstance(response, list) else response.get("streamed_data")
    chunks = [c for c in chunks if isinstance(c, dict)] if isinstance(chunks, list) else [response]
    answered = any("candidates" in c or "promptFeedback" in c for c in chunks)
    if answered or "contents" in request and any("error" in c for c in chunks):  # Gemini's answer, or its stream cut short
        return _gemini_request(request, where), _gemini_response(chunks, call)
    if isinstance(response, list):
        kinds = {k for c in chunks for k in (c.get("type"), *c)}
        if "message_start" in kinds or any(c.get("type") == "error" for c in chunks):
            response = _anthropic_streamed(chunks, call)
        elif kinds & {"messageStart", "contentBlockDelta", "messageStop"}:
            response = _converse_streamed(chunks)
        else:
            response = _streamed({"streamed_data": chunks})  # OpenAI's chunks
            return (request, response) if response["choices"] and isinstance(request.get("messages"), list) else None
    if "content" in response and "choices" not in response:
        return _anthropic_request(request, where), _anthropic_response(response)
    if isinstance(response.get("output"), dict) and "message" in response["output"]:
        return _converse_request(request, where), _converse_response(response, call)
    if isinstance(response.get("streamed_data"), list):
        response = _streamed(response)
    if response.get("object") == "response":
        return _from_responses_api(request, response, f"{call}: ")
    return (request, response) if isinstance(request.get("messages"), list) and "choices" in response else None


def _converse_streamed(events: list[dict]) -> dict:
    """An answer of Amazon Nova's own API (or Converse's) rebuilt from its stream's events
    (``contentBlockStart``, ``contentBlockDelta``, ``messageStop``, ``metadata``), as Bedrock logs an
    InvokeModelWithResponseStream call, in the shape of its whole answer."""
    blocks: dict[Any, dict] = {}
    stop, usage = None, None
    for e in events:
        for kind, given in ((k, v) for k, v in e.items() if isinstance(v, dict)):
            at = given.get("contentBlockIndex", 0)
            if kind == "contentBlockStart" and isinstance(given.get("start"), dict):
                blocks.setdefault(at, {}).update(given["start"])  # a tool's call begins so
            elif kind == "contentBlockDelta" and isinstance(given.get("delta"), dict):
                text = given["delta"].get("text")
                block = blocks.setdefault(at, {})
                if isinstance(text, str):
                    block["text"] = block.get("text", "") + text
                block.update((k, v) for k, v in given["delta"].items() if k != "text")  # toolUse, reasoningContent
            elif kind == "messageStop":
                stop = given.get("stopReason")
            elif kind == "metadata":
                usage = given.get("usage", usage)
    return {"output": {"message": {"role": "assistant", "content": [blocks[i] for i in _by_index(blocks)]}},
            "stopReason": stop, **({"usage": usage} if isinstance(usage, dict) else {})}


def _call_traces(rid: str, request: dict, response: dict, start: float, latency_ms: float,
                 model: Any) -> Iterator[dict | FormatError]:
    """The traces of a call whose bodies are in OpenAI's shape, read as :func:`from_openai` reads a log,
    with the id, time, latency and model (where its answer names none) its log gives: ids ``rid``, or
    ``rid:<index>`` of a choice past one."""
    yield from from_openai({"request": request, "latency_ms": latency_ms, "response": {
        **response, "id": rid, "created": start, "model": response.get("model") or model}})


# ------------------------------------------------------------------------------------------ vertex

def from_vertex(doc: dict) -> Iterator[dict | FormatError]:
    """The traces of a call as Vertex AI's request-response logging keeps it in BigQuery, a row of its
    table exported (see the module's docstring)."""
    rid = doc.get("request_id")  # NUMERIC: a number, text (BigQuery's JSON), or a decimal (its Parquet)
    rid = int(rid) if isinstance(rid, Decimal) and rid.is_finite() and rid == rid.to_integral_value() else rid
    rid = str(rid) if type(rid) in (int, str, Decimal) and str(rid) else None
    bodies = [_stored_json(doc.get(k)) for k in ("full_request", "full_response")]
    if rid is None and isinstance(bodies[1], dict) and isinstance(bodies[1].get("responseId"), str):
        rid = bodies[1]["responseId"]
    if rid is None:
        raise FormatError("invalid_field", f"request_id={doc.get('request_id')!r} is not an id")
    call = f"Vertex AI request {rid}"
    request, response = bodies
    if isinstance(response, dict) and response.get("error"):
        raise FormatError("failed_request", f"{call} failed{_error_said(response)}")
    if not isinstance(request, dict) or not isinstance(response, (dict, list)) or not response:
        side = "full_request" if not isinstance(request, dict) else "full_response"
        raise FormatError("no_content", f"{call}: {side}={_excerpt(repr(doc.get(side)))} holds no body")
    request, response = _provider_bodies(request, response, call, "full_request", f"{doc.get('api_method')} of "
                                         f"{doc.get('model')} is not a chat completion (Gemini's generateContent, or "
                                         "Anthropic's messages API)")
    end = _epoch(doc.get("logging_time"), f"{call}: logging_time")  # written once the call answered
    metadata = _stored_json(doc.get("metadata"))
    latency = _ms(metadata.get("request_latency"), f"{call}: metadata.request_latency") \
        if isinstance(metadata, dict) else None
    if latency is not None and latency / 1000 > end:
        raise FormatError("invalid_field", f"{call}: metadata.request_latency is {latency} ms, which puts the call's "
                                           "start before 1970")
    if latency is None:
        start = _epoch(response["createTime"], f"{call}: createTime") if response.get("createTime") else end
        latency = _ms_between(start, end)
    model = str(doc.get("model") or "").rsplit("/", 1)[-1] or None  # publishers/google/models/<model>
    yield from _call_traces(rid, request, response, end - latency / 1000, latency, model)


# ------------------------------------------------------------------------------------------ bedrock

def from_bedrock(doc: dict) -> Iterator[dict | FormatError]:
    """The traces of a call as Amazon Bedrock's model invocation logging writes it (see the module's
    docstring)."""
    rid = _need(doc, "requestId", str, "")
    if not rid:
        raise FormatError("invalid_field", "requestId='' is no id")
    call = f"Bedrock request {rid}"
    if doc.get("errorCode"):
        raise FormatError("failed_request", f"{call} failed: {str(doc['errorCode'])[:300]}")
    sides = {side: _object(doc, side, f"{call}: ") for side in ("input", "output")}
    for side, given in sides.items():
        if given.get(f"{side}BodyJson") is None:
            kept = given.get(f"{side}BodyS3Path")
            why = (f"Bedrock kept it apart, at {kept} (a body over 100 KB)" if kept else
                   "not delivered (the logging configuration's textDataDeliveryEnabled), or over 100 KB with no S3 "
                   "location for such bodies")
            raise FormatError("no_content", f"{call}: {side}.{side}BodyJson is not in the log: {why}")
    request, response = sides["input"]["inputBodyJson"], sides["output"]["outputBodyJson"]
    model = str(doc.get("modelId") or "").rsplit("/", 1)[-1] or None  # an inference profile's ARN: its id
    if not isinstance(request, dict) or not isinstance(response, (dict, list)):
        raise FormatError("invalid_field", f"{call}: input.inputBodyJson or output.outputBodyJson is not an object")
    if isinstance(request.get("prompt"), str):  # Llama's, Mistral's, ... text completion
        raise FormatError("invalid_field", f"{call}: {model} was sent one text (input.inputBodyJson.prompt), not chat "
                                           "messages: its turns, in the model's own template, cannot be told apart")
    # A guardrail that intervened answers with its own text in the model's place (InvokeModel's body, or a chunk of its stream).
    if any(c.get("amazon-bedrock-guardrailAction") == "INTERVENED" or isinstance(c.get("message"), dict) and
           c["message"].get("amazon-bedrock-guardrailAction") == "INTERVENED"
           for c in (response if isinstance(response, list) else [response]) if isinstance(c, dict)):
        raise FormatError("no_text_answer", f"{call}: the answer was stopped by the content filter (Bedrock's guardrail)")
    request, response = _provider_bodies(request, response, call, "input.inputBodyJson", f"the bodies of "
                                         f"{doc.get('operation')} of {model} are of no chat API this reader knows "
                                         "(Converse, OpenAI's, Anthropic's, Amazon Nova's)")
    if "choices" in response:  # gpt-oss answers InvokeModel with its reasoning first: dropped, as a reasoning model's is
        response = {**response, "choices": [_without_reasoning(c) for c in response["choices"]]}
    counts = [sides["input"].get("inputTokenCount"), sides["output"].get("outputTokenCount")]
    if not response.get("usage") and all(type(c) is int for c in counts):  # the log's own counts
        response = {**response, "usage": {"prompt_tokens": counts[0], "completion_tokens": counts[1],
                                          "total_tokens": sum(counts)}}
    start = _epoch(doc.get("timestamp"), f"{call}: timestamp")
    # The model the call named, not the name its answer gives (Claude's InvokeModel answer names a
    # dated model, its Converse answer none): one deployment, one name.
    yield from _call_traces(rid, request, {**response, "model": model}, start,
                            _bedrock_latency(sides["output"]["outputBodyJson"]), model)


_REASONING = re.compile(r"\s*<reasoning>.*?</reasoning>\s*", re.DOTALL)


def _without_reasoning(choice: Any) -> Any:
    """A choice whose text begins with the model's reasoning in ``<reasoning>`` tags, without it."""
    message = choice.get("message") if isinstance(choice, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str) or not content.lstrip().startswith("<reasoning>"):
        return choice
    return {**choice, "message": {**message, "content": _REASONING.sub("", content, count=1)}}


# Where Bedrock's invocation logging keeps a body apart: the data folder of its record's hour.
BEDROCK_DATA = r"/BedrockModelInvocationLogs/[^/]+/\d{4}/\d{2}/\d{2}/\d{2}/data/"
_OFFLOADED = re.compile(BEDROCK_DATA + "[^/]+$")


def with_offloaded_bodies(doc: dict, read: Callable[[str], bytes], source: str = "") -> dict:
    """A Bedrock record with the bodies its log keeps apart (one over 100 KB: ``<side>BodyS3Path``,
    gzipped JSON in its hour's ``data`` folder) read in with ``read`` (a URI's bytes, decompressed):
    from its place in ``source``, a copy of the logs (see :func:`_in_source`), else from the place
    the record names; FormatError ``no_content`` naming one that cannot be read. Only a place in
    Bedrock's own layout is read: a record is data, not a say in what the run opens."""
    if doc.get("errorCode"):
        return doc  # failed: its reader says so, with or without its bodies
    for side in ("input", "output"):
        given = doc.get(side)
        kept = given.get(f"{side}BodyS3Path") if isinstance(given, dict) and given.get(f"{side}BodyJson") is None else None
        if not isinstance(kept, str) or not kept:
            continue
        if not _OFFLOADED.search(kept) or ".." in kept.split("/"):
            raise FormatError("no_content", f"Bedrock request {doc.get('requestId')}: {side}.{side}BodyS3Path={kept[:200]} "
                                            "is not in a data folder of Bedrock's log layout: not read")
        # Bedrock writes to S3 alone: the place named is read only there (not a local file, not a host).
        named = kept if kept.startswith("s3://") else None
        why = "it is not in the source's copy of the logs, and not on S3"
        for place in dict.fromkeys(p for p in (_in_source(kept, source), named) if p):
            try:
                body = msgspec.json.decode(read(place))
                break
            except Exception as e:  # noqa: BLE001 - any store's error, a body too large, or not JSON: named
                why = f"{type(e).__name__}: {str(e)[:300]}"
        else:
            raise FormatError("no_content", f"Bedrock request {doc.get('requestId')}: {side}.{side}BodyS3Path={kept} "
                                            f"cannot be read: {why}")
        doc = {**doc, side: {**given, f"{side}BodyJson": body}}
    return doc


def _in_source(kept: str, source: str) -> str | None:
    """Where the body a Bedrock record names (``kept``) lies in ``source`` when the source holds a copy
    of the logs (another bucket, a local folder): the same path from the layout's root (``AWSLogs/``,
    or ``BedrockModelInvocationLogs/``) on, under the source's own root, or under the source itself."""
    if not source:
        return None
    for root in ("AWSLogs/", "BedrockModelInvocationLogs/"):
        at, here = kept.find("/" + root), source.find(root)
        if at >= 0 and here >= 0 and (here == 0 or source[here - 1] == "/"):
            return source[:here] + kept[at + 1:]
    at = kept.find("/AWSLogs/")
    return source.rstrip("/") + kept[at:] if at >= 0 else None


def _bedrock_latency(response: dict | list) -> float:
    """A Bedrock call's latency in ms: its Converse answer's ``metrics.latencyMs``, or the invocation
    metrics Bedrock adds to a stream's last chunk; 0 where the log gives none (InvokeModel's answer)."""
    metrics = response.get("metrics") if isinstance(response, dict) else None
    if isinstance(metrics, dict) and (latency := _ms(metrics.get("latencyMs"), "metrics.latencyMs")) is not None:
        return latency
    for chunk in reversed(response if isinstance(response, list) else []):
        given = chunk.get("amazon-bedrock-invocationMetrics") if isinstance(chunk, dict) else None
        where = "amazon-bedrock-invocationMetrics.invocationLatency"
        if isinstance(given, dict) and (latency := _ms(given.get("invocationLatency"), where)) is not None:
            return latency
    return 0.0


# The operations of a span that is a model call (or none: older instrumentations name none). An
# agent's span (invoke_agent, create_agent) carries messages too, the whole conversation's or its
# final answer, which the model calls under it already hold; a tool's or an embedding's is no answer.
MODEL_CALLS = ("chat", "text_completion", "generate_content", "llm_request",  # the last OpenLLMetry's LangChain spans' (0.53, 0.54)
               # Semantic Kernel's own names for them (.NET and Python)
               "chat.completions", "chat.streaming_completions", "text.completions", "text.streaming_completions")
# What a span without an operation's name says it is, where its instrumentation predates them
# (OpenLLMetry's ``llm.request.type``): not a model call, when an embedding's or a rerank's.
OTHER_REQUESTS = ("embedding", "rerank")


def _says_model_call(a: dict) -> bool:
    """Whether a span of attributes ``a`` says it is a model call's, whether or not it holds content:
    it names its operation, or the model it asked (as an older OpenLLMetry's span, or Google ADK's,
    does). Such a span without content is ``no_content``, counted, rather than passed over as an HTTP
    span is."""
    return "gen_ai.operation.name" in a or "gen_ai.request.model" in a


def model_call(a: dict) -> bool:
    """Whether a span of attributes ``a`` is a model call's."""
    if "gen_ai.operation.name" in a:
        return a["gen_ai.operation.name"] in MODEL_CALLS
    return a.get("llm.request.type") not in OTHER_REQUESTS


def _otel_value(v: dict) -> Any:
    """An OTLP ``AnyValue`` as a Python value (intValue arrives as a string in OTLP JSON)."""
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        return [_otel_value(x) for x in _objects(_object(v, "arrayValue", ""), "values", "arrayValue.")]
    if "kvlistValue" in v:
        return _attrs(v["kvlistValue"].get("values"))
    return None


def _attrs(items: Any) -> dict[str, Any]:
    """OTLP attributes (``[{"key", "value"}]``) as a dict; items without a string key are passed over."""
    if items is not None and not isinstance(items, list):
        raise FormatError("invalid_field", f"attributes={_excerpt(items)} is not a list")
    out = {}
    for a in items or []:
        if isinstance(a, dict) and isinstance(a.get("key"), str):
            value = a.get("value") or {}
            try:
                out[a["key"]] = _otel_value(value)
            except (TypeError, ValueError, AttributeError, KeyError):
                raise FormatError("invalid_field",
                                  f"attribute {a['key']}: value={_excerpt(value)} is not an OTLP AnyValue") from None
    return out


def _objects(obj: dict, key: str, where: str) -> list[dict]:
    """An optional list of objects: [] when absent or null, FormatError naming it when it is anything else."""
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise FormatError("invalid_field", f"{where}{key}={_excerpt(value)} is not a list of objects")
    return value


# Content blocks that instrumentations give a message's parts as they are: OpenLLMetry's Bedrock (0.57
# on) and LangChain (0.55 on) ones as a text part of the block's JSON, Strands Agents' as a part of the
# block's key for its type and its value for its content. Read as the kinds of part they are:
# Converse's by their one key (a guarded or cited text is its text; a cache point nothing), others' by
# their type (a tool's call or result by the ending of its type, as tool_part tells). A block is told
# by its shape, which a model's JSON answer seldom has, and, as a text part, only beside another text
# part, but those that are never an answer or always a text (``lone``).
_CONVERSE_BLOCKS = {"reasoningContent": ("reasoning", {"reasoningText", "redactedContent"}),
                    "cachePoint": (None, {"type"}), "guardContent": ("text", {"text", "image"}),
                    "citationsContent": ("text", {"content", "citations"}), "toolUse": ("tool_call", {"toolUseId"}),
                    "toolResult": ("tool_call_response", {"toolUseId"}), "searchResult": ("search_result", {"source"}),
                    **{k: (k, {"source", "format"}) for k in ("image", "document", "video", "audio")}}
_MEDIA_SHAPE = {"source", "url", "base64", "file_id", "data", "source_type"}
_TYPED_BLOCKS = {"thinking": {"signature"}, "redacted_thinking": {"data"}, "reasoning_content": {"reasoning_content"},
                 "reasoning": {"reasoning", "summary", "encrypted_content"}, "image": _MEDIA_SHAPE, "audio": _MEDIA_SHAPE,
                 "video": _MEDIA_SHAPE, "file": {"file", *_MEDIA_SHAPE}, "document": {"source"}, "search_result": {"source"},
                 "container_upload": {"file_id"}, "image_url": {"image_url"}, "input_audio": {"input_audio"}}
_TOOL_SHAPE = {"call_id", "tool_use_id", "tool_call_id", "input", "arguments", "args", "action", "server_label", "container_id"}
_LONE = frozenset({"reasoningContent", "cachePoint", "guardContent", "citationsContent", "thinking", "redacted_thinking",
                   "reasoning_content"})


def _block(value: Any, where: str, key: str | None = None) -> tuple[dict, bool] | None:
    """(the part a content block, ``value`` (under ``key``, a Converse block's own), is as its kind of
    part, {} for one that is nothing to read (a cache point); whether it is a block alone too), or
    None for no block; FormatError for a block of a Converse key that is none Converse writes."""
    if key is None and isinstance(value, dict) and len(value) == 1 and next(iter(value)) in _CONVERSE_BLOCKS:
        key, value = next(iter(value)), next(iter(value.values()))
    if key in _CONVERSE_BLOCKS:
        kind, shape = _CONVERSE_BLOCKS[key]
        if not (isinstance(value, dict) and shape & value.keys()):
            return None
        if kind != "text":
            return ({"type": kind, "content": ""} if kind else {}), key in _LONE
        try:
            return {"type": "text", "content": _converse_text([{key: value}], where, False)[0]}, True
        except (TypeError, AttributeError) as e:  # its text not where Converse keeps it
            raise FormatError("invalid_field", f"{where} holds a {key} block of another shape: {_excerpt(value)}") from e
    kind = value.get("type") if isinstance(value, dict) else None
    if isinstance(kind, str) and _TYPED_BLOCKS.get(kind, _TOOL_SHAPE if tool_part(kind) else set()) & value.keys():
        return {"type": "reasoning" if kind in REASONING_PARTS | {"reasoning_content"} else kind, "content": ""}, kind in _LONE
    return None


def text_block(text: str) -> bool:
    """Whether a text part's text may be a content block's JSON (see above): the fast paths leave its
    message to the readers."""
    if not text.startswith("{"):
        return False
    try:
        return _block(_json_of(text), "") is not None
    except ValueError:  # no JSON
        return False
    except FormatError:  # a block the reader refuses
        return True


def _blocks(parts: Any, where: str) -> Any:
    """A message's semconv parts, each part that is a content block (see above) as the kind of part
    it is."""
    if not isinstance(parts, list):
        return parts
    _typed((p.get("type") for p in parts if isinstance(p, dict)), where)
    texts = sum(isinstance(p, dict) and p.get("type") == "text" for p in parts)
    out = []
    for p in parts:
        kind, content = (p.get("type"), p.get("content")) if isinstance(p, dict) else (None, None)
        found = _block(content, where, kind) if kind in _CONVERSE_BLOCKS else None  # Strands Agents'
        if kind == "text" and isinstance(content, str) and content.startswith("{"):
            with suppress(ValueError):
                found = _block(_json_of(content), where)
            found = found if found is not None and (texts > 1 or found[1]) else None
        if found is None:
            out.append(p)
        elif found[0]:
            out.append(found[0])
    return out


def _parts_text(parts: Any, where: str, said: bool = False, joined: str = PART_SEPARATOR) -> str:
    """The text of a message's semconv typed parts, as :func:`_blocks` gives them (with ``said``, of an
    earlier turn, its refusal parts too, as :func:`_text` reads OpenAI's), joined by ``joined``. A
    part of a kind not read as text (an Anthropic ``search_result`` an instrumentation passes on as it
    is) is refused, not passed over, as a medium is; a reasoning part is dropped, a tool's is its
    caller's to refuse."""
    parts = parts or []
    kinds = ("text", "refusal") if said else ("text",)
    texts = [p.get("content", "") for p in parts if isinstance(p, dict) and p.get("type") in kinds
             ] if isinstance(parts, list) else None
    if texts is None or not all(isinstance(t, str) for t in texts):
        raise FormatError("invalid_field", f"message parts={_excerpt(parts)} are not text parts")
    types = [p.get("type") for p in parts if isinstance(p, dict)]
    _media(types, where)
    if other := next((k for k in types if k not in ("text", "refusal") and k not in REASONING_PARTS and not tool_part(k)), None):
        raise FormatError("non_text_content", f"{where} holds a part of type {other}, which is not read as text")
    return joined.join(texts)


def _prompt_parts(m: dict, where: str) -> dict:
    """A prompt's message of semconv's typed parts; FormatError ``tool_call_in_prompt`` for one
    holding a tool call or a tool's result."""
    parts = m.get("parts")
    if not parts:  # as OpenTelemetry's OpenAI instrumentation writes a message whose content was a list
        raise FormatError("no_content", f"{where} has no parts: its content was not recorded")
    parts = _blocks(parts, where)
    kinds = [p.get("type") for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []
    _no_tool_call(next((f"a part of type {k}" for k in kinds if tool_part(k)), None), where)
    role = _role(m.get("role"))
    return {"role": role, "content": _parts_text(parts, where, said=True, joined=turn_joined(role))}


def _system_instructions(a: dict) -> list[dict]:
    """The system prompt, which the current names keep apart from the input messages in
    ``gen_ai.system_instructions`` (JSON parts, as a message's), as the first message: none when
    the attribute is absent, empty or an empty list."""
    text = a.get("gen_ai.system_instructions")
    if not text:
        return []
    parts = _structured(text, "gen_ai.system_instructions")
    if not isinstance(parts, list):
        raise FormatError("invalid_field", f"gen_ai.system_instructions={_excerpt(parts)} is not a list of parts")
    where = "gen_ai.system_instructions"
    return [{"role": "system", "content": _parts_text(_blocks(parts, where), where)}] if parts else []


def _structured(value: Any, name: str) -> Any:
    """A content attribute's value: JSON text, as today's instrumentations write it, or the structured
    AnyValue (arrays and key-value lists) that semconv asks for on spans where it can be recorded.
    A NaN or an infinity in the text is ``non_finite_number``, as a line's is."""
    if isinstance(value, (list, dict)):
        return value
    if not isinstance(value, str):
        raise FormatError("invalid_field", f"{name}={_excerpt(value)} is neither JSON text nor structured messages")

    def refuse(constant: str):
        raise FormatError("non_finite_number", f"{name} holds {constant}, no number JSON has")

    try:
        return _json_of(value, parse_constant=refuse)
    except json.JSONDecodeError as e:
        raise FormatError("invalid_json", f"{name} is not JSON: {e}") from None


def _json_of(text: Any, **options) -> Any:
    """``json.loads(text, **options)``; text nested past what it goes is ``too_deeply_nested``, as a line is."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise FormatError("too_deeply_nested", "JSON text nested deeper than the JSON parser goes") from None


# OpenLLMetry's flattened names: one attribute per field of each message, numbered from 0.
_FLATTENED = re.compile(r"gen_ai\.(prompt|completion)\.(0|[1-9][0-9]*)\.(.+)")


def _otel_messages(a: dict, where: str) -> tuple[list[dict], list[tuple[Any, str | FormatError]]] | None:
    """(input messages, answers) of a GenAI span, from the current or the older attribute names:
    each answer (its choice's index, its text or why it is no text answer) a choice of the model's,
    to be a trace of its own."""
    if "gen_ai.input.messages" in a or "gen_ai.output.messages" in a:
        inputs = _structured(a.get("gen_ai.input.messages") or "[]", "gen_ai.input.messages")
        outputs = _span_finish(_structured(a.get("gen_ai.output.messages") or "[]", "gen_ai.output.messages"), a)
        messages = _system_instructions(a) + [_chat_message(m, f"{where}: gen_ai.input.messages[{i}]")
                                              for i, m in _messages_of(inputs, f"{where}: gen_ai.input.messages")]
        # Each message "represents a single output choice"; one that is no answer stands in its place.
        answers = _answers_of(outputs, f"{where}: output", _message_answer)
        return messages, answers or [(0, "")]
    if "gen_ai.prompt" in a or "gen_ai.completion" in a:  # older: JSON lists of {role, content}
        prompt = _structured(a.get("gen_ai.prompt") or "[]", "gen_ai.prompt")
        completion = _span_finish(_structured(a.get("gen_ai.completion") or "[]", "gen_ai.completion"), a)
        if isinstance(prompt, list) and any(isinstance(m, str) for m in prompt):  # Spring AI 1.0's: texts alone
            raise FormatError("invalid_field", f"{where}: gen_ai.prompt holds texts without their roles (as Spring AI "
                                               "1.0 writes it): which role each has cannot be told")
        messages = [_prompt_message(m, f"{where}: gen_ai.prompt[{i}]") for i, m in _messages_of(prompt, f"{where}: gen_ai.prompt")]
        answers = _answers_of(completion, f"{where}: completion",  # a message per choice, as the current names have them
                              lambda m, at: _answer(m, at, m.get("finish_reason")))
        return messages, answers or [(0, "")]
    return _flattened(a, where)


def _span_finish(outputs: Any, a: dict) -> Any:
    """The output messages ``outputs``, each without a finish reason of its own given the span's of its
    place (``gen_ai.response.finish_reasons``): a producer may leave the message's out (AgentScope's
    Java instrumentation does where it is null), and a choice cut by a content filter is no answer."""
    reasons = a.get("gen_ai.response.finish_reasons")
    if not isinstance(outputs, list) or not isinstance(reasons, list):
        return outputs
    return [m | {"finish_reason": reasons[i]} if isinstance(m, dict) and m.get("finish_reason") is None and i < len(reasons)
            else m for i, m in enumerate(outputs)]


def _flattened(a: dict, where: str) -> tuple[list[dict], list[tuple[Any, str | FormatError]]] | None:
    """The older flattened names, as OpenLLMetry writes them: ``gen_ai.prompt.<i>.role`` and
    ``.content`` per message (or ``.user``, the prompt of a text completion), ``gen_ai.completion.<i>.*``
    per choice (``i`` the choice's index), but for a model's thinking (role ``thinking``, which its
    Anthropic instrumentation puts before the answer). A message without content (an assistant turn
    of tool calls only) has no ``.content``, so messages are the indices present, in order, not a
    count from 0."""
    found: dict[str, dict[int, set[str]]] = {"prompt": {}, "completion": {}}
    for key in a:
        m = _FLATTENED.fullmatch(key)
        if m:
            found[m[1]].setdefault(int(m[2]), set()).add(m[3])
    prompt = sorted(i for i, fields in found["prompt"].items() if fields & {"role", "content", "user"})
    if not prompt:
        return None
    if bedrock_claude(a.get("gen_ai.system"), a.get("gen_ai.request.model")) and any(
            _invoked_content(a.get(f"gen_ai.prompt.{i}.content")) for i in prompt if a.get(f"gen_ai.prompt.{i}.role") != "system"):
        raise FormatError("invalid_field", f"{where}: OpenLLMetry's Bedrock instrumentation (to 0.56) records an "
                                           "InvokeModel call of Claude without its system prompt, and its messages' "
                                           "content as JSON at one index: the prompt served cannot be told")
    batch = [i for i in prompt if "user" in found["prompt"][i]]
    if len(batch) > 1:  # OpenLLMetry's OpenAI instrumentation writes a batch's prompts at their own indices
        raise FormatError("invalid_field", f"{where}: gen_ai.prompt holds {len(batch)} prompts of a text completion "
                                           "(a batch): which prompt each choice answers cannot be told")
    for i in sorted(found["prompt"]):
        _no_tool_call(next((f for f in TOOL_FIELDS if any(k.startswith(f"{f}.") for k in found["prompt"][i])), None),
                      f"{where}: gen_ai.prompt.{i}")
    for at, i in enumerate(prompt):
        _recorded_content(a, i, found["prompt"][i], prompt[at + 1] if at + 1 < len(prompt) else None, where)
    messages = [_flat_message(a, f"gen_ai.prompt.{i}", found["prompt"][i], where) for i in prompt]
    answers = []
    for indices in _flat_choices(a, found["completion"]):
        fields = set().union(*(found["completion"][i] for i in indices))
        # OpenLLMetry's Anthropic instrumentation (to 0.53) wrote the finish reason at index 0 before
        # a thinking block took that index, its Cohere one (to 0.54) on the span alone: the answer's,
        # where it has none of its own.
        finish = next((a[f"gen_ai.completion.{i}.finish_reason"] for i in (*indices, 0)
                       if f"gen_ai.completion.{i}.finish_reason" in a), None)
        if finish is None and isinstance(reasons := a.get("gen_ai.response.finish_reasons"), list) and len(reasons) > len(answers):
            finish = reasons[len(answers)]
        try:
            text = "".join(_flat_content(a.get(f"gen_ai.completion.{i}.content"), f"{where}: gen_ai.completion.{i}.content")
                           for i in indices)
            answer = _text_answer(text, f"{where}: completion {indices[0]}", refusal="refusal" in fields,
                                  tool_call=any(f.startswith(("tool_calls.", "function_call.")) for f in fields), finish=finish)
        except FormatError as e:  # in its place: the other choices are traces all the same
            answer = e
        answers.append((indices[0], answer))
    return messages, answers or [(0, "")]


# Its Bedrock instrumentation (to 0.56) named itself "AWS" (the vendor, "anthropic", before 0.41) beside
# Bedrock's model id (claude-3-5-sonnet-20240620-v1:0); its Anthropic instrumentation names itself
# "Anthropic". Of an InvokeModel call of Claude, it wrote a message's content as its JSON (a JSON
# string, or Anthropic's typed blocks); of a Converse call, as Converse's blocks, and its system prompt.
BEDROCK_SYSTEMS = ("AWS", "anthropic")
BEDROCK_CLAUDE = r"claude-(?:.*-)?v[0-9]+(?::[0-9]+)?"  # whole: claude-3-haiku-20240307-v1:0, claude-v2:1


def bedrock_claude(system: Any, model: Any) -> bool:
    """Whether flattened names of ``gen_ai.system`` and model ``model`` are a Claude call's as OpenLLMetry's
    Bedrock instrumentation wrote them to 0.56."""
    return system in BEDROCK_SYSTEMS and isinstance(model, str) and re.fullmatch(BEDROCK_CLAUDE, model) is not None


def _invoked_content(value: Any) -> bool:
    """Whether a flattened content is an InvokeModel call's, as its Bedrock instrumentation wrote it (see above)."""
    if not isinstance(value, str) or not value.startswith(('"', "[")):
        return False
    try:
        content = _json_of(value)
    except ValueError:  # no JSON, or too deep to be one (FormatError)
        return False
    return isinstance(content, str) or isinstance(content, list) and any(isinstance(b, dict) and "type" in b for b in content)


def _recorded_content(a: dict, i: int, fields: set[str], following: int | None, where: str) -> None:
    """FormatError for a flattened message that has a role and no content (but a system prompt's,
    which may be blank): an instrumentation that did not record it, not an empty turn. An
    assistant's turn whose tool calls were not recorded (Mistral's, Cohere's, Together's, an older
    LlamaIndex's), before a tool's result, is ``tool_call_in_prompt``; OpenLLMetry's Bedrock
    instrumentation (to 0.56) wrote every message's role and the last one's content at index 0."""
    role = a.get(f"gen_ai.prompt.{i}.role")
    if "content" in fields or "role" not in fields or role == "system":
        return
    if role == "assistant" and following is not None and a.get(f"gen_ai.prompt.{following}.role") == "tool":
        raise FormatError("tool_call_in_prompt", f"{where}: gen_ai.prompt.{i} is an assistant's turn without its content, "
                                                 "before a tool's result: its tool calls were not recorded")
    raise FormatError("invalid_field", f"{where}: gen_ai.prompt.{i} (role {role!r}) has no content: it was not recorded, "
                                       "and the prompt served cannot be told")


def _flat_choices(a: dict, found: dict[int, set[str]]) -> list[list[int]]:
    """The flattened completion's indices of each choice, in order: one an index, but that where index 0
    names a role and a later index names none, that index holds a content block of the choice before
    it (OpenLLMetry's Bedrock instrumentation, to 0.56, wrote a Converse answer's blocks so, and an
    Amazon model's, of vendor ``amazon`` or a Nova or Titan model of ``AWS``, with no role at all); a
    model's thinking (role ``thinking``) is none."""
    indices = sorted(i for i, fields in found.items()
                     if fields & {"role", "content"} and a.get(f"gen_ai.completion.{i}.role") != "thinking")
    blocks = "role" in found.get(0, set()) or a.get("gen_ai.system") == "amazon" or (
        a.get("gen_ai.system") == "AWS" and re.match(r"(?:amazon\.)?(?:nova|titan)-", str(a.get("gen_ai.request.model"))))
    choices: list[list[int]] = []
    for i in indices:
        if choices and blocks and "role" not in found[i]:
            choices[-1].append(i)
        else:
            choices.append([i])
    return choices


def _flat_message(a: dict, name: str, fields: set[str], where: str) -> dict:
    """The flattened message ``name`` (``gen_ai.prompt.<i>``) of fields ``fields``."""
    if not fields & {"role", "content"}:  # a text completion's prompt: gen_ai.prompt.<i>.user alone
        if not isinstance(a[f"{name}.user"], (str, list)):  # a prompt of token ids, of which it wrote the first
            raise FormatError("invalid_field", f"{where}: {name}.user={_excerpt(a[f'{name}.user'])} is no text: a "
                                               "prompt of token ids")
        return {"role": "user", "content": _flat_content(a[f"{name}.user"], f"{where}: {name}.user", True)}
    role = _role(a.get(f"{name}.role", "user"))
    return {"role": role, "content": _flat_content(a.get(f"{name}.content"), f"{where}: {name}.content", True, turn_joined(role))}


# A Gemini part that is no text, as the text of its repr, which OpenLLMetry's Gemini instrumentations
# wrote as a text part's text: google-genai's pydantic one (its google-generativeai instrumentation, to
# 0.54), every field of the part named, or Vertex AI's protobuf text (its vertexai one), the whole text
# one message. A function's call or response, or code run, is a tool's call; inline data or a file, media.
_GEMINI_PYDANTIC = re.compile(r"\A\s*\w+=(?=.*\bfunction_call=)(?=.*\bfunction_response=)(?=.*\binline_data=)", re.DOTALL)
_GEMINI_PROTOBUF = re.compile(r"\A\s*(?:role: \"\w+\"\s*)?(?:parts \{\s*)?(\w+) \{.*\}\s*\Z", re.DOTALL)
_GEMINI_TOOL_FIELDS = ("function_call", "function_response", "executable_code", "code_execution_result")
_GEMINI_MEDIA_FIELDS = ("inline_data", "file_data")


def _gemini_repr(text: str) -> str | None:
    """Which of a Gemini part's fields a text that is its repr (see above) holds, "tool" or "media", or None."""
    if _GEMINI_PYDANTIC.match(text):
        filled = {m[1] for m in re.finditer(r"\b(\w+)=[A-Z]\w*\(", text)}
        return "tool" if filled & set(_GEMINI_TOOL_FIELDS) else "media" if filled & set(_GEMINI_MEDIA_FIELDS) else None
    m = _GEMINI_PROTOBUF.match(text)
    field = m[1] if m else None
    return "tool" if field in _GEMINI_TOOL_FIELDS else "media" if field in _GEMINI_MEDIA_FIELDS else None


def _flat_content(value: Any, where: str, said: bool = False, joined: str | None = None) -> str:
    """A flattened message's content: "" when there is none; a list of typed parts, which OpenLLMetry
    writes as JSON text, as the text of its text parts (joined as :func:`_text` joins them, or by ``joined``)."""
    if value is None:
        return ""
    if isinstance(value, list):  # a text completion's prompt: a batch of them is not one trace's
        if len(value) != 1 or not isinstance(value[0], str):
            raise FormatError("invalid_field", f"{where}={_excerpt(value)} is not one text")
        return value[0]
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            parts = _json_of(value)
        except ValueError:
            return value
        # Parts (one of a kind not read is then refused), not an answer that is JSON text
        # ([{"type": "PERSON", "text": "Ada"}], an extraction's).
        if (isinstance(parts, list) and parts and all(isinstance(p, dict) and "type" in p for p in parts)
                and any(_a_part(p["type"]) for p in parts)):
            text = _text(parts, where, said, joined)
            held = _gemini_repr(text)
            if held == "media":
                raise FormatError("non_text_content", f"{where} holds a Gemini part of media, written as its repr")
            if held == "tool":
                _no_tool_call("a Gemini part's function call or response, written as its repr" if said else None, where)
                raise FormatError("no_text_answer", f"{where}: the answer holds a tool's call (a Gemini part's repr)")
            return text
        # A prompt's Converse content blocks, as OpenLLMetry's Bedrock instrumentation writes them
        # ([{"text": ...}], keyed by their kind); its answers it writes as text.
        if (said and isinstance(parts, list) and parts and any("text" in p for p in parts if isinstance(p, dict))
                and all(isinstance(p, dict) and p and p.keys() <= _CONVERSE_KEYS for p in parts)):
            return _converse_text(parts, where, True, joined)[0]
    return str(value)


# semconv v1.26 and v1.27 put the content on span events, each with one attribute of the older name.
CONTENT_EVENTS = {"gen_ai.content.prompt": "gen_ai.prompt", "gen_ai.content.completion": "gen_ai.completion"}


# The Vercel AI SDK's model-call spans (ai.generateText.doGenerate, ai.streamText.doStream, ...) keep
# their content in attributes of its own: the prompt in OpenAI's shape, the answer's text, calls and
# finish reason apart. Its outer spans (ai.generateText) hold the whole run's, and no messages.
VERCEL_PROMPT = "ai.prompt.messages"
_VERCEL_FINISH = {"content-filter": "content_filter", "tool-calls": "tool_calls"}


def _vercel_ai(a: dict, span_id: str) -> dict:
    """A span's attributes with the Vercel AI SDK's content, model and counts under the older GenAI
    names. The answer is its text, or the object it generated as JSON text (generateObject), under
    the names of the SDK's 4.x on or its 3.x (``ai.result.*``); a span that records none
    (``recordOutputs: false``) is left without content."""
    text = next((a[k] for k in ("ai.response.text", "ai.response.object", "ai.result.text", "ai.result.object") if k in a), None)
    calls = next((a[k] for k in ("ai.response.toolCalls", "ai.result.toolCalls") if k in a), None)
    if text is None and calls is None:
        return a
    calls = _stored_json(calls)  # JSON text: any but an empty list is a call
    finish = a.get("ai.response.finishReason", a.get("ai.finishReason"))
    answer = {"role": "assistant", "content": text or "", "tool_calls": calls or None,
              "finish_reason": _VERCEL_FINISH.get(finish, finish)}
    counts = {"gen_ai.usage.input_tokens": ("ai.usage.inputTokens", "ai.usage.promptTokens"),
              "gen_ai.usage.output_tokens": ("ai.usage.outputTokens", "ai.usage.completionTokens")}
    given = {name: a[k] for name, keys in counts.items() for k in keys[::-1] if k in a}  # the newer name wins
    return {"gen_ai.request.model": a.get("ai.model.id"), **given, **a, "gen_ai.prompt": a[VERCEL_PROMPT],
            "gen_ai.completion": [answer]}


# Google ADK's model-call spans (call_llm) keep the request and answer as JSON of its own types: the
# request a Gemini request (config.system_instruction, contents), the answer an LlmResponse (one
# content, its finish reason and usage metadata, or an error), in the Python SDK's snake_case.
ADK_REQUEST, ADK_RESPONSE = "gcp.vertex.agent.llm_request", "gcp.vertex.agent.llm_response"


def _google_adk(a: dict, span_id: str) -> dict:
    """A span's attributes with Google ADK's request and answer under the older GenAI names: read as
    Gemini's bodies are."""
    request, response = (_stored_json(a.get(k)) for k in (ADK_REQUEST, ADK_RESPONSE))
    if not (isinstance(request, dict) and request.get("contents") and isinstance(response, dict) and response):
        return a  # content not recorded (ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS off): no_content, as any such span
    where = f"span {span_id}: {ADK_REQUEST}"
    config = request.get("config") if isinstance(request.get("config"), dict) else {}
    system = config.get("system_instruction")  # a text, texts, a Part, or a Content, as google-genai takes it
    parts = system if isinstance(system, list) else [system] if isinstance(system, str) or (
        isinstance(system, dict) and "parts" not in system) else None
    system = {"parts": [{"text": p} if isinstance(p, str) else p for p in parts]} if parts is not None else system
    contents = request["contents"]
    # ADK leaves a turn's inline media out of what it records: a turn of no parts showed the model something.
    if isinstance(contents, list) and any(isinstance(c, dict) and not c.get("parts") for c in contents):
        raise FormatError("non_text_content", f"{where}: a turn of no parts (ADK records a turn's images and "
                                              "files without them): the question without them is another one")
    prompt = _gemini_request({"system_instruction": system, "contents": contents,
                              "cached_content": config.get("cached_content")}, where)["messages"]
    if response.get("error_code") or response.get("error_message"):
        raise FormatError("failed_request", f"span {span_id}: the call failed ({response.get('error_code')}: "
                                            f"{str(response.get('error_message'))[:300]})")
    usage = response.get("usage_metadata") if isinstance(response.get("usage_metadata"), dict) else {}
    answer = _gemini_response({"candidates": [{"content": response.get("content"), "finishReason": response.get(
        "finish_reason")}], "usageMetadata": {"promptTokenCount": usage.get("prompt_token_count", 0),
                                             "candidatesTokenCount": usage.get("candidates_token_count", 0),
                                             "thoughtsTokenCount": usage.get("thoughts_token_count", 0)}},
                               f"span {span_id}: {ADK_RESPONSE}")
    (choice,) = answer["choices"]
    if choice[_REFUSED]:
        raise choice[_REFUSED]
    counts = {"gen_ai.usage.input_tokens": answer["usage"]["prompt_tokens"],
              "gen_ai.usage.output_tokens": answer["usage"]["completion_tokens"]}
    return {**counts, **a, "gen_ai.prompt": prompt,
            "gen_ai.completion": [{**choice["message"], "finish_reason": choice["finish_reason"]}]}


# OpenInference's LLM spans (Arize Phoenix's, and those of the instrumentations it ships: LlamaIndex,
# DSPy, smolagents, ...) flatten their messages as OpenLLMetry does, under names of its own; a
# message's typed parts are its contents.
OPENINFERENCE_KIND = "openinference.span.kind"
_OPENINFERENCE = re.compile(r"llm\.(input|output)_messages\.(0|[1-9][0-9]*)\.message\.(.+)")
_OPENINFERENCE_PART = re.compile(r"contents\.(0|[1-9][0-9]*)\.message_content\.(type|text)")


def _openinference(a: dict, span_id: str) -> dict:
    """An OpenInference LLM span's attributes with its messages, model and counts under the older
    flattened GenAI names, for :func:`_flattened` to read (its other kinds of span as they are)."""
    if a.get(OPENINFERENCE_KIND) != "LLM":
        return a
    mapped: dict[str, Any] = {}
    parts: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}  # by (our name, its), each part's type and text
    for key, value in a.items():
        if m := _OPENINFERENCE.fullmatch(key):
            name = f"gen_ai.{'prompt' if m[1] == 'input' else 'completion'}.{m[2]}"
            if part := _OPENINFERENCE_PART.fullmatch(m[3]):
                parts.setdefault((name, f"llm.{m[1]}_messages.{m[2]}"), {}).setdefault(int(part[1]), {})[part[2]] = value
            elif m[3] == "role":  # its google-genai instrumentor passes Gemini's own role through
                mapped[f"{name}.role"] = "assistant" if value == "model" else value
            elif m[3] == "content" or m[3].startswith("tool_calls."):
                mapped[f"{name}.{m[3]}"] = value
            elif m[3].startswith("function_call_"):  # the legacy call: function_call_name, _arguments_json
                mapped[f"{name}.function_call.{m[3].removeprefix('function_call_')}"] = value
    for (name, theirs), found in parts.items():
        said = [found[j] for j in sorted(found) if found[j].get("type") not in REASONING_PARTS]  # thinking: no answer
        if other := next((p.get("type", "none") for p in said if p.get("type") != "text"), None):
            raise FormatError("non_text_content", f"span {span_id}: {theirs} holds a part of type {other}, which a "
                                                  "text dataset cannot hold")
        joined = "" if name.startswith("gen_ai.completion") else turn_joined(mapped.get(f"{name}.role"))  # answers as written
        mapped.setdefault(f"{name}.content", joined.join(str(p.get("text", "")) for p in said))
    counts = {"gen_ai.request.model": a.get("llm.model_name"), "gen_ai.usage.input_tokens": a.get("llm.token_count.prompt"),
              "gen_ai.usage.output_tokens": a.get("llm.token_count.completion")}
    return {**{k: v for k, v in counts.items() if v is not None}, **a, **mapped}


# The instrumentations that keep a model call's content under names of their own: the attribute that
# marks their spans, and what maps those names to the older GenAI ones.
_OWN_NAMES = ((VERCEL_PROMPT, _vercel_ai), (ADK_REQUEST, _google_adk), (OPENINFERENCE_KIND, _openinference))
OWN_NAMES = tuple(marker for marker, _ in _OWN_NAMES)  # spans the fast path leaves to this reader


def _with_own_names(a: dict, span_id: str) -> dict:
    """A span's attributes with its instrumentation's own names of its content mapped to the older
    GenAI ones (:data:`_OWN_NAMES`), unless it holds GenAI names of content itself: those win."""
    if any(k.startswith(("gen_ai.prompt", "gen_ai.input.messages")) for k in a):
        return a
    return next((mapped(a, span_id) for marker, mapped in _OWN_NAMES if marker in a), a)


def _with_content_events(span: dict, a: dict) -> dict:
    """A span's attributes with those of its content events, read as if on the span (the span's own win)."""
    found = {}
    for ev in span.get("events") if isinstance(span.get("events"), list) else []:
        name = ev.get("name") if isinstance(ev, dict) else None
        if isinstance(name, str) and name in CONTENT_EVENTS:
            e = _attrs(ev.get("attributes"))
            if CONTENT_EVENTS[name] in e:
                found[CONTENT_EVENTS[name]] = e[CONTENT_EVENTS[name]]
    return {**found, **a} if found else a


@dataclass(frozen=True)
class Held:
    """What a document gives a join rather than a trace. Of an OTLP export: a model call's span that
    holds no content (``kind`` "span": its content may be in log records, which attach to it by its
    trace and span id), or such a log record ("event"). Of a batch's files: a line of its output
    ("response"), which the line of its input with the same ``custom_id`` ("request") attaches to.
    See :func:`join` and :func:`joined`."""

    kind: Literal["span", "event", "response", "request"]
    trace: str  # the trace's id; a batch line's custom_id
    span: str  # the span's id; "" for a batch line
    value: dict | bytes  # the span and its resource's service.version, the log record (or its JSON text), the line
    event: str = ""  # a log record's event name

    @property
    def evaluation(self) -> bool:
        """Whether it is a log record of an evaluation result of a span."""
        return self.event == _EVALUATION and self.names_span

    @property
    def names_span(self) -> bool:
        """Whether it names a span by its trace and span id: a log record may name none (only its
        response's id), and then joins nothing."""
        return self.trace != "" and self.span != ""

    def entry(self, where: tuple[str, int] | None, line: bytes | None = None) -> tuple:
        """As :func:`langfuse_entry` makes a row's: the span by its trace (which places it) and its own
        id, the log record by the span it belongs to, a batch's lines by their custom_id; a span or an
        output line where it was read. The ids are text, which no Langfuse id (pickled, see
        :func:`_pickled`) can equal: a pickle starts with 0x80. JSON text travels as itself (see
        :func:`entry_row`): a log record kept as its text, and a batch's line read from a JSON
        ``line``, which is that line (an OTLP line holds many entries, a batch's line one), unless it
        holds its own text (a log event's message, of a line that holds many)."""
        if self.kind in ("response", "request"):
            trace = key = f"batch {self.trace}"
            value = line if line is not None and not isinstance(self.value, bytes) else self.value
        elif self.kind == "event" and not self.names_span:  # joins none, not even a span of empty ids
            trace = key = "otel:none"
            value = self.value
        else:
            trace, key, value = f"otel {self.trace}", f"otel {self.trace} {self.span}", self.value
        value = value if isinstance(value, bytes) else _pickled(value)
        return self.kind, trace.encode(), key.encode(), value, where if self.kind in RECORD_KINDS else None


# Log records of GenAI content (semconv v1.28 to v1.36: a record per message and per choice, the
# role in the name; from v1.37, one record of the call's attributes) and of evaluation results.
_MESSAGE_EVENT = re.compile(r"gen_ai\.(system|developer|user|assistant|tool)\.message")
_EVALUATION = "gen_ai.evaluation.result"  # an evaluation result's event: on a span, or as a log record
_LOG_EVENTS = ("gen_ai.choice", "gen_ai.client.inference.operation.details", _EVALUATION)


def _held_event(name: Any, trace: Any, span: Any, record: dict | bytes) -> Held | FormatError | None:
    """A log record (or its JSON text) of this event name, trace and span id as held for its span's
    join; None for a record of no GenAI event. One that names no span (only its response's
    id, as semconv allows an evaluation result to) joins none, and is counted so. An evaluation
    result whose score cannot be one is its FormatError, in its place: a record of its own, it is
    quarantined alone, as a Langfuse score row is, and its span's trace is kept without it."""
    if not (isinstance(name, str) and (name in _LOG_EVENTS or _MESSAGE_EVENT.fullmatch(name) is not None)):
        return None
    trace, span = (i if isinstance(i, str) else "" for i in (trace, span))
    if name == _EVALUATION:
        doc = msgspec.json.decode(record) if isinstance(record, bytes) else record
        try:
            _evaluation_score(doc.get("attributes"), f"{trace}:{span}")
        except FormatError as e:
            e.record = doc
            return e
    return Held("event", trace, span, record, name)


class _RecordIds(msgspec.Struct):
    eventName: str | None = None
    traceId: str | None = None
    spanId: str | None = None
    attributes: msgspec.Raw = msgspec.Raw()


class _ScopeLogs(msgspec.Struct):
    logRecords: list[msgspec.Raw] = []


class _ResourceLogs(msgspec.Struct):
    scopeLogs: list[_ScopeLogs] = []


class _LogsExport(msgspec.Struct):
    resourceLogs: list[_ResourceLogs]


_LOGS_EXPORT, _RECORD_IDS = msgspec.json.Decoder(_LogsExport), msgspec.json.Decoder(_RecordIds)


def held_log_records(line: bytes) -> list[Held | FormatError] | None:
    """What :func:`from_otel` makes of a line that is an OTLP export of log records, each record kept
    as its JSON text (an evaluation result that cannot be a score, its FormatError in its place):
    its body (a message, often kilobytes) is not decoded until its span's join,
    and most of an export's records are not a span's content at all. None when the line is read
    otherwise (no such export, a type other than OTLP's, a record named in its attributes, text that
    is not UTF-8): :func:`from_otel` reads it then."""
    try:
        if not line.isascii():
            line.decode()  # the records' text is not checked where it is skipped
        export = _LOGS_EXPORT.decode(line)
        held = []
        for raw in (raw for resource in export.resourceLogs for scope in resource.scopeLogs for raw in scope.logRecords):
            ids = _RECORD_IDS.decode(raw)
            if not ids.eventName and b'"event.name"' in bytes(ids.attributes):
                return None  # named in its attributes, as older SDKs do
            if found := _held_event(ids.eventName, ids.traceId, ids.spanId, bytes(raw)):
                held.append(found)
        return held
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


def _event_name(record: dict) -> Any:
    """A log record's event name: its own, or as older SDKs put it, in its attributes."""
    return record.get("eventName") or _attrs(record.get("attributes")).get("event.name")


def _span_id(span: dict) -> str:
    """A span's id as its traces carry it (a choice's index after it, where it has several), whichever
    way it is read: where it lies, or joined with its log records."""
    return f"{span.get('traceId', '')}:{span.get('spanId', '')}"


def from_otel(doc: dict, hold_spans: bool = False) -> Iterator[dict | FormatError | Held]:
    """One trace per choice of each model call's GenAI span of an OTLP JSON export; other spans (HTTP,
    DB, agents, tools, embeddings, ...) are skipped. A span or a choice that cannot be a trace comes
    as its FormatError, in its place: an export holds thousands of spans (the Collector batches 8,192),
    and one of them answering with a tool call is no reason to lose the others. A model call's span
    that holds no content (with ``hold_spans``, any model call's span whose content can be read), and
    the log records of GenAI events of an export of logs, come as :class:`Held`: their join makes the
    traces."""
    for rs in _objects(doc, "resourceSpans", ""):
        resource = _attrs(_object(rs, "resource", "resourceSpans[].").get("attributes"))
        for ss in _objects(rs, "scopeSpans", "resourceSpans[]."):
            spans = ss.get("spans")
            for i, span in enumerate(spans if isinstance(spans, list) else _objects(ss, "spans", "scopeSpans[].")):
                if not isinstance(span, dict):  # quarantined in its place, as a span that cannot be a trace is
                    error = FormatError("invalid_field", f"scopeSpans[].spans[{i}]={_excerpt(span)} is not an object")
                    error.record = span
                    yield error
                    continue
                span_id = _span_id(span)
                try:
                    with _mapping(f"span {span_id}"):
                        a = _attrs(span.get("attributes"))
                        found = _span_traces(span, span_id, resource, a, _otel_messages)
                        # A model call whose content, if recorded, is in log records; with hold_spans,
                        # one that holds it too, for the evaluation results among them.
                        if found is None or (hold_spans and found):
                            held = {"span": span, "version": resource.get("service.version")}
                            found = [Held("span", span.get("traceId"), span.get("spanId"),
                                          held if found is None else {**held, "traces": found})]
                except FormatError as e:
                    found = [e]
                for trace in found:
                    if isinstance(trace, FormatError):
                        trace.record = span
                    yield trace
    for rl in _objects(doc, "resourceLogs", ""):
        for sl in _objects(rl, "scopeLogs", "resourceLogs[]."):
            for record in _objects(sl, "logRecords", "scopeLogs[]."):
                try:
                    name = _event_name(record)
                except FormatError:  # attributes that are not OTLP's: an application's record, not one of ours
                    continue
                if found := _held_event(name, record.get("traceId"), record.get("spanId"), record):
                    yield found


STRANDS = "strands-agents"  # Strands Agents' gen_ai.system (gen_ai.provider.name, with semconv's latest)
# The spans of Vertex AI's ChatSession.send_message (OpenLLMetry's and OpenLIT's instrumentations),
# which record the message sent and not the chat before it, nor its system instruction.
CHAT_SESSION_SPANS = ("vertexai.send_message", "vertexai.send_message_streaming")


def _span_traces(span: dict, span_id: str, resource: dict, a: dict, content_of) -> list[dict | FormatError] | None:
    """The traces of one span of :func:`from_otel` with attributes ``a`` (none for a span that is not
    a model call), its messages and answers as ``content_of`` finds them; None for a model call
    without them."""
    if not model_call(a):
        return []
    a = _with_own_names(_with_content_events(span, a), span_id)
    content = content_of(a, f"span {span_id}")
    if content is None and not _says_model_call(a):  # any span: HTTP, DB, ...
        return []
    for key in ("traceId", "spanId"):  # a trace is named by both: without, two calls would share a name
        if not isinstance(span.get(key), str) or not span[key]:
            raise FormatError("invalid_field", f"span {span_id}: {key}={span.get(key)!r} is not an id")
    if content is None:  # a model call's without content: in log records, if anywhere
        return None
    messages, answers = content
    if span.get("name") in CHAT_SESSION_SPANS:
        raise FormatError("invalid_field", f"span {span_id} ({span['name']}) records a chat session's new message "
                                           "alone, not the chat before it: the prompt served cannot be told")
    if STRANDS in (a.get("gen_ai.system"), a.get("gen_ai.provider.name")) and not any(
            m.get("role") == "system" for m in messages):
        raise FormatError("invalid_field", f"span {span_id}: Strands Agents keeps an agent's system prompt on its "
                                           "invoke_agent span (gen_ai.agent.system_prompt), not on its model calls': "
                                           "the prompt served cannot be told")
    status = span.get("status") if isinstance(span.get("status"), dict) else {}
    if status.get("code") in (2, "2", "STATUS_CODE_ERROR"):  # a failed call's span: a blank answer is no answer
        said = f"span {span_id}: the call failed (status ERROR: {str(status.get('message') or a.get('error.type'))[:300]})"
        answers = [(i, FormatError("failed_request", said) if isinstance(c, str) and not c.strip() else c)
                   for i, c in answers]
    messages, prefill = _prefill(messages, _AFTER if _prefilling(a) else None)
    answers = [(i, _whole_turn(prefill, c)) for i, c in answers]
    try:
        start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
    except (KeyError, TypeError, ValueError):
        raise FormatError("invalid_field", f"span {span_id}: start/endTimeUnixNano missing or not integers") from None
    model = a.get("gen_ai.response.model") or a.get("gen_ai.request.model") or ""
    prompt_tokens = a.get("gen_ai.usage.input_tokens", a.get("gen_ai.usage.prompt_tokens", 0))
    completion_tokens = a.get("gen_ai.usage.output_tokens", a.get("gen_ai.usage.completion_tokens", 0))
    scores = [_evaluation_score(ev.get("attributes"), span_id) for ev in _objects(span, "events", f"span {span_id}: ")
              if ev.get("name") == _EVALUATION]
    return [completion if isinstance(completion, FormatError) else {
        "trace_id": span_id if len(answers) == 1 else f"{span_id}:{index}",  # ids as OpenAI's choices get them
        "start_time": _iso_nanos(start, f"span {span_id}: startTimeUnixNano"),
        "end_time": _iso_nanos(end, f"span {span_id}: endTimeUnixNano"),
        "model": {"name": model, "version": str(resource.get("service.version") or model)},
        "messages": messages,
        "completion": completion,
        "usage": _usage(prompt_tokens, completion_tokens, _total(prompt_tokens, completion_tokens), len(answers)),
        "feedback": {"thumb": None, "rating": None},
        "latency_ms": (end - start) / 1e6,
        "scores": scores,
    } for index, completion in answers]


def _prefilling(a: dict) -> bool:
    """Whether a span's call is to a model that continues a prompt ending in the assistant's turn (see
    :func:`_continues`): its provider Anthropic (semconv's ``anthropic``, OpenLLMetry's ``Anthropic``), or
    the model that answered (else the one asked for) one that does on any platform."""
    providers = (a.get(k) for k in ("gen_ai.provider.name", "gen_ai.system"))
    model = a.get("gen_ai.response.model") or a.get("gen_ai.request.model")
    return any(isinstance(p, str) and p.lower() == "anthropic" for p in providers) or _model_kind(model) == _AFTER


def _evaluation_score(attributes: Any, span_id: str) -> dict:
    """The score of a ``gen_ai.evaluation.result`` event (a span's, or a log record's) of these
    attributes; FormatError for one that cannot be a score (no name, a value that is not a finite
    number, a label that is not text)."""
    e = _attrs(attributes)
    where = f"span {span_id}: gen_ai.evaluation.result's gen_ai.evaluation"
    name, value, label = (e.get(f"gen_ai.evaluation.{k}") for k in ("name", "score.value", "score.label"))
    if not isinstance(name, str):
        raise FormatError("invalid_field", f"{where}.name={name!r} is not a name")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise FormatError("invalid_field", f"{where}.score.value={value!r} is not a number")
    if label is not None and not isinstance(label, str):
        raise FormatError("invalid_field", f"{where}.score.label={label!r} is not text")
    return {"name": name, "value": _finite(value, f"{where}.score.value"), "label": label, "source": "otel"}


def _epoch(ts: Any, where: str) -> float:
    """Seconds since 1970 of a time as a store exports it (ISO 8601 text, or a Parquet timestamp's
    datetime): one without a zone is UTC, as Langfuse, Helicone and BigQuery keep and export them,
    not the host's local time."""
    try:  # "Z", or " UTC" as BigQuery writes a timestamp in JSON
        at = datetime.fromisoformat(str(ts).replace("Z", "+00:00").replace(" UTC", "+00:00"))
    except ValueError:
        raise FormatError("invalid_field", f"{where}={ts!r} is not an ISO 8601 time") from None
    return (at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)).timestamp()


def _score(row: dict) -> dict:
    """A Langfuse score as ours: numeric and boolean scores keep a value (boolean as 0/1), categorical a label
    (and its category's number, where a score config maps it)."""
    kind = row.get("dataType")
    if kind not in ("NUMERIC", "BOOLEAN", "CATEGORICAL"):
        raise FormatError("invalid_field", f"score {row.get('id')}: dataType={kind!r} is not NUMERIC, BOOLEAN or CATEGORICAL")
    value = _number(row.get("value"))  # a text in Langfuse's CSV export
    numeric = isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)  # Parquet decimals too
    if kind != "CATEGORICAL" and not numeric:
        raise FormatError("invalid_field", f"score {row.get('id')}: value={value!r} is not a number")
    # A categorical score's value is its category's number where a score config is linked (0 without one).
    keep = kind != "CATEGORICAL" or (row.get("configId") and numeric)
    value = _finite(float(value), f"score {row.get('id')}: value") if keep else None
    # Checked here, where the score is its own row: left to the trace's checks, a bad one cost the
    # generation it scores, and the generation's other scores with it.
    name, label = row.get("name"), row.get("stringValue")
    if not isinstance(name, str):
        raise FormatError("invalid_field", f"score {row.get('id')}: name={name!r} is not text")
    if not isinstance(label, (str, type(None))):
        raise FormatError("invalid_field", f"score {row.get('id')}: stringValue={label!r} is not text")
    return {"name": name, "value": value, "label": label, "source": str(row.get("source", "")).lower()}


def _finite(value: Any, where: str) -> Any:
    """``value``, unless it is a float that is NaN or infinite: such a score is no score, and JSON
    itself has no such number (OTLP JSON writes them as strings, Parquet holds them), so the record
    is refused as a line of JSON holding ``NaN`` is."""
    if isinstance(value, float) and not math.isfinite(value):
        raise FormatError("non_finite_number", f"{where} is {value}")
    return value


def _langfuse_messages(value: Any) -> list[dict]:
    if isinstance(value, dict) and "messages" in value:
        value = value["messages"]
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list):
        return [_chat_message(m, f"input[{i}]") for i, m in _messages_of(value, "input")]
    raise FormatError("invalid_field", f"input={_excerpt(value)!r} is neither chat messages nor text")


def _langfuse_answer(value: Any) -> str | FormatError:
    """A generation's output: a text, an answer message (OpenAI's or of semconv's parts), or a list
    of one such message, as Langfuse keeps the output of a span it was sent over OpenTelemetry."""
    if isinstance(value, list):  # a reasoning model's Responses items: its reasoning is no answer
        value = [m for m in value if not (isinstance(m, dict) and m.get("type") in REASONING_PARTS)]
    if isinstance(value, list) and value and all(isinstance(m, dict) and "role" in m for m in value):
        if len(value) > 1:
            raise FormatError("invalid_field", f"output holds {len(value)} messages: which is the answer cannot be told")
        value = value[0]
    if isinstance(value, dict):
        return _message_answer(value, "output")
    return _text(value, "output")


def _stored_json(value: Any) -> Any:
    """A value a store keeps as text (JSON text of what was logged, or a text as it was), as its API
    gives it: JSON where it parses. Langfuse keeps inputs and outputs so (its blob-storage export
    writes them as kept), Helicone its bodies. A text that is not a JSON object, array or text stays
    as it is; one nested past the parser's depth is ``too_deeply_nested``, as a line so deep is."""
    if not isinstance(value, str) or value.lstrip()[:1] not in ('[', '{', '"'):
        return value
    try:  # msgspec first, four times as fast; the standard library where it refuses (NaN, a huge integer)
        parsed = msgspec.json.decode(value)
    except (msgspec.DecodeError, RecursionError):  # msgspec raises RecursionError past its depth
        try:
            parsed = _json_of(value)
        except FormatError:  # too deep for the standard library too: a ValueError, but no text as it is
            raise
        except ValueError:
            return value
    return parsed if isinstance(parsed, (list, dict, str)) else value


def _quoted_count(value: Any) -> Any:
    """A token count as stores on ClickHouse export it (Langfuse's blob-storage export, Helicone's
    API): quoted digits, as ClickHouse writes 64-bit integers in JSON by default."""
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else value


def langfuse_entry(row: dict, where: tuple[str, int] | None = None, line: bytes | None = None) -> tuple | None:
    """What the join keeps of one Langfuse export row (None: nothing), made where the row was read:
    ``(kind, trace, key, value, where)``, the id of the row's trace (which places it, see
    :func:`join`), the id it is found by, and what it brings, all pickled, so that Parquet
    rows keep their types and ids compare by type and value (1 is not "1"). A few bytes, cheaper to
    keep and send than the row. A generation read from a JSON ``line`` brings that line instead,
    which the join's fast path reads with others into columns (see :func:`entry_row`).
    FormatError for a row that is no Langfuse row, or a score that cannot be read."""
    with _mapping("Langfuse row"):
        kind = langfuse_kind(row)
        row = _camel_case(row)
        if kind == "observation":
            if not isinstance(row.get("type"), str):  # a span's, an event's... is no trace; a type of no name, no row
                raise FormatError("invalid_field", f"observation {row.get('id')}: type={row.get('type')!r} is not a name")
            if row["type"] != "GENERATION":
                return None
            for key in ("id", "traceId"):  # what names the trace, and joins its scores: None would join every other None
                if row.get(key) is None:
                    raise FormatError("invalid_field", f"observation {row.get('id')}: {key} is null")
            value = line if line is not None else _pickled(row)
            return "generation", _pickled(row["traceId"]), _pickled((row["traceId"], row["id"])), value, where
        if kind == "score":  # by its trace's and observation's ids (as the generation), or by its trace's alone
            # A free-text comment (TEXT, its value always 0), or an output as a person corrected it
            # (CORRECTION, named "output", which Langfuse's blob export leaves out): no score, no more
            # carried than a comment.
            if row.get("dataType") in ("TEXT", "CORRECTION"):
                return None
            score = _pickled((row.get("id"), _score(row)))
            trace, observation = row["traceId"], row.get("observationId")
            key = _pickled((trace, observation)) if observation else _pickled(trace)
            return "score", _pickled(trace), key, score, None
        if kind == "trace":
            version = row.get("release") or row.get("version")
            trace = _pickled(row["id"])
            return ("version", trace, trace, _pickled(str(version)), None) if version else None
        raise FormatError("wrong_format", "is not a Langfuse observation, score or trace row")


# The entries of a join that are records, each a trace (a Langfuse generation) or a trace per choice
# (a model call's OTLP span, a batch's output line); the others attach to them.
RECORD_KINDS = ("generation", "span", "response")


def join(entries: Iterable[tuple]) -> list[tuple[str, bytes, tuple[str, int] | None, list[bytes], str | None]]:
    """The records among ``entries`` (of :func:`langfuse_entry` and :meth:`Held.entry`, in the order
    their rows were read, whatever the order of the kinds), each as (its kind, its value, where it was
    read, what attaches to it (a generation's scores, its own then its trace's; a span's log records),
    in the order read, its trace's version (the last one read)): :func:`joined` maps one to traces.

    Only what is among ``entries`` joins: the caller passes all of an export's rows of the records'
    traces (a score names the trace of the generation it scores, a trace row its own id, a log
    record its trace and span), so a score that names another trace than its generation's joins nothing."""
    attached: dict[bytes, list[bytes]] = {}
    versions: dict[bytes, bytes] = {}
    records = []
    for kind, trace, key, value, where in entries:
        if kind in RECORD_KINDS:
            records.append((kind, key, trace, value, where))
        elif kind == "version":
            versions[key] = value
        else:
            attached.setdefault(key, []).append(value)
    return [(kind, value, where, attached.get(key, []) + attached.get(trace, []),
             pickle.loads(versions[trace]) if trace in versions else None) for kind, key, trace, value, where in records]


def joined(record: tuple[str, bytes, tuple[str, int] | None, list[bytes], str | None]) -> list[dict | FormatError]:
    """The canonical traces of one record of :func:`join` (a FormatError in the place of one that
    cannot map)."""
    kind, value, _, attached, version = record
    if kind == "response":
        try:
            with _mapping("batch output line"):
                return _batch_traces(entry_row(value), (entry_row(r) for r in dict.fromkeys(attached)))
        except FormatError as e:
            return [e]
    if kind == "span":
        held = pickle.loads(value)
        span, span_id = held["span"], _span_id(held["span"])
        try:
            with _mapping(f"span {span_id}"):
                if "traces" in held:  # read where it lay, held for the evaluation results logged of it
                    return _evaluated(held["traces"], span_id, [entry_row(r) for r in attached])
                return _logged_span_traces(span, span_id, held["version"], [entry_row(r) for r in attached])
        except FormatError as e:
            return [e]
    try:
        with _mapping("Langfuse generation"):
            return [_trace(_camel_case(entry_row(value)), distinct_scores(attached), version)]
    except FormatError as e:
        return [e]


def langfuse_time(row: dict) -> datetime | None:
    """When a Langfuse row happened, where it says so in a time it can be read by: a generation's
    start, a score's or trace's timestamp. A row that maps to no trace or score is quarantined in
    the run of that time, as a record's fault found where it is read (a span's, see
    :func:`record_time`), and in every run that reads it only when it holds no such time."""
    row = _camel_case(row)
    try:
        at = _epoch(row.get("startTime") if langfuse_kind(row) == "observation" else row.get("timestamp"), "")
        return datetime.fromisoformat(_iso(at, ""))
    except FormatError:
        return None


def record_time(record: tuple[str, bytes, tuple[str, int] | None, list[bytes], str | None]) -> datetime | None:
    """When a record of :func:`join` started, where it says so (see :func:`langfuse_time`): a
    Langfuse generation, or an OTLP span; None for a batch's output line, whose time is that of a
    response it may not hold."""
    kind, value = record[0], record[1]
    if kind == "generation":
        return langfuse_time(entry_row(value))
    if kind == "span":
        try:
            return span_time(pickle.loads(value)["span"])
        except (KeyError, TypeError):
            return None
    return None


def span_time(span: Any) -> datetime | None:
    """When an OTLP span started, where it says so in a time it can be read by (see :func:`record_time`)."""
    try:
        return datetime.fromisoformat(_iso_nanos(int(span["startTimeUnixNano"]), ""))
    except (FormatError, KeyError, TypeError, ValueError, OverflowError):  # none, or no number of nanoseconds
        return None


def distinct_scores(attached: list[bytes]) -> list[dict]:
    """A generation's Langfuse scores (``(id, score)`` of :func:`langfuse_entry`), each id once: the
    windows of Langfuse's scheduled exports share their bounds, so a score stamped on one is in two
    files. The last read is kept, in the place of the first (files are read in the order of their
    names, which are the windows' times), as Langfuse's own export overwrites a score edited since."""
    scores: dict[bytes | int, dict] = {}
    for i, value in enumerate(attached):
        sid, score = pickle.loads(value)
        scores[_pickled(sid) if sid is not None else i] = score  # an id of any type, as a row may hold
    return list(scores.values())


def _batch_traces(line: dict, requests: Iterable[dict]) -> list[dict | FormatError]:
    """The traces of a line of a batch's output file (OpenAI's Batch API, vLLM's ``run_batch``: the
    response under ``response.body``), with the lines of its input file that have its custom_id: the
    request under ``body``, which the output does not repeat. FormatError ``failed_request`` for a
    request that failed (an ``error``, a status other than 200), ``no_request`` for an output whose
    request is not among the interval's files, ``ambiguous_request`` for one whose custom_id names
    other requests too (custom_ids are the user's, and may repeat from batch to batch)."""
    where = f"batch request {line['custom_id']}"
    response, error = line.get("response"), line.get("error")
    status = response.get("status_code") if isinstance(response, dict) else None
    if error or status != 200:
        body = response.get("body") if isinstance(response, dict) else None
        error = error or (body.get("error") if isinstance(body, dict) else None) or {}
        message = error.get("message") if isinstance(error, dict) else error
        raise FormatError("failed_request", f"{where} failed (status {status}): {str(message)[:300]}")
    distinct: dict[str, dict] = {}  # the same line read twice is one
    for r in requests:  # read up to a second one: a custom_id a thousand batches reuse costs two, not a thousand
        distinct.setdefault(json.dumps(r, sort_keys=True), r)
        if len(distinct) > 1:
            raise FormatError("ambiguous_request", f"{where}: different requests have its custom_id (custom_ids may "
                                                   "repeat from batch to batch): which was answered cannot be told")
    if not distinct:
        raise FormatError("no_request", f"{where}: no line of the batch's input file has its custom_id among the "
                                        "interval's files")
    (request,) = distinct.values()
    if not _answering_url(request.get("url")):
        raise FormatError("invalid_field", f"{where}: url={_excerpt(request.get('url'))!r} is neither a chat "
                                           "completion nor a response")
    return list(from_openai({"request": _need(request, "body", dict, f"{where}: "),
                             "response": _need(response, "body", dict, f"{where}: response.")}))


def _evaluated(found: list[dict | FormatError], span_id: str, records: list[dict]) -> list[dict | FormatError]:
    """The traces a span that holds its content gave where it lay (see :func:`from_otel`), with the
    evaluation results among its log records as scores after its own, as a span without content gets
    them. Its content is its own: records of content are not read."""
    scores = [_evaluation_score(r.get("attributes"), span_id) for r in records
              if _event_name(r) == _EVALUATION]
    return [t if isinstance(t, FormatError) else {**t, "scores": t["scores"] + scores} for t in found]


def _logged_span_traces(span: dict, span_id: str, version: Any, records: list[dict]) -> list[dict | FormatError]:
    """The traces of a model call's span that holds no content, with the log records of its GenAI
    events: a record per message and per choice (semconv v1.28 to v1.36), or one of the call's
    attributes (``gen_ai.client.inference.operation.details``), and evaluation results. The span's own
    events of messages and choices, each with its JSON in ``gen_ai.event.content`` (Azure AI
    Inference's tracing, Semantic Kernel's), come first, as records would. Records are
    taken in the order of their times: an exporter may write one span's batches to files whose names
    sort in any order (the Collector's S3 exporter names each with a random number)."""
    details, messages, choices, evaluations, providers = {}, [], [], [], set()
    for ev in _objects(span, "events", f"span {span_id}: "):  # as Azure AI Inference's tracing writes them
        name, e = ev.get("name"), _attrs(ev.get("attributes"))
        if name == "gen_ai.client.inference.operation.details":  # as a log record's, but on the span (Strands')
            details.update(e)
        elif isinstance(name, str) and (name == "gen_ai.choice" or _MESSAGE_EVENT.fullmatch(name)) \
                and isinstance(e.get("gen_ai.event.content"), str):
            body = _event_content(e["gen_ai.event.content"], f"span {span_id}: {name}'s gen_ai.event.content")
            choices.append(body) if name == "gen_ai.choice" else messages.append((_MESSAGE_EVENT.fullmatch(name)[1], body))
    for record in _in_time_order(records):
        name = _event_name(record)
        said = _attrs(record.get("attributes"))
        providers |= {said.get("gen_ai.provider.name"), said.get("gen_ai.system")}
        body = _otel_value(record["body"]) if isinstance(record.get("body"), dict) else None
        body = _stored_json(body)  # JSON text, as Semantic Kernel's Python logs an event's body
        body = body if isinstance(body, dict) else {}
        if name == "gen_ai.client.inference.operation.details":
            details.update(said)
        elif name == _EVALUATION:
            evaluations.append({"name": name, "attributes": record.get("attributes")})
        elif name == "gen_ai.choice":
            choices.append(body)
        else:
            messages.append((_MESSAGE_EVENT.fullmatch(name)[1], body))

    def content(a: dict, where: str) -> tuple[list[dict], list[tuple[Any, str | FormatError]]] | None:
        if not _recorded(messages, choices):
            return _otel_messages(a, where)
        prompt = [_prompt_message(body, f"{where}: gen_ai.{role}.message", role) for role, body in messages]
        ordered = sorted(choices, key=lambda b: b.get("index") if isinstance(b.get("index"), int) else 0)
        # Anthropic answers one message (no n), of content blocks: OpenLLMetry logs each block as a
        # choice, its thinking alike with its text.
        blocks = len(ordered) > 1 and any("anthropic" in str(p).lower() for p in providers | {
            a.get("gen_ai.provider.name"), a.get("gen_ai.system")})
        answers = [(body.get("index", 0), FormatError("no_text_answer", f"{where}: choice {body.get('index', 0)} is one "
                                                      "of the content blocks of Anthropic's answer, logged each as a "
                                                      "choice: its thinking cannot be told from its text")
                    if blocks else _answer(_choice_message(body), f"{where}: choice {body.get('index', 0)}",
                                           body.get("finish_reason")))
                   for body in ordered]
        return prompt, answers or [(0, "")]

    a = {**details, **_attrs(span.get("attributes"))}  # the span's own win
    span = {**span, "events": [*_objects(span, "events", f"span {span_id}: "), *evaluations]}
    found = _span_traces(span, span_id, {"service.version": version}, a, content)
    if found is None:
        operation = a.get("gen_ai.operation.name")
        what = f"a {operation} call's span" if operation else \
            f"a span of a call of {a.get('gen_ai.request.model')} (no operation named)"
        raise FormatError("no_content", f"span {span_id}: {what} "
                                        "holds no prompt or answer, nor do log records of its events: instrumentations "
                                        "record them only when asked to (such as "
                                        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT), and some record them "
                                        "elsewhere than the attributes and events read here")
    return found


def _in_time_order(records: list[dict]) -> list[dict]:
    """Log records by ``timeUnixNano`` (or ``observedTimeUnixNano``), in the order read where times
    tie; all in the order read unless each has a time."""
    try:
        times = [int(r.get("timeUnixNano") or 0) or int(r.get("observedTimeUnixNano") or 0) for r in records]
    except (TypeError, ValueError):
        return records
    return records if not all(times) else [r for _, r in sorted(zip(times, records), key=lambda tr: tr[0])]


def _event_content(text: str, where: str) -> dict:
    """The JSON object a span event's ``gen_ai.event.content`` holds: a message, or a choice."""
    try:
        body = _json_of(text)
    except json.JSONDecodeError as e:
        raise FormatError("invalid_json", f"{where} is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise FormatError("invalid_field", f"{where} is not an object: {_excerpt(text)!r}")
    return body


def _choice_message(body: dict) -> dict:
    """A choice's message, with the tool calls OpenLLMetry's events give beside it, not in it; or the
    content google-genai's instrumentation gives in its place."""
    message = body["message"] if isinstance(body.get("message"), dict) else \
        {"content": body["content"]} if "content" in body else {}  # google-genai's: a Gemini Content, no message
    return {**{k: body[k] for k in TOOL_FIELDS if body.get(k)}, **message}


def _recorded(messages: list[tuple[str, dict]], choices: list[dict]) -> bool:
    """Whether the log records of a span's messages and choices hold any content: an instrumentation
    that was not asked to record it still logs an event per message and choice, without it."""
    answers = [c["message"] for c in choices if isinstance(c.get("message"), dict)]
    return (any("content" in body for _, body in messages)
            or any(k in m for m in answers for k in ("content", "refusal", *TOOL_FIELDS)))


def _langfuse_tokens(usage: dict, side: str, types: bool, fallback: Any) -> Any:
    """A generation's ``side`` ("input" or "output") tokens: of its usage details (``types``), the sum of
    every usage type whose name holds ``side``, as Langfuse sums them (it keeps cached and reasoning
    tokens apart from ``input`` and ``output``: ``input_cached_tokens``, ``cache_read_input_tokens``,
    ``output_reasoning_tokens``); of the legacy usage object, ``side`` alone; ``fallback`` where none is
    given. A null (or zero) counts 0; a value that is no count is given back, for the trace's
    validation to name."""
    named = [k for k in usage if side in k] if types else [side] if side in usage else []
    if not named:
        return fallback or 0
    counts = [_finite(usage[k], f"usage {k}") for k in named if usage[k]]  # a NaN in a Parquet row's map
    return next((c for c in counts if type(c) is not int), None) or sum(counts)


def _trace(g: dict, scores: list[dict], version: str | None) -> dict:
    """A Langfuse generation as a canonical trace, given its scores (its own, then its trace's) and
    its trace's version."""
    gid, tid = g.get("id"), g.get("traceId")
    start = _epoch(g.get("startTime"), f"observation {gid}: startTime")
    end = _epoch(g.get("endTime") or g.get("startTime"), f"observation {gid}: endTime")
    given = {key: _stored_json(g.get(key)) for key in ("usageDetails", "usage")}  # JSON text in a CSV export
    details = _object(given, "usageDetails", f"observation {gid}: ")
    usage = {k: _quoted_count(v) for k, v in (details or _object(given, "usage", f"observation {gid}: ")).items()}
    prompt_tokens = _langfuse_tokens(usage, "input", bool(details), g.get("promptTokens", 0))
    completion_tokens = _langfuse_tokens(usage, "output", bool(details), g.get("completionTokens", 0))
    output = _stored_json(g.get("output"))
    if g.get("level") == "ERROR" and (output is None or output == ""):  # the call failed: no answer, as elsewhere
        raise FormatError("failed_request", f"observation {gid}: the call failed (level ERROR"
                                            + (f": {_excerpt(g['statusMessage'], 200)})" if g.get("statusMessage") else ")"))
    completion = _langfuse_answer(output)
    if isinstance(completion, str) and _stored_json(g.get("tool_calls")):  # enriched exports list the calls apart
        completion = _text_answer(completion, f"observation {gid}: output", tool_call=True)
    if isinstance(completion, FormatError):
        raise completion
    model = g.get("model") or g.get("providedModelName") or ""  # the name in Langfuse's observations API v2
    messages, prefill = _prefill(_langfuse_messages(_stored_json(g.get("input"))), _AFTER if _model_kind(model) == _AFTER else None)
    return {
        "trace_id": f"{tid}:{gid}",
        "start_time": _iso(start, f"observation {gid}: startTime"),
        "end_time": _iso(end, f"observation {gid}: endTime"),
        # An export of enriched observations has no trace rows: each row holds its trace's release.
        "model": {"name": model, "version": str(g.get("version") or version or g.get("release") or model)},
        "messages": messages,
        "completion": _whole_turn(prefill, completion),
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,  # null: not counted, as missing
                  "total_tokens": _total(prompt_tokens, completion_tokens) if usage.get("total") is None else usage["total"]},
        "feedback": {"thumb": None, "rating": None},
        "latency_ms": _ms_between(start, end),
        "scores": scores,
    }


def is_line(value: bytes) -> bool:
    """Whether the value of a join's entry (a generation's of :func:`langfuse_entry`, a log record's or
    a batch line's of :meth:`Held.entry`) is the JSON text it was read from: a pickle begins with its
    protocol's byte, 0x80, which never begins JSON text."""
    return value[:1] != b"\x80"


def entry_row(value: bytes) -> dict:
    """A row from the value of a join's entry (see :func:`is_line`): the line, decoded again, or the pickled row."""
    return msgspec.json.decode(value) if is_line(value) else pickle.loads(value)


def log_events(doc: Any) -> list | None:
    """The log events of a CloudWatch Logs subscription's record (``messageType`` ``DATA_MESSAGE``: a
    log group's events, as Firehose delivers them to S3 without its decompression), [] for its
    ``CONTROL_MESSAGE`` (sent once, to check the destination); None for any other document;
    FormatError for a ``DATA_MESSAGE`` whose events are no list (its events were read as none)."""
    if not isinstance(doc, dict) or doc.get("messageType") not in ("DATA_MESSAGE", "CONTROL_MESSAGE") \
            or "logEvents" not in doc:
        return None
    events = doc["logEvents"]
    if doc["messageType"] == "CONTROL_MESSAGE":
        return []
    if not isinstance(events, list):
        raise FormatError("invalid_field",
                          f"CloudWatch Logs DATA_MESSAGE: logEvents={_excerpt(repr(events))} is not a list")
    return events


def _pickled(value: Any) -> bytes:
    """A value as the database keeps it: ids compare by type and value, as dict keys did."""
    return pickle.dumps(value, protocol=5)


def normalize(doc: Any, fmt: Format | Literal["auto"], hold_spans: bool = False) -> list[dict | FormatError]:
    """The canonical traces of one document, with a FormatError in the place of each of its records (an
    OTLP span, a choice) that cannot be one; FormatError when it is not of ``fmt`` (or of any, for
    auto), cannot be read as a whole, or its only record cannot be a trace. ``hold_spans``: see
    :func:`from_otel`."""
    found = detect(doc)
    if fmt == "auto":
        if found is None:
            keys = sorted(doc)[:8] if isinstance(doc, dict) else type(doc).__name__
            raise FormatError("unknown_format", f"matches no known trace format (keys {keys})")
        fmt = found
    elif found != fmt:
        raise FormatError("wrong_format", f"is not a record of the {fmt} format (looks like {found or 'nothing known'})")
    if fmt == "ctpipe":
        return [doc]
    if fmt == "langfuse":
        raise FormatError("needs_join", "Langfuse rows join across files: see join")
    with _mapping(f"{fmt} record"):
        read = {"openai": from_openai, "helicone": from_helicone, "bedrock": from_bedrock, "vertex": from_vertex}.get(fmt)
        records = list(read(doc) if read else from_otel(doc, hold_spans))
    if len(records) == 1 and isinstance(records[0], FormatError):  # the document's only record: its own item
        raise records[0]
    return records
