import pytest

from ctpipe import arith
from ctpipe.config import TaskConfig


def test_splits_are_disjoint_deterministic_and_complete():
    cfg = TaskConfig(kind="addition", operand_max=99)
    a, b = arith.splits(cfg), arith.splits(TaskConfig(kind="addition", operand_max=99))
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


def test_correctness_reads_the_first_number_as_the_answer_when_it_is_an_integer():
    assert arith.correctness(" 12 apples", "12") == 1.0
    assert arith.correctness("1 2", "12") == 0.0
    assert arith.correctness("", "12") == 0.0
    assert arith.correctness("12", " +12 ") == 1.0
    # 5.5, 5/2 and 5e3 are not 5: a decimal, a fraction or an exponent does not answer with its first digits
    assert [arith.verify("What is 2 plus 3?", said) for said in ("5.5", "5.9", "5/2", "5e3", "5.", "5, surely", "5.0", "05")] \
        == [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert arith.verify("Name a number between 5 and 9.", "7.5") == 0.0
    assert arith.reference_answer("What is 40 plus 2?") == "42"
    assert arith.reference_answer("What is the capital of France?") is None


def test_between_questions_split_and_verify_from_the_question():
    import random

    cfg = TaskConfig()  # the default task
    assert (cfg.kind, cfg.operand_max, cfg.gap_max) == ("between", 989, 12)
    s = arith.splits(cfg)
    assert len(s.train) + len(s.dev) + len(s.test) == 990 * 11
    assert all(q.kind == "between" and 2 <= q.b - q.a <= 12 for q in s.dev)
    q = s.test[0]
    assert arith.parse(q.prompt) == q
    # Every number strictly between is right, the bounds and anything outside are not.
    assert [arith.verify(q.prompt, str(n)) for n in (q.a, q.a + 1, q.b - 1, q.b)] == [0.0, 1.0, 1.0, 0.0]
    # The reference is one right answer, fixed per question; the base's training answers cover them all.
    assert q.answer == arith.reference_answer(q.prompt) and q.check(q.answer)
    drawn = {q.sample_answer(random.Random(i)) for i in range(200)}
    assert drawn == {str(n) for n in range(q.a + 1, q.b)}


def test_both_kinds_of_question_verify_whatever_task_is_configured():
    assert arith.verify("What is 40 plus 2?", "42") == 1.0
    assert arith.verify("Name a number between 40 and 42.", "41") == 1.0
    assert arith.verify("What is the capital of France?", "Paris") is None


def test_too_few_questions_for_the_held_out_splits_is_refused_naming_the_settings():
    with pytest.raises(ValueError, match="between questions of operand_max=99"):
        arith.splits(TaskConfig(operand_max=99, gap_max=3))


def test_numbers_of_thousands_of_digits_are_read_as_no_answer_not_raised():
    """int() refuses a text past 4,300 digits: a model repeating a digit stopped the whole interval."""
    big = "9" * 5000
    assert arith.verify("What is 1 plus 1?", big) == arith.verify("Name a number between 5 and 9.", big) == 0.0
    assert arith.verify(f"What is {big} plus 1?", "2") is None
    # a reference is compared as its digits, whatever its length (a right answer to 2**20000 is right)
    assert arith.correctness(big, big) == 1.0 and arith.correctness(big, "9") == arith.correctness("9", big) == 0.0
