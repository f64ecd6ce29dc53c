"""What a training job is told to do: written by the train DAG, read by ``jobs/train_trl.py``.

Progress crosses from the job to Airflow as log lines ``CTPIPE_PROGRESS {json}``
so any log reader (Ray's Jobs API, ``kubectl logs``) can follow it.
"""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ctpipe.config import Algorithm, TrainConfig
from ctpipe.errors import PipelineError

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from ctpipe.datasets import Manifest

PROGRESS_PREFIX = "CTPIPE_PROGRESS "
SPEC_FILE = "job.json"
METRICS_FILE = "metrics.json"
CHECKPOINT_DIR = "checkpoint"


def table_of(algorithm: str) -> str:
    """The dataset table an algorithm trains on: its own, except SFT, which imitates GRPO's reference answers."""
    return "grpo" if algorithm == "sft" else algorithm


class DatasetRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str = Field(description="Dataset version folder (holds manifest.json): a path or fsspec URI.")
    version: str


class JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    algorithm: Algorithm
    base_checkpoint: str = Field(description="Hugging Face directory the run starts from (and DPO's reference).")
    base_version: str = Field(description="Registry version of the base checkpoint.")
    dataset_uri: str = Field(description="Dataset version folder (holds manifest.json): a path or fsspec URI.")
    dataset_version: str
    more_datasets: list[DatasetRef] = Field(
        default=[], description="Versions trained on with dataset_version, of earlier intervals: those announced "
        "while train's run before went on (a backfill's hours), labeled with the same reward config.")
    left_out: list[str] = Field(
        default=[], description="Examples learned before (files of their keys, each of a version of one interval: "
        "see datasets.Output.mark_learned), by the base checkpoint or the models it descends from: the rows of "
        "intervals sharing time with theirs that they hold are not trained on again (a re-run with late traces "
        "holds them too).")
    run_dir: str = Field(description="Unique per DAG run; a retry of the run reuses it and resumes.")
    max_steps: int = Field(ge=1)
    learning_rate: float = Field(gt=0)
    seed: int = Field(ge=0)
    train: TrainConfig

    @model_validator(mode="before")
    @classmethod
    def _written_before_left_out(cls, data: Any) -> Any:
        """A spec written before ``left_out`` (a run in flight when ctpipe was upgraded) may name versions
        trained on before: it is read without them, and its rows are trained on whole."""
        if isinstance(data, dict) and "trained_before" in data:
            data = {k: v for k, v in data.items() if k != "trained_before"}
        return data

    @property
    def script(self) -> str:
        """The ``jobs/`` entrypoint that runs this spec."""
        return "train_nemo_rl.py" if self.algorithm == "grpo" and self.train.grpo_trainer == "nemo_rl" else "train_trl.py"

    def command(self, python: str, jobs_dir: Path) -> list[str]:
        """The process that runs this spec (a Ray job's entrypoint, or a local subprocess)."""
        return [python, str(jobs_dir / self.script), "--spec", str(Path(self.run_dir) / SPEC_FILE)]

    @property
    def table(self) -> str:
        return table_of(self.algorithm)

    @property
    def datasets(self) -> list[DatasetRef]:
        """Every version the run trains on, the earliest interval's first."""
        return [*self.more_datasets, DatasetRef(uri=self.dataset_uri, version=self.dataset_version)]

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.run_dir) / CHECKPOINT_DIR

    def write(self) -> Path:
        path = Path(self.run_dir) / SPEC_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=2))
        return path

    @classmethod
    def read(cls, path: str | Path) -> JobSpec:
        return cls.model_validate_json(Path(path).read_text())


def load_job(path: str | Path) -> tuple[JobSpec, list[Manifest]]:
    """The spec at ``path`` and the manifests of the versions it trains on (see :attr:`JobSpec.datasets`:
    the one it is named after last); a clear error when any is unusable."""
    try:
        spec = JobSpec.read(path)
    except FileNotFoundError:
        raise PipelineError(f"job spec {path} does not exist") from None
    except ValidationError as e:
        raise PipelineError(f"job spec {path} is invalid: {e}") from None
    manifests = [_manifest(ref, spec.table) for ref in spec.datasets]
    for base_file in ("config.json", "model.safetensors"):
        if not (Path(spec.base_checkpoint) / base_file).is_file():
            raise PipelineError(f"base_checkpoint {spec.base_checkpoint} has no {base_file}")
    return spec, manifests


def _manifest(ref: DatasetRef, table: str) -> Manifest:
    from ctpipe.datasets import Manifest
    from ctpipe.sources import filesystem, reachable

    fs, root = filesystem(ref.uri)
    if not reachable(fs, f"{root.rstrip('/')}/manifest.json", f"dataset_uri {ref.uri!r}"):
        raise PipelineError(f"dataset version {ref.version!r} does not exist: no manifest at "
                            f"{ref.uri.rstrip('/')}/manifest.json")
    manifest = Manifest.load(ref.uri)
    if manifest.files[table]["rows"] == 0:
        raise PipelineError(f"dataset version {ref.version!r} has no {table} rows: nothing to train on")
    return manifest


def training_data(manifests: list[Manifest], table: str, columns: list[str] | None = None,
                  leave_out: dict[str, np.ndarray] | None = None, *, repeats: bool = False) -> pa.Table:
    """The rows of :func:`training_parts`, together."""
    import pyarrow as pa

    try:
        return pa.concat_tables(training_parts(manifests, table, columns, leave_out, repeats=repeats),
                                promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        versions = ", ".join(m.version for m in manifests)
        raise PipelineError(f"the {table} tables of dataset versions {versions} do not combine: {e}") from None


def training_parts(manifests: list[Manifest], table: str, columns: list[str] | None = None,
                   leave_out: dict[str, np.ndarray] | None = None, *, repeats: bool = False) -> list[pa.Table]:
    """The rows of ``table`` each version of ``manifests`` (as :func:`load_job` gives them) gives a
    run, read where its manifest was found: but those whose :func:`example_keys` are among
    ``leave_out``'s of an interval sharing time with the version's (:func:`learned`), and, unless
    ``repeats``, those whose example a version before it in the list, of an interval sharing time
    with its, gives. Versions are matched by example, not by time: a form's run of 03:17-04:05 and
    the hour 04:00-05:00 hold the same traces, and an example they both hold is trained on once,
    wherever in their intervals it was asked. Hours that share no time ask the same questions again."""
    import numpy as np

    from ctpipe.datasets import interval_part, sharing_time

    intervals, leave_out = [interval_part(m.version) for m in manifests], leave_out or {}
    learned_keys, learned_of = list(leave_out.values()), sharing_time(intervals, list(leave_out))
    sharing = [] if repeats else sharing_time(intervals, intervals)
    earlier = [[j for j in sharing[i] if j < i] if sharing else [] for i in range(len(manifests))]
    needed = {j for found in earlier for j in found}  # versions a later one is checked against
    none = np.empty(0, np.uint64)
    tables, kept, repeated = [], {}, 0
    for i, m in enumerate(manifests):
        rows = m.read(table, columns)
        if learned_of[i] or earlier[i] or i in needed:
            keys = example_keys(rows, table)
            known = np.isin(keys, np.concatenate([none, *(learned_keys[j] for j in learned_of[i])]))
            again = np.isin(keys, np.concatenate([none, *(kept[j] for j in earlier[i])])) & ~known
            repeated += int(again.sum())
            rows, kept[i] = rows.filter(~(known | again)), keys[~(known | again)]
        tables.append(rows)
    if repeated:
        print(f"{repeated} {table} rows are left out: a version before theirs, of an interval sharing time with "
              "theirs, gives the same examples", flush=True)
    return tables


EXAMPLE_COLUMNS = {"grpo": ["prompt", "answer"], "dpo": ["prompt", "chosen", "rejected"]}  # what makes a row one example


def example_keys(rows: pa.Table, table: str) -> np.ndarray:
    """A 64-bit key per row of ``table`` (its :data:`EXAMPLE_COLUMNS`: a GRPO prompt and answer, a DPO
    prompt and its pair, whatever their rewards), equal for rows that are the same example."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from ctpipe import dedup

    def column_keys(column: pa.Array) -> np.ndarray:
        if not pa.types.is_list(column.type):  # a GRPO answer
            return dedup.keys(column.fill_null(""))
        messages = pc.list_flatten(column)
        offsets = np.r_[0, np.cumsum(pc.list_value_length(column).fill_null(0).to_numpy())].tolist()
        return dedup.chat_keys(pc.struct_field(messages, "role"), pc.struct_field(messages, "content"), offsets)

    first, *others = (column_keys(rows.column(name).combine_chunks()) for name in EXAMPLE_COLUMNS[table])
    for keys in others:
        first = dedup.mix(first, keys)
    return first


def whole_passes(epochs: float | None, rows: int, per_batch: int) -> int:
    """The passes a run made over every one of its ``rows``, given its trainer's ``epochs``: a GRPO
    sampler (TRL's, NeMo-RL's) takes ``per_batch`` prompts at a time and drops a short last batch
    each pass, other rows each time it shuffles, so only rows that fill whole batches pass whole."""
    return int(epochs or 0) if rows and rows % per_batch == 0 else 0


def learned(uris: list[str]) -> dict[str, np.ndarray]:
    """The keys of the examples learned before that ``uris`` hold (:attr:`JobSpec.left_out`), by the
    interval each is of. A file removed since (retention, past the interval's age) leaves those rows
    in, said."""
    import numpy as np

    from ctpipe.datasets import interval_part, read_keys

    found: dict[str, list[np.ndarray]] = {}
    for uri in uris:
        try:
            keys, version = read_keys(uri)
        except FileNotFoundError:
            print(f"{uri}, examples learned before, is gone: its rows are not left out", flush=True)
            continue
        found.setdefault(interval_part(version), []).append(keys)
    return {interval: np.concatenate(keys) for interval, keys in found.items()}


def finish(spec: JobSpec, metrics: dict[str, Any]) -> int:
    """Write the run's ``metrics.json`` and the final progress line Airflow waits for."""
    (Path(spec.run_dir) / METRICS_FILE).write_text(json.dumps(metrics, indent=2))
    print(progress_line({"done": True, "steps": metrics["steps"], "checkpoint": metrics["checkpoint"]}), flush=True)
    return 0


def run_entrypoint(main: Callable[[str], int], description: str) -> NoReturn:
    """``jobs/*.py --spec <job.json>``: bad input exits 2 with its message, so it never looks like a preemption."""
    import argparse
    import subprocess
    import sys

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--spec", required=True, help="path to the run's job.json")
    try:
        sys.exit(main(parser.parse_args().spec))
    except PipelineError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except subprocess.CalledProcessError as e:
        print(f"error: {' '.join(map(str, e.cmd))} exited with code {e.returncode}", file=sys.stderr)
        sys.exit(1)


def progress_line(record: dict[str, Any]) -> str:
    return PROGRESS_PREFIX + json.dumps(record, sort_keys=True)


def parse_progress(line: str) -> dict[str, Any] | None:
    """The progress record in a log line, if it holds one.

    >>> parse_progress('CTPIPE_PROGRESS {"step": 3, "loss": 0.5}')
    {'step': 3, 'loss': 0.5}
    >>> parse_progress("anything else") is None
    True
    """
    idx = line.find(PROGRESS_PREFIX)
    if idx < 0:
        return None
    try:
        return json.loads(line[idx + len(PROGRESS_PREFIX) :])
    except ValueError:
        return None
