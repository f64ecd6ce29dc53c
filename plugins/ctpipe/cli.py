"""``ctpipe``: run the continuous-training loop on this machine, or parts of it.

    ctpipe cycle [--cycles N]        one (or N) full cycles through Airflow; leaves Airflow and Ray up
    ctpipe up                        start Airflow (UI) and the local Ray head
    ctpipe down                      stop them and local serving (this installation's Ray head only)
    ctpipe build-base                build (or find) the cached base model
    ctpipe materialize --start T --end T [--source URI] [--out URI] [--format auto] [--every 1h] [--json]
                                     build the dataset version of an interval (or of each --every slice of it,
                                     a backfill) without Airflow, and print its counts
    ctpipe prune [--out URI] [--older-than 30d] [--superseded-after 1d] [--dry-run] [--json]
                                     remove the dataset versions past their age (default: dataset.keep_for,
                                     dataset.keep_superseded_for), but the one LATEST names
    ctpipe k8s render --algorithm grpo|dpo --scheduler volcano|kueue|none [--trainer trl|nemo_rl] [--capacity karpenter|gke]
                                     print the RayJob a training run becomes on Kubernetes
    ctpipe k8s serving --champion V [--canary V --weight W] [--kserve]
                                     print the vLLM serving objects of a (canary) rollout
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import sys
from collections import Counter
from datetime import datetime, timedelta
from pathlib import PurePosixPath
from typing import get_args

from pydantic import ValidationError

from ctpipe.errors import Terminated, interrupted, sigterm_interrupts


def _settings():
    from ctpipe.config import Settings

    return Settings()


def _aware(text: str) -> datetime:
    from ctpipe.pipeline import aware_time

    try:
        return aware_time(text)
    except ValueError as e:  # argparse would say only "invalid _aware value"
        raise argparse.ArgumentTypeError(str(e)) from None


def cmd_cycle(args) -> int:
    from ctpipe.cycle import format_summary, run_cycle

    s = _settings()
    for _ in range(args.cycles):
        print(format_summary(run_cycle(s, timeout_s=args.timeout)), flush=True)
    return 0


def cmd_up(args) -> int:
    from ctpipe import raycluster
    from ctpipe.airflow_local import LocalAirflow

    s = _settings()
    af = LocalAirflow(s)
    af.start()
    try:
        print(f"Ray dashboard {raycluster.ensure_local_head(s)}")
    except BaseException:  # not half up: the Airflow just started goes too
        af.stop()
        raise
    af.wait_ready()
    print(f"Airflow UI {af.url} (user admin, password in {af.client.password_file})")
    return 0


def cmd_down(args) -> int:
    from ctpipe import raycluster
    from ctpipe.airflow_local import LocalAirflow

    from ctpipe.canary.local import LocalServing

    s = _settings()
    print("Airflow stopped" if LocalAirflow(s).stop() else "Airflow was not running")
    LocalServing(s).stop_all()
    print("local serving stopped")
    if s.ray_address is None:
        print("Ray stopped" if raycluster.stop_local_head(s) else "Ray was not running")
    return 0


def cmd_build_base(args) -> int:
    from ctpipe.tinymodel import ensure_base_model

    s = _settings()
    path = ensure_base_model(s.base_model, s.task, s.models_dir)
    print(path)
    print((path / "build.json").read_text())
    return 0


def _duration(text: str) -> timedelta:
    units = {"m": "minutes", "h": "hours", "d": "days"}
    try:
        value = timedelta(**{units[text[-1]]: float(text[:-1])})
    except (KeyError, ValueError, IndexError, OverflowError):  # "", "1s", "xh", "infh", "1e20d"
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30m, 1h or 1d") from None
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"{text!r} is not positive")
    return value


def cmd_materialize(args) -> int:
    from ctpipe.materialize import NoTraces, late_lines, materialize, misplaced_lines, some_files, unjoined_lines
    from ctpipe.pipeline import unfinished

    s = _settings()
    # The same clock decides and reads: no skew. A lag: the DAG waits it out, and so must this.
    if why := unfinished(args.end, s.dataset.arrival_lag, skew=timedelta(0)):
        print(f"ctpipe materialize: --end {why}", file=sys.stderr)
        return 2
    dataset = s.dataset.model_copy(update={"format": args.format}) if args.format else s.dataset
    source, out = args.source or s.trace_source or str(s.traces_dir), args.out or s.datasets_uri  # as the DAG reads
    step = args.every or (args.end - args.start)
    start = args.start
    total: Counter = Counter()  # a backfill's, said at its end: the intervals' own scroll past by thousands
    reasons: Counter = Counter()

    def totals(until: datetime, least: int = 1) -> None:  # of the intervals done, where a backfill ends or stops
        if total["intervals"] < least or args.json:
            return
        print(f"backfill [{args.start.isoformat()}, {until.isoformat()}) by {step}: {total['intervals']} intervals, "
              f"{total['built']} built, {total['found']} found built before, {total['empty']} with no trace\n"
              f"  traces in {total['traces_in']} = {total['traces']} rows + {total['quarantined']} quarantined "
              f"{json.dumps(dict(reasons.most_common()))}; {total['grpo_prompts']} GRPO prompts, {total['dpo_pairs']} DPO pairs")

    while start < args.end:
        try:
            end = min(start + step, args.end)
        except OverflowError:  # a slice past year 9999 ends where the interval does
            end = args.end
        # Where a backfill stopped, and what it left, if it stops in this interval.
        at = f"[{start.isoformat()}, {end.isoformat()})"
        left = f"; [{end.isoformat()}, {args.end.isoformat()}) not built" if end < args.end else ""
        try:
            m = materialize(source, out, start, end, task=s.task, reward=s.reward, dataset=dataset)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (main says which)
            if args.every:
                print(f"ctpipe materialize: {at} stopped{left}. The same command builds what is left: the "
                      "versions built come back at once", file=sys.stderr)
                totals(start)
            raise
        except Exception as e:  # noqa: BLE001 - a backfill's said with the interval it stopped at, and what is left
            said = f"{type(e).__name__}: {e}"
            if args.json:  # a script reads the failure where it reads the versions, one interval or many
                print(json.dumps({"start": start.isoformat(), "end": end.isoformat(), "error": said}), flush=True)
            if not args.every or logging.getLogger().isEnabledFor(logging.DEBUG):
                raise
            print(f"ctpipe materialize: {at} failed: {said}{left}. The same "
                  "command builds what is left once the cause is mended: the versions built come back at once",
                  file=sys.stderr)
            totals(start)
            return 1
        empty = isinstance(m, NoTraces)
        total.update(intervals=1, **{"empty" if empty else "found" if m.found else "built": 1},
                     **({} if empty else {k: m.counts.get(k, 0) for k in _TOTALLED}))
        reasons.update({} if empty else m.quarantine_reasons)
        if args.json:  # one object per interval, for scripts
            print(json.dumps({"start": start.isoformat(), "end": end.isoformat(),
                              **({"version": None, **{k: v for k, v in dataclasses.asdict(m).items() if k != "interval"}}
                                 if empty else {
                                  **m.asset_extra(), "found": m.found, "scrubbed": m.scrubbed, "quarantine_reasons": m.quarantine_reasons,
                                  "unrecognized_files": m.source.get("unrecognized_files", {}),
                                  "skipped_files": m.source.get("skipped_files", {}),
                                  "misplaced": m.source.get("misplaced", {}), "late": m.source.get("late", []),
                                  "unjoined": m.source.get("unjoined", {})})}))
        elif empty:
            print("\n  ".join(m.lines(dataset)))
        else:
            c = m.counts
            found = " (found: built before from these very files)" if m.found else ""
            print(f"{start.isoformat()} .. {end.isoformat()}: version {m.version}{found}\n"
                  f"  traces in {c['traces_in']} = {c['traces']} rows + {c['quarantined']} quarantined "
                  f"{json.dumps(m.quarantine_reasons)}; {c.get('outside_interval', 0)} records of other times\n"
                  f"  {c['grpo_prompts']} GRPO prompts, {c['dpo_pairs']} DPO pairs; reward {json.dumps(m.reward_stats)}\n"
                  f"  PII scrubbed {json.dumps(m.scrubbed)}; formats {json.dumps(m.source.get('formats', {}))}\n"
                  + "".join(f"  {line}\n" for line in some_files(m.source.get("unrecognized_files", {}),
                                                                  "{}: no trace in a known format, {} items quarantined",
                                                                  "so (--json lists them all)"))
                  + "".join(f"  {line}\n" for line in some_files(m.source.get("skipped_files", {}), "{}: not read: {}",
                                                                  "not read (--json lists them all)"))
                  + "".join(f"  {line}\n" for line in misplaced_lines(m.source.get("misplaced", {}), dataset)
                            + unjoined_lines(m.source.get("unjoined", {})) + late_lines(m.source.get("late", [])))
                  + f"  {m.uri}")
        start = end
    totals(args.end, least=2)  # one interval's own summary says it all
    return 0


_TOTALLED = ("traces_in", "traces", "quarantined", "grpo_prompts", "dpo_pairs")


def cmd_prune(args) -> int:
    from ctpipe.errors import NothingToPublish
    from ctpipe.pipeline import prune_datasets

    s = _settings()
    if args.out:
        s = s.model_copy(update={"dataset_store": args.out})
    try:
        done = prune_datasets(s, args.older_than, args.superseded_after, dry_run=args.dry_run)
    except NothingToPublish as e:
        print(f"ctpipe prune: {e}: give --older-than or --superseded-after", file=sys.stderr)
        return 2
    print(json.dumps(dataclasses.asdict(done)) if args.json else "\n".join(done.lines()))
    return 1 if done.failed else 0


def cmd_k8s_render(args) -> int:
    import yaml

    from ctpipe.jobspec import JobSpec
    from ctpipe.k8s import rayjob, schema
    from ctpipe.pipeline import run_dir_for

    s = _settings()
    k = s.kubernetes.model_copy(update={"scheduler": args.scheduler, "capacity": args.capacity or s.kubernetes.capacity})
    # GRPO defaults to NeMo-RL on a cluster; DPO always runs TRL.
    trainer = args.trainer or ("nemo_rl" if args.algorithm == "grpo" else "trl")
    run_id = args.run_id
    pods = s.model_copy(update={"home": PurePosixPath(k.home_mount)})  # the folders as the cluster's pods see them
    store = s.dataset_store or str(pods.datasets_dir)
    spec = JobSpec(
        algorithm=args.algorithm,
        base_checkpoint=str(pods.models_dir / "registry" / s.model_name / "champion"),  # resolved by the DAG
        base_version="champion",
        dataset_uri=f"{store.rstrip('/')}/{args.dataset_version}",
        dataset_version=args.dataset_version,
        run_dir=str(run_dir_for(pods, run_id)),
        max_steps=s.train.max_steps,
        learning_rate=s.train.rate_for(args.algorithm),
        seed=s.train.seed,
        train=s.train.model_copy(update={"grpo_trainer": trainer}),
    )
    labels = {"ctpipe.io/dag-id": "train", "ctpipe.io/task-id": "train", "ctpipe.io/run-id": run_id, "ctpipe.io/try-number": "1"}
    job = rayjob.render(spec, k, name=rayjob.job_name("train", "train", run_id, 1), labels=labels)
    schema.validate(job)
    header = (
        f"# RayJob for a {args.algorithm} run with {trainer} ({args.scheduler} gang scheduling), as the train DAG\n"
        f"# creates it; checked against the KubeRay CRD schema. Settings: CTPIPE_KUBERNETES__* (ctpipe/config.py).\n"
        f"# The job reads {spec.run_dir}/job.json, which the train DAG writes on the shared volume.\n"
    )
    print(header + yaml.safe_dump(job, sort_keys=False), end="")
    return 0


def cmd_k8s_serving(args) -> int:
    import yaml

    from ctpipe.k8s import schema, serving

    s = _settings()
    if args.kserve:
        version, percent = (args.canary, args.weight) if args.canary else (args.champion, None)
        objects = [serving.inference_service(s.kubernetes, s.serving, s.model_name, version, percent)]
    else:
        objects = serving.manifests(s.kubernetes, s.serving, s.model_name, args.champion, args.canary, args.weight)
    for obj in objects:
        if "." in obj["apiVersion"].split("/")[0]:  # custom resources; built-in kinds are checked by the tests
            schema.validate(obj)
    split = f", canary v{args.canary} at {args.weight}%" if args.canary else ""
    print(
        f"# vLLM serving for {s.model_name}: champion v{args.champion}{split}. Settings: CTPIPE_SERVING__*,\n"
        f"# CTPIPE_KUBERNETES__* (ctpipe/config.py). Each version's checkpoint must be on the shared volume at\n"
        f"# {serving.model_dir(s.kubernetes, s.serving, s.model_name, '<version>')}.\n"
        + "---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects),
        end="",
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    from ctpipe.config import DatasetConfig  # the formats a run may be told, from their one place

    parser = argparse.ArgumentParser(prog="ctpipe", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("cycle", help="run full continuous-training cycles through Airflow")
    p.add_argument("--cycles", type=int, default=1)
    p.add_argument("--timeout", type=float, default=1800, help="seconds to wait for each DAG run")
    p.set_defaults(fn=cmd_cycle)
    sub.add_parser("up", help="start Airflow and Ray").set_defaults(fn=cmd_up)
    sub.add_parser("down", help="stop Airflow and Ray").set_defaults(fn=cmd_down)
    sub.add_parser("build-base", help="build the base model").set_defaults(fn=cmd_build_base)
    p = sub.add_parser("materialize", help="build a dataset version without Airflow")
    p.add_argument("--start", type=_aware, required=True, help="a time with its zone (2026-11-22T10:00:00Z); the "
                   "interval is [start, end)")
    p.add_argument("--end", type=_aware, required=True, help="a time with its zone, passed (and the arrival lag after it)")
    p.add_argument("--source", help="traces: a path or fsspec URI (default: trace_source, else the local trace store)")
    p.add_argument("--out", help="where versions are published (default: dataset_store, else the local dataset store)")
    p.add_argument("--format", choices=get_args(DatasetConfig.model_fields["format"].annotation), help="default: dataset.format")
    p.add_argument("--every", type=_duration, help="one version per slice of this length (30m, 1h, 1d): a backfill")
    p.add_argument("--json", action="store_true", help="print one JSON object per interval")
    p.set_defaults(fn=cmd_materialize, error=p.error)  # the checks after parsing print its usage, as argparse's do
    p = sub.add_parser("prune", help="remove the dataset versions past their age")
    p.add_argument("--out", help="the dataset store (default: dataset_store, else the local dataset store)")
    p.add_argument("--older-than", type=_duration, help="remove the versions of intervals that ended longer ago "
                   "than this (30m, 1h, 30d; default: dataset.keep_for)")
    p.add_argument("--superseded-after", type=_duration, help="remove the versions of an interval other than its "
                   "current one, once that one has been current this long (default: dataset.keep_superseded_for)")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, and remove nothing")
    p.add_argument("--json", action="store_true", help="print what was removed as one JSON object")
    p.set_defaults(fn=cmd_prune, error=p.error)
    k8s = sub.add_parser("k8s", help="Kubernetes manifests").add_subparsers(dest="k8s_command", required=True)
    p = k8s.add_parser("render", help="print the RayJob a training run becomes")
    p.add_argument("--algorithm", choices=["grpo", "dpo"], required=True)
    p.add_argument("--scheduler", choices=["volcano", "kueue", "none"], required=True)
    p.add_argument("--trainer", choices=["trl", "nemo_rl"], default=None, help="GRPO only; default nemo_rl")
    p.add_argument("--capacity", choices=["karpenter", "gke"], default=None,
                   help="how spot nodes are labelled; default CTPIPE_KUBERNETES__CAPACITY (karpenter)")
    p.add_argument("--run-id", default="manual__example", help="the DAG run the job belongs to")
    p.add_argument("--dataset-version", default="latest")
    p.set_defaults(fn=cmd_k8s_render)
    p = k8s.add_parser("serving", help="print the vLLM Deployments, weighted HTTPRoute and ServiceMonitor of a rollout")
    p.add_argument("--champion", required=True, help="registered version serving the rest of the traffic")
    p.add_argument("--canary", default=None, help="registered version under canary")
    p.add_argument("--weight", type=int, default=0, help="percent of traffic to the canary (0..100)")
    p.add_argument("--kserve", action="store_true",
                   help="a KServe InferenceService (canaryTrafficPercent) instead of Deployments and an HTTPRoute")
    p.set_defaults(fn=cmd_k8s_serving)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = _parser()
        args = parser.parse_args(argv)
    except BaseException as e:  # Ctrl-C in what the flags and their checks import
        if not interrupted(e):
            raise
        print("ctpipe: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    if args.command == "materialize":
        if args.end <= args.start:
            args.error(f"--end {args.end.isoformat()} is not after --start {args.start.isoformat()}")
    for flag in ("source", "out"):  # not the configured store in its place
        if getattr(args, flag, None) is not None and not getattr(args, flag).strip():
            args.error(f"--{flag} is empty")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        with sigterm_interrupts():  # the command cleans up after itself and says so
            return args.fn(args)
    except KeyboardInterrupt as e:
        print(f"ctpipe {args.command}: {'terminated' if isinstance(e, Terminated) else 'interrupted'}", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT)
    except ValidationError as e:
        print(f"ctpipe: invalid configuration: {e}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - a user-facing command reports the cause, not a traceback
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            raise
        print(f"ctpipe {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
