"""Materializer throughput against DuckDB and against a no-processing floor, side by side.

Usage:
    python bench/materialize.py [--traces 1000000] [--dir /tmp/ctpipe-bench-materialize]

Writes synthetic chat traces (our schema, about 2.4 KB each: a system prompt, a question, a worked
answer ending in "#### <answer>"; 6% carry PII, 3% are logged twice, 2% again with other case and
punctuation, 1% are malformed, 0.5% quote an evaluation question, 60% have a thumb, 30% a judge
score) as JSONL, once per size, then runs three transforms over the same files, each in its own
process, one after the other:

* ctpipe: ``ctpipe.materialize`` (validate, quarantine, scrub PII, decontaminate, label with the
  regex verifier plus feedback and judge, dedup, GRPO prompts and DPO pairs, zstd Parquet);
* duckdb: the same transform as one SQL script (DuckDB's JSON reader, RE2 regexes, window
  functions for dedup and pairing, zstd Parquet), with its own threads on every core;
* floor: pyarrow's streaming JSON reader straight into a zstd Parquet writer, nothing else.

Prints traces/s, CPU seconds (user and system, workers and threads included) and peak RSS of
each (of its whole process tree, workers included, sampled every 0.1 s), and as its last line:
    ratio_vs_duckdb=<x> ratio_vs_floor=<y> peak_rss_mb=<z>
Run it while nothing else loads the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
WORDS = ("the a of to and in is it that for on with as was by at from this be are or an which have not but all "
         "number total each step first then so we add sum result value twice more less half three four five six "
         "apples trains hours price cost store ratio rate distance speed water tank fill empty minutes").split()
EVAL_ITEM = ("a farmer has seventeen sheep and all but nine run away through a broken fence how many sheep "
             "does the farmer have left at the end of the day")


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, k=n))


def generate(path: Path, n: int, seed: int = 0, system_bytes: int = 0) -> None:
    """``n`` traces in files of 100k lines under ``path``; with ``system_bytes``, a system prompt of
    about that length (numbered rules) instead of the usual 70 words, the rest as without it."""
    import msgspec

    rng = random.Random(seed)
    system = _text(rng, 70)
    if system_bytes:  # its own generator: every other draw stays the same
        rules, more = [], random.Random(seed + 1)
        while sum(map(len, rules)) < system_bytes:
            rules.append(f"Rule {len(rules) + 1}: {_text(more, 8)}. ")
        system = "".join(rules).strip()
    questions = [(_text(rng, 110) + f" What is {a} plus {b}?", str(a + b))
                 for a, b in ((rng.randrange(1000), rng.randrange(1000)) for _ in range(max(1, n // 4)))]
    path.mkdir(parents=True, exist_ok=True)
    enc = msgspec.json.Encoder()
    out, previous, last = None, None, None
    for i in range(n):
        if i % 100_000 == 0:
            if out:
                out.close()
            out = open(path / f"part-{i // 100_000:04d}.jsonl", "wb")
        roll = rng.random()
        if previous is not None and roll < 0.03:  # logged twice
            out.write(previous + b"\n")
            continue
        if last is not None and roll > 0.98:  # the same answer again, other case and punctuation
            rec = dict(last, trace_id=f"tr-{i:09d}", completion=last["completion"].upper().replace(" ", ", ", 1))
            out.write(enc.encode(rec) + b"\n")
            continue
        question, answer = rng.choice(questions)
        if roll < 0.035:
            question = EVAL_ITEM.capitalize() + "? " + question
        elif roll < 0.095:
            question += rng.choice([" mail me at jo.doe@example.com", " call +1 415-555-0100", " card 4111 1111 1111 1111"])
        right = rng.random() < 0.5
        completion = _text(rng, 190) + f" #### {answer if right else int(answer) + rng.randrange(1, 9)}"
        start = T0 + timedelta(microseconds=int(i * 3_600_000_000 / n))
        rec = {
            "trace_id": f"tr-{i:09d}",
            "start_time": start.isoformat(),
            "end_time": (start + timedelta(milliseconds=900)).isoformat(),
            "model": {"name": "assistant", "version": "v7"},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
            "completion": completion,
            "usage": {"prompt_tokens": 210, "completion_tokens": 230, "total_tokens": 440},
            "feedback": {"thumb": ("up" if right else "down") if rng.random() < 0.6 else None, "rating": None},
            "latency_ms": 900.0,
            "reference_answer": answer if rng.random() < 0.8 else None,
            "scores": [{"name": "judge", "value": round(rng.random() * 10, 1), "source": "eval"}] if rng.random() < 0.3 else [],
        }
        line = enc.encode(rec)
        if rng.random() < 0.01:
            line = line[: len(line) // 2]  # cut mid-record, as a crashed writer leaves it
        out.write(line + b"\n")
        previous, last = line, rec
    out.close()


def bench_traces(root: Path, n: int, system_bytes: int = 0) -> Path:
    """The folder of ``n`` traces of :func:`generate` under ``root``, written the first time it is asked for."""
    src = root / (f"traces-{n}" + (f"-system-{system_bytes}" if system_bytes else "")) / "date=2026-11-22"
    if not (src / "DONE").exists():
        print(f"writing {n} traces to {src} ...", flush=True)
        generate(src, n, system_bytes=system_bytes)
        (src / "DONE").write_text("")
    return src


# ------------------------------------------------------------------------------------------ runs


def settings_for_bench():
    from ctpipe.config import DatasetConfig, RewardConfig, TaskConfig

    return (TaskConfig(), RewardConfig(verifier="regex", verifiable_weight=0.6, feedback_weight=0.2, judge_weight=0.2,
                                       judge_range=(0, 10)), DatasetConfig(eval_sets=[]))


def run_ctpipe(src: Path, out: Path) -> dict:
    from ctpipe.materialize import materialize

    task, reward, dataset = settings_for_bench()
    (src.parent / "eval.jsonl").write_text(json.dumps({"prompt": EVAL_ITEM}) + "\n")
    dataset = dataset.model_copy(update={"eval_sets": [str(src.parent / "eval.jsonl")]})
    m = materialize(str(src), str(out), T0, T0 + timedelta(hours=1), task=task, reward=reward, dataset=dataset)
    return {"counts": m.counts, "reasons": m.quarantine_reasons, "scrubbed": m.scrubbed}


def _in_class(inside: bool, c: str) -> bool:
    """Whether a pattern is within a character class after ``c``, when it was before (``inside``); an
    escape (two characters) neither opens nor closes one."""
    return (inside and c != "]") or (not inside and c == "[")


def _re2(rx: str) -> str:
    """A Python pattern as RE2 takes it: without its lookarounds and word boundaries, which RE2 has
    not (the replacement keeps what they look at, so DuckDB scrubs a little more), its possessive
    quantifiers greedy and its ASCII-only groups plain ones, \\Z as $."""
    out, i, in_class = [], 0, False
    while i < len(rx):
        if not in_class and rx.startswith("(?a:", i):
            out.append("(?:")
            i += 4
            continue
        if not in_class and rx[i] == "+" and out and out[-1] in ("+", "*", "}"):  # possessive
            i += 1
            continue
        if rx.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):  # skip to its closing parenthesis
            depth, in_class = 0, False
            while True:
                c = rx[i]
                if c == "\\":
                    i += 2
                    continue
                in_class = _in_class(in_class, c)
                depth += (not in_class) * ((c == "(") - (c == ")"))
                i += 1
                if depth == 0:
                    break
            continue
        out.append(rx[i:i + 2] if rx[i] == "\\" else rx[i])
        in_class = _in_class(in_class, out[-1])
        i += len(out[-1])
    return "".join(out).replace("\\b", "").replace("\\Z", "$")


def _duckdb_sql(src: Path, out: Path, eval_pattern: str) -> str:
    from ctpipe import pii

    q = "'" + "''".join(str(src).split("'")) + "'"

    def scrub(col: str) -> str:  # the same patterns, in the same order, as ctpipe.pii (Luhn not checked)
        expr = col
        for name, rx in (("SECRET", pii._SECRET.pattern), ("EMAIL", pii._EMAIL.pattern), ("CARD", pii._CARD.pattern),
                         ("PHONE", pii._PHONE.pattern)):
            expr = f"regexp_replace({expr}, '{_re2(rx).replace(chr(39), chr(39) * 2)}', '<{name}>', 'g')"
        return expr

    def norm(col: str) -> str:
        return f"trim(regexp_replace(lower({col}), '[[:punct:][:space:]]+', ' ', 'g'))"

    def squash(col: str) -> str:  # dedup.squash: prose's punctuation and spaces out, but a number's separators
        marked = f"lower({col})"
        for separator, mark in (("\\.", "·"), (",", "¸")):
            for _ in range(2):  # a match takes the digit after it: 1.2.3's second point is the second pass's
                marked = f"regexp_replace({marked}, '([0-9]){separator}([0-9])', '\\1{mark}\\2', 'g')"
        ignored = "[.,:;?''\"`[:space:]]"  # the punctuation of prose
        return f"regexp_replace({marked}, '{ignored}', '', 'g')"

    verified = ("CASE WHEN reference_answer IS NULL THEN NULL WHEN lower(trim(regexp_extract(completion, '####\\s*(\\S+)', 1))) "
                "= lower(trim(reference_answer)) THEN 1.0 ELSE 0.0 END")

    return f"""
CREATE TEMP TABLE raw AS SELECT * FROM read_json({q} || '/*.jsonl', format='newline_delimited', ignore_errors=true,
  maximum_object_size=67108864, columns={{trace_id: 'VARCHAR', start_time: 'TIMESTAMPTZ', end_time: 'TIMESTAMPTZ',
  model: 'STRUCT(name VARCHAR, version VARCHAR)', messages: 'STRUCT(role VARCHAR, content VARCHAR)[]',
  completion: 'VARCHAR', usage: 'STRUCT(prompt_tokens BIGINT, completion_tokens BIGINT, total_tokens BIGINT)',
  feedback: 'STRUCT(thumb VARCHAR, rating DOUBLE)', latency_ms: 'DOUBLE', reference_answer: 'VARCHAR',
  scores: 'STRUCT(name VARCHAR, value DOUBLE, label VARCHAR, source VARCHAR)[]'}},
  filename=true);
CREATE TEMP TABLE valid AS
  SELECT row_number() OVER () AS row, * REPLACE (
      list_transform(messages, lambda m: struct_pack(role := m.role, content := {scrub('m.content')})) AS messages,
      {scrub('completion')} AS completion)
  FROM raw
  WHERE trace_id <> '' AND start_time >= TIMESTAMPTZ '{T0.isoformat()}' AND start_time < TIMESTAMPTZ '{(T0 + timedelta(hours=1)).isoformat()}'
    AND end_time >= start_time AND model.name <> '' AND model.version <> '' AND len(messages) > 0
    AND list_bool_or(list_transform(messages, lambda m: m.role = 'user')) AND trim(completion) <> ''
    AND usage.prompt_tokens >= 0 AND latency_ms >= 0 AND isfinite(latency_ms);
CREATE TEMP TABLE keyed AS SELECT *,
    list_filter(messages, lambda m: m.role = 'user')[-1].content AS prompt,
    hash(messages) AS prompt_key, hash(messages, completion) AS exact_key,
    {verified} AS verifiable_reward,
    hash(messages, {squash('completion')}, {verified}) AS norm_key,
    regexp_matches({norm("array_to_string(list_transform(list_filter(messages, lambda m: m.role = 'user'), lambda m: m.content), ' ')")}, '{eval_pattern}') AS contaminated
  FROM valid;
CREATE TEMP TABLE kept AS SELECT * FROM keyed WHERE NOT contaminated
  QUALIFY row_number() OVER (PARTITION BY exact_key ORDER BY row) = 1 AND row_number() OVER (PARTITION BY norm_key ORDER BY row) = 1;
CREATE TEMP TABLE labeled AS SELECT *,
    CASE feedback.thumb WHEN 'up' THEN 1.0 WHEN 'down' THEN 0.0 ELSE (feedback.rating - 1) / 4 END AS feedback_reward,
    list_avg(list_transform(list_filter(scores, lambda s: s.name = 'judge' AND s.value IS NOT NULL), lambda s: least(1.0, greatest(0.0, s.value / 10)))) AS judge_reward
  FROM kept;
CREATE TEMP TABLE final AS SELECT *,
    (coalesce(0.6 * verifiable_reward, 0) + coalesce(0.2 * feedback_reward, 0) + coalesce(0.2 * judge_reward, 0))
      / nullif((CASE WHEN verifiable_reward IS NULL THEN 0 ELSE 0.6 END) + (CASE WHEN feedback_reward IS NULL THEN 0 ELSE 0.2 END)
      + (CASE WHEN judge_reward IS NULL THEN 0 ELSE 0.2 END), 0) AS final_reward
  FROM labeled;
COPY (SELECT trace_id, start_time, end_time, model.name AS model_name, model.version AS model_version, messages, prompt,
             completion, reference_answer, feedback.thumb AS feedback_thumb, feedback.rating AS feedback_rating, scores,
             usage.prompt_tokens, usage.completion_tokens, latency_ms, verifiable_reward, feedback_reward, judge_reward,
             final_reward, filename AS source_file FROM final ORDER BY row)
  TO '{out}/traces.parquet' (FORMAT parquet, COMPRESSION zstd);
COPY (SELECT raw.filename AS source_file, 'invalid or quarantined' AS reason, raw.trace_id FROM raw
      ANTI JOIN final USING (trace_id)) TO '{out}/quarantine.parquet' (FORMAT parquet, COMPRESSION zstd);
COPY (SELECT first(messages ORDER BY row) AS prompt, first(reference_answer ORDER BY row) AS answer FROM final
      WHERE reference_answer IS NOT NULL GROUP BY prompt_key ORDER BY min(row))
  TO '{out}/grpo.parquet' (FORMAT parquet, COMPRESSION zstd);
COPY (WITH ranked AS (
        SELECT *, row_number() OVER w AS best, row_number() OVER (PARTITION BY prompt_key ORDER BY final_reward ASC, trace_id DESC) AS worst,
               count(*) OVER (PARTITION BY prompt_key) AS n
        FROM final WHERE final_reward IS NOT NULL WINDOW w AS (PARTITION BY prompt_key ORDER BY final_reward DESC, trace_id))
      SELECT c.messages AS prompt, [struct_pack(role := 'assistant', content := c.completion)] AS chosen,
             [struct_pack(role := 'assistant', content := r.completion)] AS rejected,
             c.final_reward AS chosen_reward, r.final_reward AS rejected_reward
      FROM ranked c JOIN ranked r ON c.prompt_key = r.prompt_key AND c.best = r.worst
      WHERE c.best <= 2 AND c.best <= c.n // 2 AND c.final_reward - r.final_reward >= 0.5 AND trim(c.completion) <> trim(r.completion))
  TO '{out}/dpo.parquet' (FORMAT parquet, COMPRESSION zstd);
"""


def run_duckdb(src: Path, out: Path) -> dict:
    import re

    import duckdb

    from ctpipe import arith, dedup

    task, _, _ = settings_for_bench()
    items = sorted(arith.splits(task).held_out_prompts()) + [EVAL_ITEM]
    grams = sorted({" ".join(ws[i:i + min(13, len(ws))]) for ws in map(dedup.words, items) for i in range(max(1, len(ws) - 12))})
    pattern = "(^| )(" + "|".join(re.escape(g) for g in grams) + ")( |$)"
    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"SET threads = {os.cpu_count()}; SET preserve_insertion_order = true; SET temp_directory = '{out}/tmp'")
    con.execute(_duckdb_sql(src, out, pattern))
    rows = con.execute(f"SELECT count(*) FROM '{out}/traces.parquet'").fetchone()[0]
    return {"rows": rows}


def well_formed(src: Path, out: Path) -> Path:
    """The floor reads only the well-formed lines: pyarrow's reader cannot skip a broken one."""
    import msgspec

    def parses(line: bytes) -> bool:
        try:
            return isinstance(msgspec.json.decode(line), dict)
        except msgspec.DecodeError:
            return False

    good = out / "good"
    good.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.glob("*.jsonl")):
        with open(path, "rb") as f, open(good / path.name, "wb") as g:
            g.writelines(line for line in f if parses(line))
    return good


def run_floor(good: Path, out: Path) -> dict:
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    rows = 0
    writer = None
    for path in sorted(good.glob("*.jsonl")):
        reader = pj.open_json(path, read_options=pj.ReadOptions(block_size=16 << 20))
        for batch in reader:
            if writer is None:
                writer = pq.ParquetWriter(out / "traces.parquet", batch.schema, compression="zstd")
            writer.write_batch(batch)
            rows += batch.num_rows
    writer.close()
    return {"rows": rows}


def _tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants, now (from /proc)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += _status_kb(p, "VmRSS")
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, StopIteration):
            pass
    return total / 1024


def _own_peak_mb() -> float:
    """This process's own peak RSS since it started its program (VmHWM). Not ru_maxrss: Linux carries
    that over from the process it was forked from, so a bench that had just written 6 GB of traces
    reported its 3.1 GB as the peak of every run it started."""
    return _status_kb("self", "VmHWM") / 1024


def _status_kb(pid: int | str, key: str) -> int:
    """A figure, in kB, of /proc/<pid>/status."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def _sample_peak(stop) -> list[float]:
    """Peak of the whole process tree's RSS, sampled every 0.1 s (ru_maxrss of spawned children also
    counts the parent's pages at the moment it forked them, so it overstates a pool's memory)."""
    import threading

    peak = [0.0]

    def run():
        while not stop.is_set():
            peak[0] = max(peak[0], _tree_rss_mb(os.getpid()))
            stop.wait(0.1)

    threading.Thread(target=run, daemon=True).start()
    return peak


def _cpu_seconds() -> float:
    """User and system time of this process, its threads and its finished children (the workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def child(kind: str, src: Path, out: Path) -> None:
    import threading

    stop = threading.Event()
    peak = _sample_peak(stop)
    if kind == "floor":  # the floor's line filter is not part of what it measures
        good = well_formed(src, out)
        started, cpu = time.perf_counter(), _cpu_seconds()
        result = run_floor(good, out)
    else:
        started, cpu = time.perf_counter(), _cpu_seconds()
        result = {"ctpipe": run_ctpipe, "duckdb": run_duckdb}[kind](src, out)
    result["seconds"] = time.perf_counter() - started
    result["cpu_s"] = round(_cpu_seconds() - cpu, 1)
    stop.set()
    result["peak_rss_mb"] = max(peak[0], _own_peak_mb())
    print("RESULT " + json.dumps(result, default=str))


def arguments(doc: str, traces: int, folder: str, kinds: list[str], **options: int) -> argparse.Namespace:
    """A bench's command line: the size and folder, a whole number for each of ``options`` (its
    default; the bench's docstring says what it means), and how it calls itself to run one of ``kinds``."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--traces", type=int, default=traces)
    p.add_argument("--dir", type=Path, default=Path(folder))
    for name, default in options.items():
        p.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    p.add_argument("--child", choices=kinds, help=argparse.SUPPRESS)
    p.add_argument("--src", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    return p.parse_args()


def run_child(script: str, kind: str, src: Path, out: Path, *options: str) -> dict:
    """``script --child kind`` (and ``options``) in a process of its own, on an empty ``out``: the
    result it printed."""
    subprocess.run(["rm", "-rf", str(out)], check=True)
    done = subprocess.run([sys.executable, script, "--child", kind, "--src", str(src), "--out", str(out), *options],
                          capture_output=True, text=True)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"{kind} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(line[7:])


def main() -> None:
    args = arguments(__doc__, 1_000_000, "/tmp/ctpipe-bench-materialize", ["ctpipe", "duckdb", "floor"])
    if args.child:
        child(args.child, args.src, args.out)
        return
    src = bench_traces(args.dir, args.traces)
    size = sum(f.stat().st_size for f in src.glob("*.jsonl"))
    print(f"input: {args.traces} traces, {size / 1e9:.2f} GB, {size / args.traces:.0f} bytes each", flush=True)
    results = {}
    for kind in ("ctpipe", "duckdb", "floor"):
        results[kind] = r = run_child(__file__, kind, src, args.dir / f"out-{kind}")
        r["rate"] = args.traces / r["seconds"]
        print(f"{kind:7s} {r['seconds']:7.1f} s  {r['rate']:9.0f} traces/s  {r['cpu_s']:6.1f} CPU s  "
              f"peak RSS {r['peak_rss_mb']:7.0f} MB  "
              f"{ {k: v for k, v in r.items() if k not in ('seconds', 'rate', 'cpu_s', 'peak_rss_mb')} }", flush=True)
    ours = results["ctpipe"]
    print(f"ratio_vs_duckdb={ours['rate'] / results['duckdb']['rate']:.2f} "
          f"ratio_vs_floor={ours['rate'] / results['floor']['rate']:.2f} peak_rss_mb={ours['peak_rss_mb']:.0f}")


if __name__ == "__main__":
    main()
