"""The assets that chain the three DAGs (each event's ``extra`` carries the details)."""

from airflow.sdk import Asset

# extra: version, uri, interval, rows {traces, grpo_prompts, dpo_pairs}, traces_in, quarantined
TRAINING_DATASET = Asset(name="ctpipe_training_dataset", uri="ctpipe://datasets/training", group="ctpipe")
# extra: checkpoint, run_dir, algorithm, base_version, dataset_version, dataset_uri, steps, first, last
CHECKPOINT = Asset(name="ctpipe_checkpoint", uri="ctpipe://checkpoints/candidate", group="ctpipe")
