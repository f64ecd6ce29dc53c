"""User-caused failures of the DAG tasks end with a message naming the field and value."""

import pytest

from ctpipe.errors import PipelineError
from ctpipe.pipeline import prepare_training
from tests.conftest import trace, write_traces

PARAMS = {"algorithm": "grpo", "base_checkpoint": "", "dataset_version": "", "max_steps": 5, "learning_rate": 1e-3, "seed": 0}


def test_unknown_algorithm_is_named(settings):
    with pytest.raises(PipelineError, match="algorithm=.ppo. is not supported; choose one of grpo, dpo, sft"):
        prepare_training(settings, PARAMS | {"algorithm": "ppo"}, None, "manual__1")


def test_missing_dataset_version_is_named(settings):
    with pytest.raises(PipelineError, match="dataset_version='v-missing'"):
        prepare_training(settings, PARAMS | {"dataset_version": "v-missing"}, None, "manual__1")


def test_no_dataset_at_all(settings):
    with pytest.raises(PipelineError, match="no dataset has been published"):
        prepare_training(settings, PARAMS, None, "manual__1")


def test_dataset_without_pairs_cannot_train_dpo(settings):
    from ctpipe.pipeline import materialize_interval
    from tests.conftest import T0
    from datetime import timedelta

    write_traces(settings.traces_dir, [trace(1)])
    extra = materialize_interval(settings, T0, T0 + timedelta(hours=1))
    with pytest.raises(PipelineError, match="has no dpo rows"):
        prepare_training(settings, PARAMS | {"algorithm": "dpo"}, extra, "manual__1")


def test_bad_base_checkpoint_is_named(settings):
    from ctpipe.pipeline import materialize_interval
    from tests.conftest import T0
    from datetime import timedelta

    write_traces(settings.traces_dir, [trace(1)])
    extra = materialize_interval(settings, T0, T0 + timedelta(hours=1))
    with pytest.raises(PipelineError, match="base_checkpoint='/nowhere'"):
        prepare_training(settings, PARAMS | {"base_checkpoint": "/nowhere"}, extra, "manual__1")


@pytest.mark.parametrize(
    "trainer, algorithm, script",
    [("trl", "grpo", "train_trl.py"), ("nemo_rl", "grpo", "train_nemo_rl.py"), ("nemo_rl", "dpo", "train_trl.py")],
)
def test_the_configured_trainer_picks_the_job_entrypoint(settings, training_dataset, base_model, trainer, algorithm, script):
    s = settings.model_copy(update={"train": settings.train.model_copy(update={"grpo_trainer": trainer})})
    job = prepare_training(s, PARAMS | {"algorithm": algorithm, "base_checkpoint": str(base_model)}, training_dataset, "manual__1")
    assert job["entrypoint"].split()[1].endswith(f"jobs/{script}")
    assert job["entrypoint"].endswith(f"--spec {job['spec_path']}")


def test_an_empty_learning_rate_takes_the_algorithms_own(settings, training_dataset, base_model):
    from ctpipe.jobspec import JobSpec

    for algorithm in ("grpo", "dpo"):
        params = PARAMS | {"algorithm": algorithm, "base_checkpoint": str(base_model), "learning_rate": None}
        job = prepare_training(settings, params, training_dataset, f"manual__{algorithm}")
        spec = JobSpec.model_validate_json(open(job["spec_path"]).read())
        assert spec.learning_rate == settings.train.learning_rates[algorithm]
