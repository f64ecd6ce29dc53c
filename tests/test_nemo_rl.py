"""The NeMo-RL GRPO job: its config against NeMo-RL's documented keys, its data, and its directory handling.

NeMo-RL needs GPUs and its container, so it cannot run here. The end-to-end tests give
the job a NeMo-RL home whose ``run_grpo.py`` and ``convert_dcp_to_hf.py`` stand-ins
take the same flags, write the same checkpoint layout (``tmp_step_N`` renamed to
``step_N``, ``config.yaml``, ``training_info.json``, ``policy/weights``,
``policy/tokenizer``) and refuse an existing output directory, as NeMo-RL v0.7.0 does.
"""

import json
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from ctpipe import nemo_rl
from ctpipe.datasets import Manifest
from ctpipe.pipeline import materialize_interval
from tests.conftest import ROOT, job_spec

pytestmark = pytest.mark.timeout(300)


def nemo_spec(settings, base_model, dataset, run="nemo", steps=6, **train):
    spec = job_spec(settings, base_model, dataset, "grpo", run, steps=steps, save_steps=2)
    nemo = spec.train.nemo_rl.model_copy(update=train.pop("nemo_rl", {}))
    spec = spec.model_copy(update={"train": spec.train.model_copy(update={"grpo_trainer": "nemo_rl", "nemo_rl": nemo, **train})})
    spec.write()
    return spec


def test_the_config_inherits_nemo_rl_defaults_and_sets_our_keys(settings, base_model, training_dataset):
    spec = nemo_spec(settings, base_model, training_dataset)
    cfg = yaml.safe_load(nemo_rl.config_yaml(nemo_rl.build_config(spec, prompts=21)))
    assert cfg["defaults"] == "/opt/nemo-rl/examples/configs/grpo_math_1B.yaml"
    assert set(cfg) == {"defaults", "grpo", "loss_fn", "policy", "data", "env", "checkpointing", "logger", "cluster"}
    assert cfg["grpo"]["num_prompts_per_step"] * cfg["grpo"]["num_generations_per_prompt"] == spec.train.grpo_batch_size
    assert cfg["grpo"]["max_num_steps"] == 6 and cfg["grpo"]["seed"] == 0 and cfg["grpo"]["val_period"] == 0
    assert cfg["grpo"]["max_num_epochs"] * 21 >= 6 * cfg["grpo"]["num_prompts_per_step"]  # steps, not epochs, end the run
    assert cfg["loss_fn"] == {"reference_policy_kl_penalty": spec.train.grpo_beta}
    policy = cfg["policy"]
    assert policy["model_name"] == policy["tokenizer"]["name"] == str(base_model)
    assert policy["optimizer"] == {"name": "torch.optim.AdamW", "kwargs": {"lr": spec.learning_rate}}
    assert policy["scheduler"] == [{"name": "torch.optim.lr_scheduler.LinearLR",
                                    "kwargs": {"start_factor": 1.0, "end_factor": 0.0, "total_iters": 6}}]
    assert policy["generation"] == {"max_new_tokens": spec.train.max_completion_length, "temperature": 1.0}
    assert cfg["data"]["_override_"] is True  # the parent's OpenMathInstruct-2 data must not leak in
    assert cfg["data"]["train"]["dataset_name"] == "ResponseDataset"
    assert cfg["data"]["train"]["data_path"] == f"{spec.run_dir}/nemo_rl/train.jsonl"
    assert cfg["data"]["default"]["input_key"] == "problem" and cfg["data"]["default"]["env_name"] == "math"
    assert cfg["env"] == {"math": {"num_workers": 8, "math_verify_impl": "hf_math_verify"}}
    ckpt = cfg["checkpointing"]
    assert ckpt["checkpoint_dir"] == f"{spec.run_dir}/nemo_rl/checkpoints" and ckpt["save_period"] == 2
    assert ckpt["model_save_format"] == "torch_save"  # the only format the DCP-to-HF converter reads
    assert cfg["cluster"] == {"gpus_per_node": 8, "num_nodes": 1}
    # What NeMo-RL reads back must validate again: the YAML is the checked object, not a copy of it.
    nemo_rl.MasterConfig.model_validate(cfg)


def test_the_dataset_sections_leave_out_what_they_do_not_give_and_train_takes_the_rest_from_default(
    settings, base_model, training_dataset
):
    """NeMo-RL's dataset keys are NotRequired: its check refuses a null (six errors, before Ray started),
    and it fills train's keys from default only where train leaves them out: a null input_key in train
    hid default's, and the environment was looked up as None."""
    data = yaml.safe_load(nemo_rl.config_yaml(nemo_rl.build_config(nemo_spec(settings, base_model, training_dataset), 21)))["data"]
    assert None not in data["train"].values() and None not in data["default"].values()
    train = data["default"] | data["train"]  # NeMo-RL's update_single_dataset_config: missing keys only
    assert train == {"dataset_name": "ResponseDataset", "data_path": data["train"]["data_path"], "split_validation_size": 0,
                     "seed": 0, "input_key": "problem", "output_key": "expected_answer",
                     "processor": "math_hf_data_processor", "env_name": "math"}
    with pytest.raises(ValidationError, match="train.env_name"):
        nemo_rl.DataConfig.model_validate({**data, "train": {**data["train"], "env_name": None}})


@pytest.mark.parametrize(
    "section, patch, field",
    [
        ("grpo", {"num_prompt_per_step": 4}, "grpo.num_prompt_per_step"),
        ("grpo", {"max_num_steps": "6"}, "grpo.max_num_steps"),
        ("checkpointing", {"model_save_format": "pt"}, "checkpointing.model_save_format"),
        ("env", {"math": {"num_workers": 8, "math_verify_impl": "hf_math_verify", "timeout": 3}}, "env.math.timeout"),
        ("policy", {"generation": {"max_new_tokens": 8, "temperature": 1.0, "max_tokens": 8}}, "policy.generation.max_tokens"),
    ],
)
def test_keys_or_types_nemo_rl_does_not_document_are_refused_by_name(
    settings, base_model, training_dataset, section, patch, field
):
    cfg = nemo_rl.build_config(nemo_spec(settings, base_model, training_dataset), 21).model_dump(by_alias=True)
    cfg[section] |= patch
    with pytest.raises(ValidationError) as e:
        nemo_rl.MasterConfig.model_validate(cfg)
    assert field in {".".join(map(str, err["loc"])) for err in e.value.errors()}


def test_a_batch_that_is_not_whole_prompts_is_refused(settings, base_model, training_dataset):
    spec = nemo_spec(settings, base_model, training_dataset, grpo_batch_size=10, grpo_num_generations=4)
    with pytest.raises(ValueError, match="train.grpo_batch_size=10 must be a multiple of train.grpo_num_generations=4"):
        nemo_rl.build_config(spec, 21)


def test_the_grpo_table_becomes_response_dataset_jsonl(tmp_path, training_dataset):
    manifest = Manifest.load(training_dataset["uri"])
    n = nemo_rl.write_train_data(manifest.read("grpo", ["prompt", "answer"]), tmp_path / "t.jsonl")
    rows = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert n == len(rows) == manifest.files["grpo"]["rows"] == 24
    assert rows[0] == {"problem": "Name a number between 3 and 5.", "expected_answer": "4"}
    assert all(isinstance(r["expected_answer"], str) for r in rows)  # NeMo-RL scores a non-string answer 0


def test_a_prompt_more_than_one_question_is_left_out_of_response_dataset_jsonl(tmp_path, caplog):
    """ResponseDataset frames every question with one system prompt: a chat of its own would be trained
    as another prompt than the one served, and two differing only in their system messages as one."""
    import pyarrow as pa

    from ctpipe.errors import PipelineError
    from ctpipe.materialize import GRPO_SCHEMA

    ask = lambda *m: [{"role": r, "content": c} for r, c in m]  # noqa: E731
    grpo = pa.Table.from_pylist([
        {"prompt": ask(("user", "What is 6 times 7?")), "answer": "42"},
        {"prompt": ask(("system", "Answer in French."), ("user", "What is 6 times 7?")), "answer": "42"},
        {"prompt": ask(("user", "And 2 plus 2?"), ("assistant", "4"), ("user", "And 3 plus 3?")), "answer": "6"},
    ], schema=GRPO_SCHEMA)
    assert nemo_rl.write_train_data(grpo, tmp_path / "t.jsonl") == 1
    assert [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()] == [
        {"problem": "What is 6 times 7?", "expected_answer": "42"}]
    assert "2 of the 3 GRPO prompts hold more than a question" in caplog.text
    with pytest.raises(PipelineError, match="none of the 2 GRPO prompts is a question alone with an answer of math"):
        nemo_rl.write_train_data(grpo.slice(1), tmp_path / "u.jsonl")


def test_a_prompt_whose_answer_is_no_math_is_left_out_of_response_dataset_jsonl(tmp_path, caplog):
    """NeMo-RL's math environment scores with math-verify alone: against "Rome", "Rome" scored 0, and
    GRPO learned nothing from the prompt, whatever verifier labeled the version (arith, the default,
    keeps a trace's reference answer; regex's GSM8K answers are numbers, which it scores)."""
    import pyarrow as pa

    from ctpipe.errors import PipelineError
    from ctpipe.materialize import GRPO_SCHEMA

    grpo = pa.Table.from_pylist([{"prompt": [{"role": "user", "content": q}], "answer": a} for q, a in [
        ("Capital of Italy?", "Rome"), ("Half of one?", "\\frac{1}{2}"), ("Six times seven?", "42"), ("Symbol of gold?", "Au"),
        ("One and a half?", "1½"), ("A third?", "0.\\overline{3}"), ("Speed?", "5 m/s"), ("Half past four?", "4:30"),
        ("Roots of x^2 - x - 2?", "-1,2"), ("An eighth, in percent?", "12.5%"),
    ]], schema=GRPO_SCHEMA)
    assert nemo_rl.write_train_data(grpo, tmp_path / "t.jsonl") == 5
    # Written as math-verify reads them: boxed as given, right answers scored 0 (\boxed{1½} is not 3/2).
    written = [json.loads(x)["expected_answer"] for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert written == ["\\frac{1}{2}", "42", "3/2", "\\frac{1}{3}", "-1,2"]
    # Scored as the math environment scores (nemo_rl/environments/math_environment.py, HFVerifyWorker):
    # right answers in other forms than the reference's score 1.
    from math_verify.metric import math_metric
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

    score = math_metric(gold_extraction_target=(LatexExtractionConfig(),),
                        pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()))
    right = ["0.5", "\\boxed{42}", "\\boxed{\\frac{3}{2}}", "\\boxed{\\frac{1}{3}}", "\\boxed{-1,2}"]
    assert [score(["\\boxed{" + a + "}"], [r])[0] for a, r in zip(written, right)] == [1.0] * 5
    assert "5 of the 10 GRPO prompts have a reference answer that is no math (as 'Rome'), or one NeMo-RL's" in caplog.text
    with pytest.raises(PipelineError, match=r"none of the 1 GRPO prompts .* \(0 hold more than a question, 1 have answers of "
                                            r"text\); train.grpo_trainer='trl' takes them"):
        nemo_rl.write_train_data(grpo.slice(0, 1), tmp_path / "u.jsonl")


def test_only_complete_step_directories_count(tmp_path):
    for name in ("step_2", "step_10", "tmp_step_12", "old_step_4", "step_x", "logs"):
        (tmp_path / name).mkdir()
    assert nemo_rl.latest_step(tmp_path).name == "step_10"
    assert nemo_rl.latest_step(tmp_path / "missing") is None


# Stand-ins for NeMo-RL's two scripts: same flags, same files, same refusals.
RUN_GRPO = '''
import argparse, json, os, shutil, signal, sys, time
from pathlib import Path
import yaml
p = argparse.ArgumentParser(); p.add_argument("--config"); args, overrides = p.parse_known_args()
cfg = yaml.safe_load(open(args.config))
Path("calls.jsonl").open("a").write(json.dumps({"argv": sys.argv, "cwd": os.getcwd()}) + "\\n")
ck = Path(cfg["checkpointing"]["checkpoint_dir"]); ck.mkdir(parents=True, exist_ok=True)
done = [int(d.name[5:]) for d in ck.glob("step_*")]
start = max(done, default=0)
print(f"resumed at {start}" if start else "fresh start", flush=True)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
for step in range(start + 1, cfg["grpo"]["max_num_steps"] + 1):
    time.sleep(float(os.environ.get("FAKE_STEP_S", "0")))
    if step % cfg["checkpointing"]["save_period"] == 0 or step == cfg["grpo"]["max_num_steps"]:
        tmp = ck / f"tmp_step_{step}"
        (tmp / "policy" / "weights" / "model").mkdir(parents=True)
        (tmp / "policy" / "weights" / "model" / ".metadata").write_text("dcp")
        shutil.copytree(cfg["policy"]["tokenizer"]["name"], tmp / "policy" / "tokenizer",
                        ignore=shutil.ignore_patterns("*.safetensors", "config.json", "generation_config.json"))
        (tmp / "config.yaml").write_text(yaml.safe_dump(cfg))
        (tmp / "training_info.json").write_text(json.dumps({"current_step": step, "total_steps": step}))
        tmp.rename(ck / f"step_{step}")
'''

CONVERT = '''
import argparse, json, os, shutil, sys
from pathlib import Path
import yaml
p = argparse.ArgumentParser()
p.add_argument("--config"); p.add_argument("--dcp-ckpt-path"); p.add_argument("--hf-ckpt-path")
a = p.parse_args()
Path("calls.jsonl").open("a").write(json.dumps({"argv": sys.argv, "cwd": os.getcwd()}) + "\\n")
if os.path.exists(a.hf_ckpt_path):
    raise FileExistsError(a.hf_ckpt_path)
if not os.path.exists(os.path.join(a.dcp_ckpt_path, "model", ".metadata")):
    raise FileNotFoundError(f"No metadata file found in {a.dcp_ckpt_path}")
base = yaml.safe_load(open(a.config))["policy"]["model_name"]
shutil.copytree(base, a.hf_ckpt_path)  # the real one rebuilds the model from DCP shards
'''


@pytest.fixture
def nemo_home(tmp_path):
    home = tmp_path / "opt-nemo-rl"
    (home / "examples" / "converters").mkdir(parents=True)
    (home / "examples" / "run_grpo.py").write_text(RUN_GRPO)
    (home / "examples" / "converters" / "convert_dcp_to_hf.py").write_text(CONVERT)
    return home


def start(spec, **env):
    cmd = [sys.executable, str(ROOT / "jobs" / "train_nemo_rl.py"), "--spec", str(Path(spec.run_dir) / "job.json")]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, **env})


def calls(home):
    return [json.loads(x) for x in (home / "calls.jsonl").read_text().splitlines()]


def test_the_job_trains_converts_and_publishes_a_loadable_checkpoint(settings, base_model, training_dataset, nemo_home):
    from transformers import AutoModelForCausalLM

    spec = nemo_spec(settings, base_model, training_dataset, nemo_rl={"home": str(nemo_home)})
    proc = start(spec)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    train, convert = calls(nemo_home)
    assert train["argv"][1:] == ["--config", f"{spec.run_dir}/nemo_rl/grpo.yaml"] and train["cwd"] == str(nemo_home)
    last = f"{spec.run_dir}/nemo_rl/checkpoints/step_6"
    assert convert["argv"][1:5] == ["--config", f"{last}/config.yaml", "--dcp-ckpt-path", f"{last}/policy/weights"]
    assert convert["argv"][5] == "--hf-ckpt-path" and Path(convert["argv"][6]).name.startswith(".tmp-checkpoint")
    AutoModelForCausalLM.from_pretrained(str(spec.checkpoint_dir))
    assert not list(Path(spec.run_dir).glob(".tmp-*"))
    metrics = json.loads((Path(spec.run_dir) / "metrics.json").read_text())
    assert metrics["steps"] == 6 and metrics["trainer"] == "nemo_rl" and metrics["training_info"]["total_steps"] == 6
    per_step = spec.train.grpo_batch_size // spec.train.grpo_num_generations
    prompts = training_dataset["rows"]["grpo_prompts"]
    assert metrics["epochs"] == 6 * per_step / prompts  # passes over the prompts
    assert metrics["passes"] == (int(metrics["epochs"]) if prompts % per_step == 0 else 0)
    assert '"done": true' in out


def test_sigterm_reaches_nemo_rl_and_the_resubmission_resumes(settings, base_model, training_dataset, nemo_home):
    spec = nemo_spec(settings, base_model, training_dataset, steps=40, nemo_rl={"home": str(nemo_home)})
    proc = start(spec, FAKE_STEP_S="0.05")
    ckpts = Path(spec.run_dir) / "nemo_rl" / "checkpoints"
    while nemo_rl.latest_step(ckpts) is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "passing it to NeMo-RL" in out
    saved = nemo_rl.step_number(nemo_rl.latest_step(ckpts))
    assert 2 <= saved < 40 and not spec.checkpoint_dir.exists()

    again = start(spec)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err[-2000:]
    assert f"resuming from {ckpts}/step_{saved}" in out
    assert json.loads((Path(spec.run_dir) / "metrics.json").read_text())["resumed_from"].endswith(f"step_{saved}")


def test_outside_the_container_or_with_dpo_it_fails_fast(settings, base_model, training_dataset, tmp_path):
    spec = nemo_spec(settings, base_model, training_dataset, nemo_rl={"home": str(tmp_path / "nowhere")})
    proc = start(spec)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "holds no NeMo-RL examples/" in err and "nvcr.io/nvidia/nemo-rl:v0.7.0" in err

    spec.model_copy(update={"algorithm": "dpo"}).write()
    proc = start(spec)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "algorithm='dpo': NeMo-RL runs GRPO here" in err


@pytest.mark.parametrize("verifier", ["exact", "arith"])
def test_a_dataset_of_text_answers_is_refused(settings, base_model, nemo_home, verifier):
    """NeMo-RL's math environment scores with math-verify alone: the exact answer "Rome" to a question
    whose reference is "Rome" scored 0, and GRPO learned nothing, silently, whatever the verifier."""
    from tests.conftest import T0, trace, write_traces

    write_traces(settings.traces_dir, [trace(i, f"Capital of Italy? ({i})", answer, reference_answer="Rome")
                                       for i, answer in enumerate(["Rome", "Milan"] * 4)])
    labeled = settings.model_copy(update={"reward": settings.reward.model_copy(update={"verifier": verifier})})
    spec = nemo_spec(settings, base_model, materialize_interval(labeled, T0, T0 + timedelta(hours=1)),
                     nemo_rl={"home": str(nemo_home)})
    proc = start(spec)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "8 have answers of text" in err and "train.grpo_trainer='trl'" in err
    assert not (nemo_home / "calls.jsonl").exists()
