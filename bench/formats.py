"""Materializer throughput per input format, against our own schema, side by side.

Usage:
    python bench/formats.py [--traces 400000] [--dir /tmp/ctpipe-bench-formats]

Writes the same synthetic conversations (a system prompt, a question asked twice, answered once
rightly and once wrongly with a worked answer ending in "#### <answer>", and the user's verdict:
a judge score, or a thumb where the format has no scores) once per format, as JSONL:

* ctpipe: our schema, one trace a line, with a judge score;
* openai: chat-completions logs, request beside response, with a thumb in the metadata;
* openai-batch: a batch's input and output files, as OpenAI's Batch API and vLLM's run_batch
  write them (requests by custom_id in one, answers in the other), joined by custom_id; no
  feedback;
* otel: OTLP JSON exports of one GenAI span a line (the current gen_ai.input/output.messages
  attributes), with a judge score as an evaluation event;
* otel-batches: the same spans as the OpenTelemetry Collector's file exporter writes its batch
  processor's batches by default, 8,192 spans to an export on one line (some 30 MB each), which
  the process that cuts the file splits into exports of a megabyte;
* otel-logs: the same calls as OpenTelemetry's own instrumentations record them by default: spans
  without content (model, usage, times) and, in a file of their own, log records of the content
  (one per message and per choice, and one of the judge's evaluation), each joined with its span by
  trace and span id; both batched as otel-batches is;
* otel-evaluated: the spans of otel-batches, content and all, with the judge's evaluation as a log
  record in a file of its own (as SDKs write semconv's events) rather than a span event: a run
  meets both, and reads the spans again joined with their records;
* langfuse: an export's three tables, observations (GENERATIONs), scores and traces, in separate
  files, so that every generation is joined across files with its score and its trace's release;
* helicone: requests as Helicone's export tool writes them with their bodies (the OpenAI request and
  response, ClickHouse's times, counts quoted), with the user's feedback as Helicone's feedback score;
* bedrock: Amazon Bedrock's invocation log records of Converse calls; no feedback;
* vertex: rows of Vertex AI's request-response logging table of Gemini calls, as BigQuery exports
  them to newline-delimited JSON (the request and response as JSON text); no feedback.

Then materializes each, in its own process, one after the other (the settings of
``bench/materialize.py``: the regex verifier, feedback and judge weighted), and prints traces/s and the peak RSS of each process
tree, and the ratio of each format's throughput to our schema's. Run it while nothing else loads
the machine.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

from materialize import T0, WORDS, _sample_peak, arguments, run_child, settings_for_bench

FORMATS = ("ctpipe", "openai", "openai-batch", "otel", "otel-batches", "otel-logs", "otel-evaluated", "langfuse",
           "helicone", "bedrock", "vertex")
BATCH = 8192  # spans to an export of otel-batches: the Collector's batch processor's send_batch_size


def generate(root: Path, n: int, seed: int = 0) -> None:
    """``n`` conversations under ``root/<format>/`` in every format."""
    import msgspec

    from ctpipe.columns import micros

    rng = random.Random(seed)
    enc = msgspec.json.Encoder()
    system = " ".join(rng.choices(WORDS, k=70))
    files = {}
    batch: list[bytes] = []  # spans of the next export of otel-batches
    bare: list[bytes] = []  # spans without content of the next export of otel-logs
    records: list[bytes] = []  # log records of the next export of otel-logs
    evaluated: list[bytes] = []  # spans without their evaluation event, of the next export of otel-evaluated
    evaluations: list[bytes] = []  # the evaluations' log records, of the next export of otel-evaluated
    for fmt, names in (("ctpipe", ["traces"]), ("openai", ["logs"]), ("openai-batch", ["input", "output"]),
                       ("otel", ["spans"]), ("otel-batches", ["spans"]),
                       ("otel-logs", ["spans", "logs"]), ("otel-evaluated", ["spans", "logs"]),
                       ("langfuse", ["observations", "scores", "traces"]), ("helicone", ["output"]),
                       ("bedrock", ["logs"]), ("vertex", ["export"])):
        (root / fmt).mkdir(parents=True, exist_ok=True)
        files.update({(fmt, name): open(root / fmt / f"{name}.jsonl", "wb") for name in names})
    for i in range(n):
        if i % 2 == 0:  # each question twice, so that DPO pairs are built too
            a, b = rng.randrange(1000), rng.randrange(1000)
            question = " ".join(rng.choices(WORDS, k=110)) + f" What is {a} plus {b}?"
        right = i % 2 == 0
        answer = " ".join(rng.choices(WORDS, k=190)) + f" #### {a + b if right else a + b + 1}"
        judge = round(rng.uniform(7, 10) if right else rng.uniform(0, 3), 1)
        start = T0 + timedelta(microseconds=int(i * 3_600_000_000 / n))
        end = start + timedelta(milliseconds=900)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        usage = {"prompt_tokens": 210, "completion_tokens": 230, "total_tokens": 440}
        response = {"id": f"chatcmpl-{i:09d}", "object": "chat.completion", "created": int(start.timestamp()),
                    "model": "assistant", "usage": usage, "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]}
        rows = {
            ("ctpipe", "traces"): {
                "trace_id": f"tr-{i:09d}", "start_time": start.isoformat(), "end_time": end.isoformat(),
                "model": {"name": "assistant", "version": "v7"}, "messages": messages, "completion": answer,
                "usage": usage, "feedback": {"thumb": None, "rating": None}, "latency_ms": 900.0,
                "scores": [{"name": "judge", "value": judge, "source": "eval"}]},
            ("openai", "logs"): {
                "request": {"model": "assistant", "messages": messages}, "response": response,
                "metadata": {"model_version": "v7", "thumb": "up" if right else "down"}, "latency_ms": 900.0},
            ("openai-batch", "input"): {"custom_id": f"q-{i:09d}", "method": "POST", "url": "/v1/chat/completions",
                                        "body": {"model": "assistant", "messages": messages}},
            ("openai-batch", "output"): {"id": f"batch_req_{i:09d}", "custom_id": f"q-{i:09d}", "error": None,
                                         "response": {"status_code": 200, "request_id": f"req_{i}", "body": response}},
            ("otel", "spans"): {"resourceSpans": [{
                "resource": {"attributes": [_kv("service.version", "v7")]},
                "scopeSpans": [{"spans": [{
                    "traceId": f"{i:032x}", "spanId": f"{i:016x}", "name": "chat assistant",
                    "startTimeUnixNano": str(micros(start) * 1000), "endTimeUnixNano": str(micros(end) * 1000),
                    "attributes": [
                        _kv("gen_ai.operation.name", "chat"), _kv("gen_ai.request.model", "assistant"),
                        _kv("gen_ai.input.messages", json.dumps([
                            {"role": m["role"], "parts": [{"type": "text", "content": m["content"]}]} for m in messages])),
                        _kv("gen_ai.output.messages", json.dumps([
                            {"role": "assistant", "parts": [{"type": "text", "content": answer}], "finish_reason": "stop"}])),
                        {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "210"}},
                        {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "230"}},
                        # as current instrumentations set it on every span
                        {"key": "gen_ai.response.finish_reasons", "value": {"arrayValue": {"values": [{"stringValue": "stop"}]}}}],
                    "events": [{"name": "gen_ai.evaluation.result", "attributes": [
                        _kv("gen_ai.evaluation.name", "judge"), {"key": "gen_ai.evaluation.score.value",
                                                                 "value": {"doubleValue": judge}}]}]}]}]}]},
            ("langfuse", "observations"): {
                "id": f"g{i}", "traceId": f"t{i}", "type": "GENERATION", "startTime": start.isoformat(),
                "endTime": end.isoformat(), "model": "assistant", "input": messages,
                "output": {"role": "assistant", "content": answer},
                "usageDetails": {"input": 210, "output": 230, "total": 440}},
            ("langfuse", "scores"): {
                "id": f"s{i}", "traceId": f"t{i}", "observationId": f"g{i}", "name": "judge", "value": judge,
                "dataType": "NUMERIC", "source": "EVAL"},
            ("langfuse", "traces"): {"id": f"t{i}", "timestamp": start.isoformat(), "release": "v7"},
            ("helicone", "output"): {
                "response_id": f"r{i}", "response_created_at": f"{end:%Y-%m-%d %H:%M:%S.%f}"[:-3],
                "response_body": response, "response_status": 200, "request_id": f"req-{i:09d}",
                "request_body": {"model": "assistant", "messages": messages},
                "request_created_at": f"{start:%Y-%m-%d %H:%M:%S.%f}"[:-3], "request_user_id": "u", "provider": "OPENAI",
                "delay_ms": 900, "request_model": "assistant", "prompt_tokens": "210", "completion_tokens": "230",
                "total_tokens": "440", "scores": {"helicone-score-feedback": "1" if right else "0"},
                "properties": {}, "model": "assistant", "cost": 0.0001, "storage_location": "s3"},
            ("bedrock", "logs"): {
                "schemaType": "ModelInvocationLog", "schemaVersion": "1.0", "timestamp": f"{start:%Y-%m-%dT%H:%M:%SZ}",
                "accountId": "123456789012", "identity": {"arn": "arn:aws:iam::123456789012:user/u"},
                "region": "us-east-1", "requestId": f"req-{i:09d}", "operation": "Converse", "modelId": "assistant",
                "input": {"inputContentType": "application/json", "inputTokenCount": 210, "inputBodyJson": {
                    "system": [{"text": system}], "messages": [{"role": "user", "content": [{"text": question}]}]}},
                "output": {"outputContentType": "application/json", "outputTokenCount": 230, "outputBodyJson": {
                    "output": {"message": {"role": "assistant", "content": [{"text": answer}]}}, "stopReason": "end_turn",
                    "metrics": {"latencyMs": 900}, "usage": {"inputTokens": 210, "outputTokens": 230, "totalTokens": 440}}}},
            ("vertex", "export"): {
                "logging_time": f"{end:%Y-%m-%d %H:%M:%S.%f} UTC", "request_id": str(5374205265901353984 + i),
                "model": "publishers/google/models/assistant", "model_version": "default", "api_method": "GenerateContent",
                "full_request": json.dumps({"systemInstruction": {"parts": [{"text": system}]},
                                            "contents": [{"role": "user", "parts": [{"text": question}]}]}),
                "full_response": json.dumps({
                    "candidates": [{"content": {"role": "model", "parts": [{"text": answer}]}, "finishReason": "STOP"}],
                    "usageMetadata": {"promptTokenCount": 210, "candidatesTokenCount": 230, "totalTokenCount": 440},
                    "modelVersion": "assistant", "responseId": f"r{i}"}),
                "metadata": json.dumps({"request_latency": 900.0}), "request_payload": [], "response_payload": []},
        }
        for key, row in rows.items():
            files[key].write(enc.encode(row) + b"\n")
        span = rows[("otel", "spans")]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        batch.append(enc.encode(span))
        bare.append(enc.encode({**span, "events": [], "attributes": [
            a for a in span["attributes"] if a["key"] not in ("gen_ai.input.messages", "gen_ai.output.messages")]}))
        logged = _log_records(span, messages, answer, judge)
        records += [enc.encode(r) for r in logged]
        evaluated.append(enc.encode({**span, "events": []}))
        evaluations.append(enc.encode(logged[-1]))
        if len(batch) == BATCH or i == n - 1:
            resource = enc.encode(rows[("otel", "spans")]["resourceSpans"][0]["resource"])
            for (fmt, name), items, signal, scope, key in (
                    (("otel-batches", "spans"), batch, b"resourceSpans", b"scopeSpans", b"spans"),
                    (("otel-logs", "spans"), bare, b"resourceSpans", b"scopeSpans", b"spans"),
                    (("otel-logs", "logs"), records, b"resourceLogs", b"scopeLogs", b"logRecords"),
                    (("otel-evaluated", "spans"), evaluated, b"resourceSpans", b"scopeSpans", b"spans"),
                    (("otel-evaluated", "logs"), evaluations, b"resourceLogs", b"scopeLogs", b"logRecords")):
                files[(fmt, name)].write(b'{"%s":[{"resource":%s,"%s":[{"scope":{"name":"bench"},"%s":[' % (
                    signal, resource, scope, key) + b",".join(items) + b"]}]}]}\n")
                items.clear()
    for f in files.values():
        f.close()


def written(folder: Path, n: int) -> Path:
    """The folder of ``n`` conversations in every format under ``folder``, written first if missing."""
    root, done = folder / f"traces-{n}", folder / f"traces-{n}" / "DONE"
    # or written before a format was added, or by a generator that wrote other data
    if not done.exists() or done.read_text() != _DATA_VERSION or not all((root / fmt).is_dir() for fmt in FORMATS):
        print(f"writing {n} conversations in {len(FORMATS)} formats to {root} ...", flush=True)
        generate(root, n)
        done.write_text(_DATA_VERSION)
    return root


_DATA_VERSION = "2"  # of what generate() writes: 2, spans with their finish reasons


def _kv(key: str, value: str) -> dict:
    return {"key": key, "value": {"stringValue": value}}


def _log_records(span: dict, messages: list[dict], answer: str, judge: float) -> list[dict]:
    """The log records of a call's content and its judge's evaluation, in its span, as
    OpenTelemetry's own instrumentations emit them (semconv v1.28 to v1.36)."""
    def record(name: str, body: dict | None, attributes: list[dict]) -> dict:
        out = {"timeUnixNano": span["endTimeUnixNano"], "eventName": name, "traceId": span["traceId"],
               "spanId": span["spanId"], "attributes": [_kv("gen_ai.system", "openai"), *attributes]}
        if body is not None:
            out["body"] = {"kvlistValue": {"values": [{"key": k, "value": v} for k, v in body.items()]}}
        return out

    choice = {"kvlistValue": {"values": [{"key": "role", "value": {"stringValue": "assistant"}},
                                         {"key": "content", "value": {"stringValue": answer}}]}}
    return [*(record(f"gen_ai.{m['role']}.message", {"content": {"stringValue": m["content"]}}, []) for m in messages),
            record("gen_ai.choice", {"index": {"intValue": "0"}, "finish_reason": {"stringValue": "stop"}, "message": choice}, []),
            record("gen_ai.evaluation.result", None, [_kv("gen_ai.evaluation.name", "judge"), {
                "key": "gen_ai.evaluation.score.value", "value": {"doubleValue": judge}}])]


def child(fmt: str, src: Path, out: Path) -> None:
    print("RESULT " + json.dumps(materialize_format(src, out)))


def materialize_format(src: Path, out: Path) -> dict:
    """One run on ``src`` with the bench's settings: its time, its process tree's peak RSS, its counts."""
    from ctpipe.materialize import materialize

    task, reward, dataset = settings_for_bench()
    stop = threading.Event()
    peak = _sample_peak(stop)
    started = time.perf_counter()
    m = materialize(str(src), str(out), T0, T0 + timedelta(hours=1), task=task, reward=reward, dataset=dataset)
    seconds = time.perf_counter() - started
    stop.set()
    return {"seconds": seconds, "peak_rss_mb": peak[0], "counts": m.counts, "formats": m.source["formats"]}


def main() -> None:
    args = arguments(__doc__, 400_000, "/tmp/ctpipe-bench-formats", list(FORMATS))
    if args.child:
        child(args.child, args.src, args.out)
        return
    root = written(args.dir, args.traces)
    rates = {}
    for fmt in FORMATS:
        r = run_child(__file__, fmt, root / fmt, args.dir / f"out-{fmt}")
        if r["counts"]["traces"] != args.traces:
            sys.exit(f"{fmt}: {r['counts']['traces']} of {args.traces} traces kept: {r['counts']}")
        rates[fmt] = args.traces / r["seconds"]
        print(f"{fmt:14s} {r['seconds']:7.1f} s  {rates[fmt]:8.0f} traces/s  peak RSS {r['peak_rss_mb']:6.0f} MB  "
              f"{r['counts']['dpo_pairs']} DPO pairs, formats {r['formats']}", flush=True)
    print(" ".join(f"ratio_{fmt}_vs_ctpipe={rates[fmt] / rates['ctpipe']:.2f}" for fmt in FORMATS[1:]))


if __name__ == "__main__":
    main()
