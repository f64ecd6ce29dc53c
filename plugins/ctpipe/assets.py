"""The assets that chain the three DAGs (each event's ``extra`` carries the details)."""

from airflow.sdk import Asset

# extra: version, uri, interval, rows {traces, grpo_prompts, dpo_pairs}, traces_in, quarantined,
#        reward {labeled, mean, min, max}
TRAINING_DATASET = Asset(name="ctpipe_training_dataset", uri="ctpipe://datasets/training", group="ctpipe")
# extra: checkpoint, run_dir, train_run_id, algorithm, base_version, dataset_version, dataset_uri,
#        more_datasets [{uri, version}] (of earlier intervals, trained on with it), steps, first, last,
#        curve {step: [...], loss: [...], reward: [...]} (at most CURVE_POINTS points)
CHECKPOINT = Asset(name="ctpipe_checkpoint", uri="ctpipe://checkpoints/candidate", group="ctpipe")
# extra: train_run_id, dataset_version, algorithm, passed, reason, comparison, champion_version,
#        registered_version, rollout {promoted, previous_champion, detail}, mlflow_run_id
EVALUATION = Asset(name="ctpipe_evaluation", uri="ctpipe://evaluations/gate", group="ctpipe")
