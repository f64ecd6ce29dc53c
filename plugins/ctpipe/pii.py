"""Scrubbing personal data and secrets from prompts and completions before they reach a dataset.

Each kind has a cheap pre-check (a substring or a short pattern) that rules most texts out before
its full pattern runs, so the common case (no PII) costs a few substring searches. What is found
is replaced by a placeholder naming the kind (``<EMAIL>``, ``<PHONE>``, ``<CARD>``, ``<SECRET>``)
and counted per kind. Card numbers must pass the Luhn check, so order numbers and sums are kept.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")
# International or national numbers with at least 9 digits in groups: "+1 415-555-0100", "(030) 1234 5678";
# not the seconds of a time ("10:00:01.040000+00:00", which a record's raw text holds in every line).
_PHONE = re.compile(r"(?<![\w+])(?<!\d:)(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,5}\)[ .-]?|\d{2,5}[ .-])\d{3,4}[ .-]?\d{3,5}(?![\w-])")
_SECRET = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
    r"|(?<=Bearer )[A-Za-z0-9._~+/-]{20,}=*"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"
)
_SECRET_HINTS = ("sk-", "AKIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "xox", "eyJ", "Bearer ", "PRIVATE KEY")
_MANY_DIGITS = re.compile(r"\d(?:[ ().+-]{0,2}\d){8}")  # 9+ digits close together: a phone or card may be here
# Every pre-check above as one RE2 pattern, run over a whole column at once (see scrub_many).
PRECHECK = "|".join([re.escape(h) for h in ("@", "sk-", "AKIA", "xox", "eyJ", "Bearer ", "PRIVATE KEY")]
                    + [r"gh[pousr]_", _MANY_DIGITS.pattern])


# An address a text ends in before its domain does: a quarantined line that damage, a size limit or
# its writer cut short. The full pattern needs the whole domain, and let "jane.smith@gm" through.
_CUT_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]*\Z")


def scrub_cut_short(texts: pa.Array, found: Counter) -> pa.Array:
    """``texts`` (quarantined raw lines, cut anywhere, already through :func:`scrub_array`) with an
    e-mail address they end in before its domain does replaced, and counted, as a whole one is.

    >>> c = Counter(); scrub_cut_short(pa.array(['{"q": "reach me at jane.smith@gm', "<EMAIL>", None]), c).to_pylist()
    ['{"q": "reach me at <EMAIL>', '<EMAIL>', None]
    >>> dict(c)
    {'email': 1}
    """
    hit = pc.fill_null(pc.match_substring_regex(texts, r"@[A-Za-z0-9.-]*$"), False)
    at = np.flatnonzero(hit.to_numpy(zero_copy_only=False))
    if not len(at):
        return texts
    clean = []
    for text in texts.take(at).to_pylist():
        text, n = _CUT_EMAIL.subn("<EMAIL>", text)
        found["email"] += n
        clean.append(text)
    return pc.replace_with_mask(texts, hit, pa.array(clean, pa.string()))


def luhn(digits: str) -> bool:
    """The Luhn checksum of card numbers.

    >>> luhn("4111111111111111"), luhn("4111111111111112")
    (True, False)
    """
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def scrub(text: str, found: Counter | None = None) -> str:
    """``text`` with e-mail addresses, phone and card numbers and keys/tokens replaced; counts into ``found``.

    >>> c = Counter(); scrub("mail a.b@example.com or +1 415-555-0100, card 4111 1111 1111 1111", c)
    'mail <EMAIL> or <PHONE>, card <CARD>'
    >>> sorted(c.items()), scrub("What is 12 plus 34? 46")
    ([('card', 1), ('email', 1), ('phone', 1)], 'What is 12 plus 34? 46')
    """
    counts = found if found is not None else Counter()
    if any(h in text for h in _SECRET_HINTS):
        text, n = _SECRET.subn("<SECRET>", text)
        if n:
            counts["secret"] += n
    if "@" in text:
        text, n = _EMAIL.subn("<EMAIL>", text)
        if n:
            counts["email"] += n
    return _numbers(text, counts)


# Every character a card or phone number can hold. Their matches lie inside runs of these, and
# their lookarounds look one character out (two before, for a time's seconds), which is never in a
# run's set: so scrubbing each run (with two characters before it and one after) is scrubbing the
# text, minus scanning all of it twice. The gate (nine digits close together somewhere) is made of
# those characters too, so it is asked of the runs as well.
_NUMBER_RUNS = re.compile(r"[\d ().+-]{8,}")  # no card or phone number is shorter


def _numbers(text: str, counts: Counter) -> str:
    """``text`` with card and phone numbers replaced, when it has nine digits close together."""
    runs = list(_NUMBER_RUNS.finditer(text))
    if not any(_MANY_DIGITS.search(run.group()) for run in runs):
        return text

    def card(m: re.Match) -> str:
        digits = re.sub(r"\D", "", m.group())
        # Written without a space or dash, a card has 13 to 16 digits; longer bare runs are ids and
        # times (an OTLP span's nanoseconds, in a quarantined raw line, pass Luhn one time in ten).
        if 13 <= len(digits) <= (16 if digits == m.group() else 19) and luhn(digits):
            counts["card"] += 1
            return "<CARD>"
        return m.group()

    out, done = [], 0
    for run in runs:
        start, end = run.span()
        a, b = max(start - 2, 0), min(end + 1, len(text))
        window, n = _PHONE.subn("<PHONE>", _CARD.sub(card, text[a:b]))
        if n:
            counts["phone"] += n
        middle = window[start - a:len(window) - (b - end)]  # the characters around it never change
        if middle != run.group():
            out += [text[done:start], middle]
            done = end
    return "".join(out + [text[done:]]) if out else text


def scrub_array(texts: pa.Array, found: Counter, repeats: bool = True) -> pa.Array:
    """:func:`scrub` over a column of texts, counting what it finds in every occurrence. With
    ``repeats`` (chat messages, which repeat their system prompt, in production often kilobytes),
    the pre-check runs vectorized over the distinct texts only and each text that needs it is
    scrubbed once; without (completions, nearly all distinct), over the column as it is, since
    finding the distinct texts would cost more than it saves.

    >>> c = Counter(); texts = pa.array(["2 plus 2", "write to x@y.org", None, "write to x@y.org"])
    >>> scrub_array(texts, c).to_pylist(), dict(c)
    (['2 plus 2', 'write to <EMAIL>', None, 'write to <EMAIL>'], {'email': 2})
    >>> scrub_array(texts, c, repeats=False).to_pylist() == scrub_array(texts, c).to_pylist(), c["email"]
    (True, 6)
    """
    encoded = pc.dictionary_encode(texts) if repeats else None
    distinct = encoded.dictionary if repeats else texts
    hit = pc.fill_null(pc.match_substring_regex(distinct, PRECHECK), False)
    at = np.flatnonzero(hit.to_numpy(zero_copy_only=False))
    if not len(at):
        return texts
    uses = (np.bincount(encoded.indices.drop_null().to_numpy(), minlength=len(distinct))[at] if repeats
            else np.ones(len(at), np.int64))  # occurrences of each suspect
    suspects = distinct.take(at).to_pylist()
    clean = []
    for n_uses, text in zip(uses.tolist(), suspects):
        kinds: Counter = Counter()
        clean.append(scrub(text, kinds))
        for kind, n in kinds.items():
            found[kind] += n * n_uses
    if clean == suspects:  # numbers or hints, but nothing to scrub
        return texts
    scrubbed = pc.replace_with_mask(distinct, hit, pa.array(clean, pa.string()))
    return scrubbed.take(encoded.indices) if repeats else scrubbed
