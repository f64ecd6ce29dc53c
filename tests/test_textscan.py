"""The compiled per-text passes agree with the plain Python rules they stand for."""

from __future__ import annotations

import random
import re
import string

import numpy as np
import pyarrow as pa

from ctpipe import textscan
from ctpipe.dedup import squash

ALPHABET = string.ascii_letters + string.digits + string.punctuation + " \t\n\r\x0b\x0c\x00\x01"


def _texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 40))) for _ in range(n)]


def test_hashes_depend_on_the_bytes_only():
    texts = _texts(3000)
    column = pa.array(["padding"] + texts)
    whole, sliced = textscan.hashes(column)[1:], textscan.hashes(column.slice(1))
    assert whole.tolist() == sliced.tolist()  # wherever a text sits in the buffer
    assert textscan.hashes(pa.array(texts, pa.large_string())).tolist() == whole.tolist()
    distinct = {t: h for t, h in zip(texts, whole.tolist())}
    assert len(set(distinct.values())) == len(distinct)
    assert textscan.hashes(pa.array(["ab", "ab\x00", "ab\x00\x00", None, ""])).tolist()[3] == textscan.hashes(pa.array([""]))[0]
    assert len(set(textscan.hashes(pa.array(["ab", "ab\x00", "ab\x00\x00", ""])).tolist())) == 4


def test_squashed_hashes_are_the_hashes_of_the_squashed_text():
    texts = _texts(3000, seed=1) + ["Ärger, ÖL!", "What is 2 plus 3?"]
    got, ascii = textscan.squashed_hashes(pa.array(texts))
    assert ascii.tolist() == [t.isascii() for t in texts]
    expected = textscan.hashes(pa.array([squash(t) for t in texts], pa.binary()))
    assert got[ascii].tolist() == expected[ascii].tolist()


def test_normalized_lines_are_the_texts_lowered_with_single_spaces():
    texts = _texts(2000, seed=2) + ["Ünïcode, left out", "", "  ", "WHAT\tIS 57 -- PLUS 38!!"]
    blob, taken = textscan.normalized_lines(pa.array(texts).slice(1))
    table = bytes.maketrans(string.ascii_uppercase.encode() + textscan.IGNORED,
                            string.ascii_lowercase.encode() + b" " * len(textscan.IGNORED))
    plain = [t.isascii() and "\0" not in t for t in texts[1:]]
    expected = b"".join(re.sub(rb"  +", b" ", f" {t} ".encode().translate(table)) + b"\0"
                        for t, p in zip(texts[1:], plain) if p)
    assert taken.tolist() == plain and 0 < sum(plain) < len(plain)
    assert blob == expected
    assert np.count_nonzero(np.frombuffer(blob, np.uint8) == 0) == taken.sum()
