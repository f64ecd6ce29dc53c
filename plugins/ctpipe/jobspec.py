"""What a training job is told to do: written by the train DAG, read by ``jobs/train_trl.py``.

Progress crosses from the job to Airflow as log lines ``CTPIPE_PROGRESS {json}``
so any log reader (Ray's Jobs API, ``kubectl logs``) can follow it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ctpipe.config import Algorithm, TrainConfig

PROGRESS_PREFIX = "CTPIPE_PROGRESS "
SPEC_FILE = "job.json"
METRICS_FILE = "metrics.json"
CHECKPOINT_DIR = "checkpoint"


class JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    algorithm: Algorithm
    base_checkpoint: str = Field(description="Hugging Face directory the run starts from (and DPO's reference).")
    base_version: str = Field(description="Registry version of the base checkpoint.")
    dataset_uri: str = Field(description="Dataset version directory (holds manifest.json).")
    dataset_version: str
    run_dir: str = Field(description="Unique per DAG run; a retry of the run reuses it and resumes.")
    max_steps: int = Field(ge=1)
    learning_rate: float = Field(gt=0)
    seed: int = Field(ge=0)
    train: TrainConfig

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
