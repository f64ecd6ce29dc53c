from ctpipe import arith
from ctpipe.config import TaskConfig


def test_splits_are_disjoint_deterministic_and_complete():
    cfg = TaskConfig()
    a, b = arith.splits(cfg), arith.splits(TaskConfig())
    assert a == b
    train, dev, test = ({q.prompt for q in s} for s in (a.train, a.dev, a.test))
    assert len(dev) == cfg.dev_size and len(test) == cfg.test_size
    assert not (train & dev or train & test or dev & test)
    assert len(train) + len(dev) + len(test) == (cfg.operand_max + 1) ** 2


def test_split_seed_changes_the_held_out_questions():
    assert arith.splits(TaskConfig(split_seed=1)).test != arith.splits(TaskConfig(split_seed=2)).test


def test_sampled_training_questions_never_touch_held_out():
    import random

    cfg = TaskConfig()
    held = arith.splits(cfg).held_out_prompts()
    assert not {q.prompt for q in arith.sample_train(cfg, 5000, random.Random(0))} & held


def test_correctness_reads_the_first_integer():
    assert arith.correctness(" 12 apples", "12") == 1.0
    assert arith.correctness("1 2", "12") == 0.0
    assert arith.correctness("", "12") == 0.0
    assert arith.reference_answer("What is 40 plus 2?") == "42"
    assert arith.reference_answer("What is the capital of France?") is None
