"""Normalized duplicates and 13-gram decontamination against evaluation items."""

from __future__ import annotations

from ctpipe.dedup import NgramIndex, fingerprint

LONG_EVAL = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
             "How many clips did Natalia sell altogether in April and May?")


def test_normalized_duplicates_share_a_fingerprint():
    assert fingerprint("What is 2 plus 3?") == fingerprint("  what IS 2 plus 3 ")
    assert fingerprint("What is 2 plus 3?") != fingerprint("What is 3 plus 2?")


def test_a_prompt_sharing_13_words_with_an_eval_item_is_contaminated():
    index = NgramIndex([LONG_EVAL, "What is 57 plus 38?"])
    assert index.overlaps("Quick one: natalia sold clips to 48 of her friends in April and then she sold something")
    assert not index.overlaps("Natalia sold clips to 48 of her friends in June.")  # 10 shared words only
    # Short eval items count whole: the same question is caught, a different one is not.
    assert index.overlaps("Hey, what is 57 plus 38? Thanks")
    assert not index.overlaps("What is 57 plus 39?")
    assert not NgramIndex([]).overlaps("anything")
