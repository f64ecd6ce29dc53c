"""Normalized duplicates and 13-gram decontamination against evaluation items."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from ctpipe import dedup
from ctpipe.dedup import NgramIndex, Recent, chat_keys, fingerprint, key, keys, squash

LONG_EVAL = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
             "How many clips did Natalia sell altogether in April and May?")


def test_normalized_duplicates_share_a_fingerprint():
    assert fingerprint("What is 2 plus 3?") == fingerprint("  what IS 2 plus 3 ")
    assert fingerprint("What is 2 plus 3?") != fingerprint("What is 3 plus 2?")


def test_squash_is_the_same_for_ascii_and_other_text():
    assert squash("Hello, World?") == "Hello, World?".lower().encode().translate(None, b", ?")
    assert squash("Ärger, ÖL?") == "ärgeröl".encode()
    assert squash("Ärger, ÖL！") == "ärgeröl!".encode()  # a full-width sign is the sign


def test_keys_of_a_column_are_those_of_each_text():
    texts = ["What is 2 plus 3?", "", "Ärger, ÖL!", "what IS 2 plus 3", None]
    column = pa.array(texts).slice(0)
    assert keys(column).tolist()[:4] == [key(t) for t in texts[:4]]
    assert keys(column, normalized=True).tolist()[:4] == [fingerprint(t) for t in texts[:4]]
    assert keys(pa.array(texts).slice(2, 2)).tolist() == [key(t) for t in texts[2:4]]


def test_chat_keys_tell_chats_apart_by_role_text_order_and_length():
    chats = [
        [("system", "Be brief."), ("user", "What is 2 plus 3?")],
        [("system", "Be brief."), ("user", "What is 2 plus 3?")],  # the same chat again
        [("system", "Be brief."), ("user", "what is 2 PLUS 3")],  # the same, but for case and punctuation
        [("user", "Be brief."), ("system", "What is 2 plus 3?")],  # other roles
        [("user", "What is 2 plus 3?"), ("system", "Be brief.")],  # other order
        [("system", "Be brief.")],  # a prefix
        [],
    ]
    roles = [r for chat in chats for r, _ in chat]
    contents = [c for chat in chats for _, c in chat]
    offsets = [0]
    for chat in chats:
        offsets.append(offsets[-1] + len(chat))
    exact = chat_keys(pa.array(roles), pa.array(contents), offsets).tolist()
    assert exact[0] == exact[1] and len({exact[0], *exact[2:]}) == 6


@pytest.mark.parametrize("a, b", [("-5", "5"), ("1.5", "15"), ("It is 1,5.", "It is 15."), ("2+2", "2*2"),
                                  ("x = 3", "x 3"), ("x^2", "x2"), ("10%", "10"), ("a < b", "a b"),
                                  ("x = 5", "x != 5"), ("5", "5!"), ("a && b", "a || b"), ("f(a)", "f[a]"),
                                  ("~x", "x"), ("|x|", "x"), ("$5", "5"), ("a_b", "ab"), ("#### 5", "5")])
def test_squash_keeps_what_changes_a_number_or_a_formula(a, b):
    assert squash(a) != squash(b)
    assert keys(pa.array([a, b]), normalized=True).tolist() == [fingerprint(a), fingerprint(b)]


@pytest.mark.parametrize("a, b", [("It is 5.", "it is 5"), ("5. Then 6", "5 then 6"), ("1, 2, 3", "1 2 3"),
                                  ("Paris, France.", "PARIS\u00a0FRANCE"), ("Ｉｔ ｉｓ １．５", "it is 1.5"),
                                  ("It's `ls`: \"ok\"; why?", "its ls ok why"),
                                  ("te\ufe0fst\u034f x\U000e0041", "test x"), ("\u3164ok\u2060", "ok")])
def test_squash_still_ignores_punctuation_that_ends_a_number_or_a_sentence(a, b):
    assert squash(a) == squash(b)
    assert keys(pa.array([a, b]), normalized=True).tolist() == [fingerprint(a), fingerprint(b)]


def test_separators_between_digits_are_told_per_text_not_across_texts():
    # "1" ending one text and ".5" starting the next are no number: each text is squashed alone.
    texts = ["It is 1", ".5 more", "1.", "5", None, "3.25", "", "7,5"]
    column = pa.array(texts)
    assert keys(column, normalized=True).tolist()[:4] == [fingerprint(t) for t in texts[:4]]
    assert keys(column.slice(1), normalized=True).tolist()[4:] == [fingerprint(t) for t in texts[5:]]


def test_recent_remembers_the_last_key_of_a_slot_and_never_key_0():
    recent = Recent(4, np.uint64)
    recent.store(np.array([5, 9, 0], np.uint64), np.array([50, 90, 1], np.uint64))  # 5 and 9 share slot 1
    known, values = recent.recall(np.array([5, 9, 0, 6], np.uint64))
    assert known.tolist() == [False, True, False, False] and values[1] == 90
    with pytest.raises(ValueError, match="slots=3"):
        Recent(3, bool)


def test_a_prompt_sharing_13_words_with_an_eval_item_is_contaminated():
    index = NgramIndex([LONG_EVAL, "What is 57 plus 38?"])
    assert index.overlaps("Quick one: natalia sold clips to 48 of her friends in April and then she sold something")
    assert not index.overlaps("Natalia sold clips to 48 of her friends in June.")  # 10 shared words only
    # Short eval items count whole: the same question is caught, a different one is not.
    assert index.overlaps("Hey, what is 57 plus 38? Thanks")
    assert not index.overlaps("What is 57 plus 39?")
    assert not NgramIndex([]).overlaps("anything")


def test_an_index_saved_and_mapped_gives_the_verdicts_of_the_one_built(tmp_path):
    """Workers map the index the main process built: it answers as built, short items, other scripts,
    words no item holds and an index of no item alike."""
    texts = pa.array(["Quick one: natalia sold clips to 48 of her friends in April and then she sold something",
                      "Natalia sold clips to 48 of her friends in June.", "Hey, what is 57 plus 38? Thanks",
                      "what is 57 plus 39", "请回答：已知一个等差数列的首项是三，公差是四", "", "unknown words only"])
    for items in ([LONG_EVAL, "What is 57 plus 38?", "已知一个等差数列的首项是三，公差是四"], []):
        built = NgramIndex(items)
        built.save(str(tmp_path / f"index-{len(items)}"))
        mapped = NgramIndex.mapped(str(tmp_path / f"index-{len(items)}"))
        assert mapped.overlaps_array(texts).tolist() == built.overlaps_array(texts).tolist() == (
            [True, False, True, False, True, False, False] if items else [False] * 7)
        assert isinstance(mapped._keys, np.memmap) and mapped.lengths == built.lengths


def test_in_scripts_written_without_spaces_each_character_is_a_word():
    """A clause of Chinese, Japanese or Thai is no one word: an eval item's text is found with more
    written around it, or with one clause of many left out."""
    zh = "已知一个等差数列的首项是三，公差是四，求这个数列的第十项是多少"
    ja = "太郎さんはりんごを三つ持っていて、花子さんから二つもらいました。全部でいくつですか"
    th = "สมชายมีแอปเปิ้ลสามผลและได้รับเพิ่มอีกสองผลรวมเป็นกี่ผล"
    index = NgramIndex([zh, ja, th])
    assert index.overlaps_many(["请回答这个问题：" + zh + "？请详细解释", "質問です：" + ja, "คำถาม " + th + " ตอบ",
                                zh.split("，", 1)[1], "请回答这个问题：求数列的和"]) == [True, True, True, True, False]


def test_what_is_drawn_as_nothing_hides_no_eval_item():
    index = NgramIndex([LONG_EVAL])
    hidden = LONG_EVAL.replace("clips", "cl\ufe0fips").replace("April", "Ap\u034fril").replace("friends", "friends\U000e0020")
    assert index.overlaps(hidden) and index.overlaps_array(pa.array([hidden, "ok"])).tolist() == [True, False]


def test_a_column_is_checked_as_each_text_alone():
    index = NgramIndex([LONG_EVAL, "What is 57 plus 38?"])
    texts = ["Quick one: natalia sold clips to 48 of her friends in April and then she sold something",
             "Natalia sold clips to 48 of her friends in June.", "Hey, what is 57 plus 38? Thanks", "what is 57 plus 39",
             "WHAT\tIS 57 -- PLUS 38!!", "Ünïcode: what is 57 plus 38?", "Ünïcode, nothing", "", "what is 57\nplus 38", "a NUL \x00 what is 57 plus 38"]
    assert index.overlaps_array(pa.array(texts)).tolist() == index.overlaps_many(texts) == [
        True, False, True, False, True, True, False, False, True, True]
    only_other = ["Ünïcode: what is 57 plus 38?", "Ünïcode, nothing"]
    assert index.overlaps_array(pa.array(only_other)).tolist() == [True, False]


def test_a_text_checked_lately_is_not_searched_again_and_a_forgotten_one_is(monkeypatch):
    texts = ["Hey, what is 57 plus 38? Thanks", "what is 57 plus 39", "WHAT IS 57 PLUS 38!!", "nothing here"]
    expected = [True, False, True, False]
    for remembered in (1 << 19, 2, 1):  # with one or two slots, texts crowd each other out
        index = NgramIndex(["What is 57 plus 38?"], remembered=remembered)
        searched = []
        search = index._search
        monkeypatch.setattr(index, "_search", lambda column: searched.append(column.to_pylist()) or search(column))
        for _ in range(3):
            assert index.overlaps_array(pa.array(texts)).tolist() == expected
            assert index.overlaps_array(pa.array(texts[::-1])).tolist() == expected[::-1]
        if remembered > 2:
            assert searched == [texts]  # once, then remembered
        else:
            assert sum(map(len, searched)) > len(texts)
