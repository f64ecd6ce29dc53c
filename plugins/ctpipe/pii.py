"""Scrubbing personal data and secrets from prompts and completions before they reach a dataset.

Each kind has a cheap pre-check (a substring or a short pattern) that rules most texts out before
its full pattern runs, so the common case (no PII) costs a few substring searches. What is found
is replaced by a placeholder naming the kind (``<EMAIL>``, ``<PHONE>``, ``<CARD>``, ``<SSN>``,
``<IBAN>``, ``<SECRET>``) and counted per kind. Card numbers must start and be as long as a card
network's, and pass the Luhn check, IBANs and social security numbers pass their own checks, so
order numbers and most long answers are kept; rewards are labeled from the texts as
written, so one that is not kept still labels right.
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# A local part may hold letters of any script (josé@), and so may a domain (bücher.de); "@" may be
# written %40 (in a URL) or \u0040 (in a quarantined record's raw JSON). Not after a backslash: in raw
# JSON, "\njane@x.org" is a new line and then the address. Not a method call (q@k.transpose(...)).
# A full-width "＠" is how Chinese and Japanese text writes it. A mark that combines with the letter
# before it (decomposed é, the vowel signs of Devanagari) is part of a word, which \w alone is not.
# An apostrophe may join a local part's words (o'brien@), and a full-width dot, as a Japanese input
# method in full-width mode writes (ｔａｒｏ．ｙａｍａｄａ＠).
_ATS = ("@", "＠", "%40", "\\u0040")
_AT = "(?:" + "|".join(map(re.escape, _ATS)) + ")"
_MARKS = "".join(c for c in map(chr, range(0x300, 0x10000)) if unicodedata.category(c) in ("Mn", "Mc", "Me"))
# Chinese, Japanese and Korean text runs into an address with no space (邮箱zhangwei@163.com谢谢): its
# letters are no top-level domain's, and those before an address are kept (see _address).
_CJK = ("\u1100-\u11ff\u2e80-\u2fdf\u3040-\u30ff\u3100-\u318f\u31a0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
        "\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff")
# A local part and its "@": begun where a word begins (or after a raw line's escaped new line, or an
# underscore that begins one: Markdown's italics, _jane@x.org_; not after each of a word's, which
# scanned a snake_case word again from each), not by an apostrophe, which quotes it ('jane@x.org'),
# nor as a URL's user (ssh://git@github.com/...).
_LOCAL_AT = (rf"(?<!\\)(?<!://)(?:(?<=\\[nrtbf])|(?<![\w{_MARKS}.．%+-])|(?<=_)(?<![\w{_MARKS}.．%+-]_))"
             rf"(?!['_])[\w{_MARKS}.．%+'-]+" + _AT)
# A domain's labels hold no "_" (self.lm_head), and it is no object's attribute (x@self.weight.T) nor an
# scp path (git@github.com:org/repo.git); its top-level domain is a real one (see _address). Its dots
# may be full-width ones, as a Japanese input method in full-width mode writes all of it (ｔａｒｏ＠ｘ．ｊｐ).
_EMAIL = re.compile(_LOCAL_AT + rf"(?:[^\W_]|[{_MARKS}.．-])+[.．](?P<tld>(?:[^\W\d_{_CJK}]|[{_MARKS}]){{2,}}|[{_CJK}]{{2,}})"
                    rf"(?![^\W_{_CJK}]|[{_MARKS}]|[.．][^\W\d_]{{2}}|:[\w~.-]*/)")
# A password in a URL (postgres://app:hunter2@db:5432, https://user:pass@host): the user and the
# password; a user alone holding a digit is a key (Sentry's DSNs: https://<key>@o1.ingest.sentry.io/1).
# Each run taken whole, possessively: where no "@" followed (a query string after the host, text with
# no spaces after a URL), backtracking tried every split of the run at its digits, quadratic in its
# length (400,000 characters took 42 s).
_URL_CREDENTIALS = re.compile(r"(?<=://)(?:[^\s:/@]*+:[^\s/@]++|[^\s:/@\d]*+\d[^\s:/@]*+)(?=@)")
# Spaces a number is written with: a plain one, the no-break and thin ones of French typography and
# of text copied from the web, a figure space, and the ideographic one of Chinese and Japanese text.
# Dashes: hyphens, en dash, minus sign, full-width hyphen-minus.
_SPACES = " \u00a0\u2007\u2009\u202f\u3000"
_DASH = "\u2010-\u2013\u2212\uff0d"
_WIDE = "＋（）．／"  # read as ASCII's (see _AS_ASCII)
# A card's digits come in groups of four (Amex's and Diners' 4-6-5 and 4-6-4), or bare; a group
# after a space, a dash or a dot (or two spaces), or all after slashes (a slash before a card is
# another number's: 2184/4111 1111 1111 1111; not a path's folders, /4111/1111/1111/1111/). Not a
# decimal's digits (3.4111...), but after an abbreviation's dot (Card No.4111...).
_CARD_SEP = f"[.{_SPACES}{_DASH}-]{{0,2}}"  # a word processor's en dash too
_CARD = re.compile(rf"(?<![\d-])(?<!\d\.)\d{{4}}(?:(?:{_CARD_SEP}\d{{4}}){{2}}{_CARD_SEP}\d{{1,4}}(?P<tail>{_CARD_SEP}\d{{1,3}})?"
                   rf"|{_CARD_SEP}\d{{6}}{_CARD_SEP}\d{{4,5}}|(?<!/\d{{4}})/\d{{4}}/\d{{4}}/\d{{1,4}}(?!/))(?![\d-]|\.\d)")
# Phone numbers, in groups (or international, after a plus sign). Where one may start and end: not
# inside a word or a longer number (its letters in ASCII: Chinese text runs into the number it gives,
# on both sides), but after a raw JSON line's escaped new line ("\n" ends in a letter); not a time's
# seconds ("10:00:01.040000+00:00", which every raw line holds), nor the last groups of a number
# written in groups of three ("1 000 000 000", "192.168.100.200"), nor before a group of three digits
# more (a list: 010 020 030 040 050 060). Before a shorter number (415-555-0132 24 hours, 030 12345678
# 9-17 Uhr), or beside a comma (a CSV row: 34,415-555-0132,41), it is one. After its label with no
# space (Tel415-555-0100, Mobile0171 1234567): the label's last letters, four at most, as the runs'
# windows hold.
_STARTS = (rf"(?:(?<=\\[nrt])|(?<![A-Za-z\d_+/-])"
           r"|(?<=[lxbeLXBE])(?:(?<=(?i:tel|fax|mob))|(?<=(?i:cell|hone|bile))))")  # the last letter first: cheaper
_ENDS = r"(?!(?!x\d)[A-Za-z\d_-]|\.\d)"  # an extension after an x (415-555-0100x23) stays
_NOT_IN_A_LIST = (rf"(?<!\d[.:{_SPACES}])", rf"(?![:{_SPACES}]\d{{3}})")  # before, after
_SEP = f"[.{_SPACES}{_DASH}-]"
_MARKED_SEP = f"[{_DASH}-]"
_PHONE = re.compile(
    _STARTS + "(?:"
    # Forms no list of numbers takes, beside another number all the same (212-555-0147 212-555-0148,
    # a house number after it, a count before it): international after a plus sign and a country code
    # (none begins with 0: +0100 is a time zone's offset), 8 to 15 digits (E.164); North American with
    # dashes or its area code in () (with dots, it may be a version's or an OID's numbers).
    rf"\+(?![0０])\d(?:[().{_SPACES}{_DASH}-]{{0,2}}\d){{7,14}}"
    rf"|(?:1{_MARKED_SEP})?(?:\([2-9]\d\d\){_SEP}?|[2-9]\d\d{_MARKED_SEP})[2-9]\d\d{_MARKED_SEP}\d{{4}}"
    + "|" + _NOT_IN_A_LIST[0] + "(?:"
    # A trunk 0 (030 12345678, 010-12345678, 06-12345678, 0171 1234567, 030/12345678), an area code in ().
    rf"(?:\([0０]?\d{{2,4}}\){_SEP}?|[0０]\d{{1,4}}(?:{_SEP}|[{_SPACES}]?/[{_SPACES}]?))\d{{2,8}}(?:{_SEP}\d{{2,6}}){{0,3}}"
    rf"|8{_SEP}?(?:\(\d{{3}}\)|\d{{3}}){_SEP}?\d{{3}}{_SEP}\d{{2}}{_SEP}\d{{2}}"  # Russia's trunk 8: 8 (916) 123-45-67
    # North American: 415-555-0100, 1-800-555-0100, 1 (800) 555-0100.
    rf"|(?:1{_SEP}?)?(?:\([2-9]\d\d\){_SEP}?|[2-9]\d\d{_SEP})[2-9]\d\d{_SEP}\d{{4}}"
    rf"|1[3-9]\d{_SEP}\d{{4}}{_SEP}\d{{4}}"  # a Chinese mobile: 138-0013-8000
    rf"|(?<=[{_CJK}：])1[3-9]\d{{9}}"  # or bare, as Chinese text gives it (手机号是13800138000), not a math answer
    # An Indian mobile after its trunk 0, in spaces: bare, 98765 43210 is a pair of numbers as often
    # (60000-70000, ZIP codes), as a Spanish 612 34 56 78 is a list of them (its +34 is read above).
    rf"|0[6-9]\d{{4}}[{_SPACES}]\d{{5}}"
    ")" + _NOT_IN_A_LIST[1] + ")" + _ENDS)
# Keys and tokens by their prefixes, and by the label they follow: a bearer token, any secret (AWS's,
# a client's, JWT_SECRET, SECRET_KEY_BASE), any token (session, access, refresh, a bot's, a URL's
# token=), a session id, an API, encryption, private, signing or subscription key, a signature (a
# presigned URL's), an Authorization header's credentials, a password (quoted, or bare holding a digit
# or a symbol; in the languages a support chat is most often in). A labelled value holds a digit (code's
# names do not: get_session_token(), process.env.CLIENT_SECRET), and a password is no variable's name
# (${DB_PASSWORD}).
_KEY_LABELS = (r"[\w-]*secret(?:[_ -]?(?:access[_ -]?)?key)?(?:[_-]?base)?|[\w-]*token|session[_-]?id"
               r"|[\w-]*signature|sig|[\w-]*(?:api|encryption|private|signing|subscription|master|account"
               r"|shared[_-]?access)[_ -]?key")
# In Python's patterns a label's words begin where a word does: tried at every character of a long
# word (a DNA sequence, base64url data), `[\w-]*token` ran to the word's end each time, quadratic in
# its length (a 20,000-character word took 17 s). RE2, linear whatever the pattern, has no lookbehind.
_KEY_LABELS_AT = _KEY_LABELS.replace(r"[\w-]*", r"(?<![\w-])[\w-]*")
# A password's label: in any of those languages, a passphrase, and as configs shorten it: MYSQL_PWD,
# an ODBC connection string's Pwd=, an environment's DB_PASS (in capitals: low_pass = 8000.0 is a
# filter's), a service's db_pass or ansible_become_pass.
_PASSWORDS = (r"password|passwd|passphrase|pwd|(?-i:_PASS)"
              r"|(?:db|database|root|admin|ssh|smtp|ftp|mysql|redis|become|sudo|vault|user|mail|proxy|ldap)_pass"
              r"|passwort|mot de passe|contrase[ñn]a|senha|wachtwoord|has[łl]o|пароль|密码|パスワード|비밀번호")
# "is" after a label, in either engine alike: without case folding (Python's takes İ for i, RE2's
# not), ending where an ASCII word does (RE2's \b is ASCII's); in any case (MY PASSWORD IS ...).
_IS = "(?-i:[iI][sS])"
_IS_AT = rf"{_IS}(?a:\b)"  # Python's patterns'; RE2's \b is ASCII's already
# A quote, and the backslashes that escape it in JSON text (a log line's, a quarantined raw line's,
# JSON in JSON): "password": "..." written \"password\": \"...\" was no label to the patterns.
_Q = r"(?:\\*[\"'])"
# In a value, a run of backslashes that escapes no quote, taken whole: none is tried again from within.
_NO_QUOTE = r"\\++(?![\"'])"
# A path, kept after a label (PWD=/home/ann/src, pwd=./build2, <pwd>C:\work</pwd>): a password does not
# begin so.
_PATH = r"(?:\.{1,2}[\\/]|[/~][\w.-]*[\\/]|[A-Za-z]:[\\/])"
# A label of any case and what gives its value: the gate of those alternatives, in RE2 as in Python
# (a bare word such as "session" or "password" is in too many texts to scan each whole).
# Python's \s, written out: RE2's is ASCII's alone, and the gate is asked in both.
_WHITE = "[" + "".join(c for c in map(chr, range(0x3001)) if c.isspace()) + "]"
_GIVES = "[:=：]"  # a full-width colon in Chinese and Japanese text
_LABELLED = (rf"(?i:(?:{_KEY_LABELS}|authorization|{_PASSWORDS}){_Q}?{_WHITE}*{_GIVES}"
             rf"|(?:{_KEY_LABELS}|{_PASSWORDS}){_WHITE}+{_IS}\b|<(?:{_PASSWORDS})>)")
_LABELLED_AT = re.compile(_LABELLED.replace(_KEY_LABELS, _KEY_LABELS_AT).replace(rf"{_IS}\b", _IS_AT))
# A key begins after no ASCII letter or digit (task-, disk- hold no key), or after a raw line's
# escaped new line or tab (\nsk-...), not where a word begins: Chinese and Japanese text runs into it
# (APIキーはsk-...), and so do names (GITHUB_TOKEN_ghp_...).
_KEY_AT = r"(?:(?<=\\[nrtbf])|(?<![A-Za-z0-9]))"
# The same, where RE2 asks, which has no lookbehind: the character before taken in.
_KEY_AFTER = r"(?:^|[^A-Za-z0-9]|\\[nrtbf])"
# A key's digit is looked for in its first 256 characters: looked for to the end of a run from every
# label in it, a run of labels ("sk-sk-sk-...", "token=token=...") took time quadratic in its length.
_SECRET = re.compile(
    _KEY_AT + r"(?:sk-(?=[\w-]{0,255}\d)[A-Za-z0-9_-]{16,}|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}|xox[abeprs]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}"
    r"|AIza[A-Za-z0-9_-]{35}|eyJ[A-Za-z0-9_-]{8,}\.[\w-]{8,}\.[\w-]{8,}|hf_[A-Za-z0-9]{30,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|npm_[A-Za-z0-9]{36}|whsec_[A-Za-z0-9+/=]{24,}|SG\.[A-Za-z0-9_-]{16,}\.[\w-]{16,}|ya29\.[A-Za-z0-9_-]{20,}"
    r"|dckr_pat_[A-Za-z0-9_-]{20,})"
    # Webhooks' URLs, their slashes escaped too (JSON as PHP's json_encode writes it, in a message)
    r"|hooks\.slack\.com\\*/services\\*/(?:[A-Za-z0-9]|\\*/)+|discord(?:app)?\.com\\*/api\\*/webhooks\\*/\d+\\*/[\w-]+"
    r"|(?<=/bot)[0-9]+:[\w-]{30,}"  # a Telegram bot's token in its API's URL
    rf"|(?P<keep>{_KEY_AT}(?:Bearer|bearer|BEARER)[ \t]+|(?i:authorization){_Q}?\s*{_GIVES}\s*{_Q}?(?i:basic|token|bearer)[ \t]+"
    rf"|(?i:{_KEY_LABELS_AT}){_Q}?\s*{_GIVES}\s*{_Q}?)"
    r"(?=[A-Za-z0-9._~+/=#!@$%^&*:-]{0,255}\d)[A-Za-z0-9._~+/=#!@$%^*:-](?:[A-Za-z0-9._~+/=#!@$%^*:-]|&(?!\w+=)){19,}"
    # A key said in a sentence (my API key is 3f9a..., base64's + / = too): a token alone, with twelve
    # letters and digits in a row, not a URL, a path or a name (the URL to get the token is https://...,
    # the token is bert-base/vocab.txt:30522, the model is gpt-4o-mini-2024-07-18).
    rf"|(?P<said>(?i:{_KEY_LABELS_AT})\s+{_IS_AT}(?:\s*{_GIVES})?\s*{_Q}?)"
    r"(?![a-z][a-z0-9+.-]*://)(?=[A-Za-z0-9_.+/=-]*?[A-Za-z0-9]{12})(?=[A-Za-z0-9_.+/=-]*\d)"
    r"[A-Za-z0-9_.+/=-]{20,}(?![A-Za-z0-9_.+/=:-])"
    # A password given in code or config, quoted: password = "hunter2!", "passwd": "...", to its quote
    # (a backslash in it, not those that escape its quote; taken whole, possessively: backtracking
    # into a run of backslashes took time quadratic in its length).
    rf"|(?P<quoted>(?i:{_PASSWORDS}){_Q}?\s*{_GIVES}\s*{_Q})(?![$<{{%])(?![A-Z][A-Z0-9_]*{_Q})(?![*•]+{_Q})"
    rf"(?:[^\"'\s\\]|{_NO_QUOTE}){{6,}}+(?={_Q})"
    # Or an XML element's: <password>...</password>, as Maven's settings and .NET configs hold one,
    # with a digit or a symbol (a help page's <password>string</password>, a mask, are kept).
    rf"|(?P<element><(?i:{_PASSWORDS})>)(?![$<{{%])(?![*•]+<)(?!{_PATH})(?=[^<\s\"]*[\d!@#$%^*])[^<\s\"]{{6,}}"
    rf"(?=</(?i:{_PASSWORDS})>)"
    # Or bare (Password: hunter2!), to a space, quote, comma or a URL's next parameter, when it holds a
    # digit or a symbol: words ("password: at least 8 characters"), code (password = input(),
    # os.environ['PW'], a shell's `...`), a mask (********) and a path are kept; to
    # the backslashes that escape a quote after it (its JSON's).
    rf"|(?P<bare>(?i:{_PASSWORDS}){_Q}?(?:\s*{_GIVES}|\s+{_IS_AT}(?:\s*{_GIVES})?)[ \t]*)(?![$<{{%\"'`])"
    rf"(?![*•]+(?![^\s\"',;]))(?!{_PATH})"
    rf"(?=[^\s\"',;&()\[\]]*[\d!@#$%^*])(?:[^\s\"',;&()\[\]\\]|{_NO_QUOTE}|&(?!\w+=)){{6,}}"
    # On a command line: curl -u user:password, mysql -u root -pPassword, sshpass -p 'password'; and
    # docker login --password password, holding a digit or a symbol (its help's --password string).
    rf"|(?P<cli>(?:\s(?:-u|--user)\s+[^\s:]+:|\s-u\s*\S+\s+-p|\bsshpass\s+-p\s*|\s--password\s+(?=\S*[\d!@#$%^*]))[\"']?)"
    rf"(?![$<{{%\[-])(?:[^\s\"'\\]|{_NO_QUOTE}){{6,}}"
    # A key block, to its end or the text's (an answer cut short by its token limit, a raw line cut).
    r"|-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
)
# Where _SECRET may match: each of its forms' start, as long as the shortest it takes, in the syntax
# RE2 and Python's re read alike (Python's \b made ASCII's, as RE2's is; a key's start _KEY_AT's). A
# word alone let through everyday texts ("sk-" is in task- and risk-, "xox" in xoxo, "hf_" in
# hf_hub_download, " -u" in git push -u), each then scanned whole by _SECRET: 6 ms a completion of 7 KB.
_W = _WHITE[1:-1]  # Python's \s, written out: RE2's is ASCII's alone
_KEY_FORMS = (
    r"sk-[A-Za-z0-9_-]{16}", r"[sr]k_(?:live|test)_[A-Za-z0-9]{16}", r"(?:AKIA|ASIA)[0-9A-Z]{16}",
    r"gh[pousr]_[A-Za-z0-9]{30}", r"github_pat_[A-Za-z0-9_]{22}", r"xox[abeprs]-[A-Za-z0-9-]{10}", r"xapp-[A-Za-z0-9-]{10}",
    r"AIza[A-Za-z0-9_-]{35}", r"eyJ[A-Za-z0-9_-]{8,}\.", r"hf_[A-Za-z0-9]{30}", r"glpat-[A-Za-z0-9_-]{20}",
    r"npm_[A-Za-z0-9]{36}", r"whsec_[A-Za-z0-9+/=]{24}", r"SG\.[A-Za-z0-9_-]{16,}\.", r"ya29\.[A-Za-z0-9_-]{20}",
    r"dckr_pat_[A-Za-z0-9_-]{20}", r"(?:Bearer|bearer|BEARER)[ \t]+[A-Za-z0-9._~+/=#!@$%^&*:-]{20}")
_SECRET_STARTS = (
    *(_KEY_AFTER + form for form in _KEY_FORMS), r"hooks\.slack\.com\\*/services", r"discord(?:app)?\.com\\*/api",
    r"/bot[0-9]+:", "PRIVATE KEY", rf"[{_W}](?:-u|--user)[{_W}]+[^{_W}:]+:", rf"[{_W}]-u[{_W}]*[^{_W}]+[{_W}]+-p",
    rf"\bsshpass[{_W}]+-p", rf"[{_W}]--password[{_W}]")
# 9+ digits close together: a phone or card may be here (up to three between two: 030 / 1234 5678).
_MANY_DIGITS = re.compile(rf"\d(?:[().+/{_WIDE}{_SPACES}{_DASH}-]{{0,3}}\d){{8}}")
# Whether the secrets' pattern may match, in RE2 for a column's suspects at once: Python's re tried
# the case-blind labels at every character, the most of a suspect's scrubbing.
SECRETS_GATE = "|".join([*_SECRET_STARTS, _LABELLED])
_SECRETS_GATE_AT = re.compile("|".join(_SECRET_STARTS).replace(r"\b", r"(?a:\b)"))
# Every pre-check above as one RE2 pattern, run over a whole column at once (see scrub_array). RE2's \d
# is ASCII only, Python's any script's digits (full-width ones, say): the pre-check takes those too.
PRECHECK = "|".join([re.escape(h) for h in _ATS] + [SECRETS_GATE, _MANY_DIGITS.pattern.replace(r"\d", r"\p{Nd}")])


# What a text may end in when it was cut short (by damage, a size limit or its writer) inside an
# address or a number: the full patterns need the whole of one, and let "jane.smith@gm" through.
_CUT_EMAIL = re.compile(_LOCAL_AT + rf"[\w{_MARKS}.-]*\Z")
_CUT_NUMBER = re.compile(rf"\+?\d(?:[(){_SPACES}{_DASH}-]{{0,2}}\d){{5,}}\Z")
# Either, in RE2, for a column at once, over each text's last characters only: it asks what a text
# ends in, and the scan of whole raw lines for it cost more than the rest of their scrubbing.
_CUT_TAIL = 256
_CUT = _AT + r"[\p{L}\p{M}\p{N}_.-]*$|" + _CUT_NUMBER.pattern.replace(r"\d", r"\p{Nd}").replace(r"\Z", "$")


def scrub_cut_short(texts: pa.Array, found: Counter, within: int | None = None) -> pa.Array:
    """``texts`` (quarantined raw lines, cut anywhere, already through :func:`scrub_array`) with an
    e-mail address or a number of six digits or more they end in replaced, and counted, as a whole
    one is (a number as a phone's). With ``within``, only those of at most that many characters: a
    longer one is published cut there, and what it ends in is not published.

    >>> c = Counter(); texts = ['{"q": "reach me at jane.smith@gm', '{"q": "call +1 415-555-01', "<EMAIL>", None]
    >>> scrub_cut_short(pa.array(texts), c).to_pylist()
    ['{"q": "reach me at <EMAIL>', '{"q": "call <PHONE>', '<EMAIL>', None]
    >>> sorted(c.items())
    [('email', 1), ('phone', 1)]
    """
    tails = pc.utf8_slice_codeunits(texts, -_CUT_TAIL)  # what a text ends in: not a scan of all of it
    hit = pc.fill_null(pc.match_substring_regex(tails, _CUT), False)
    if within is not None:
        hit = pc.and_(hit, pc.fill_null(pc.less_equal(pc.utf8_length(texts), within), False))
    at = np.flatnonzero(hit.to_numpy(zero_copy_only=False))
    if not len(at):
        return texts
    clean = []
    for text in texts.take(at).to_pylist():
        for kind, pattern, placeholder in (("email", _CUT_EMAIL, "<EMAIL>"), ("phone", _CUT_NUMBER, "<PHONE>")):
            text, n = pattern.subn(placeholder, text)
            if n:
                found[kind] += n
        clean.append(text)
    return pc.replace_with_mask(texts, hit, pa.array(clean, pa.string()))


# An escape of a character after a run of backslashes: where the run is odd, an escape (after escaped
# backslashes); where it is even, the escape of a text held in a string and escaped again (messages
# kept as their JSON text, as OTLP's attributes hold them, in a raw line). JSON's (\uXXXX, a surrogate
# pair's two), or Python's (\xXX, \uXXXX, \UXXXXXXXX: a detail quotes values as Python writes them),
# which only an odd run makes.
_JSON_ESCAPE = re.compile(r"(?<!\\)(\\+)u(?:([dD][89abAB][0-9a-fA-F]{2})\1u([dD][c-fC-F][0-9a-fA-F]{2})"
                          r"|([0-9a-fA-F]{4}))")
_PYTHON_ESCAPE = re.compile(r"(?<!\\)(\\+)(?:x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))")
# JSON's escaped solidus, as PHP's json_encode and some Java writers write every "/": a webhook's URL
# (hooks.slack.com\/services\/...) was no URL to the patterns.
_JSON_SOLIDUS = re.compile(r"(?<!\\)(\\+)/")


def _writable(c: int) -> bool:
    """Whether a character can be written as itself: no control, format, private or unassigned one."""
    return c <= 0x10FFFF and not unicodedata.category(chr(c)).startswith("C")


def _json_character(m: re.Match) -> str:
    """A JSON escape's character (not a quote or a backslash, which the JSON around it needs escaped),
    after an odd run of backslashes, or after a run of 2, 6, ...: the escape of JSON held in JSON."""
    run = len(m[1])
    c = 0x10000 + ((int(m[2], 16) - 0xD800) << 10) + int(m[3], 16) - 0xDC00 if m[2] else int(m[4], 16)
    if c in (0x22, 0x5C) or not _writable(c) or (m[2] and run > 2):  # a backslash between a pair's halves
        return m[0]
    return m[1][:-1] + chr(c) if run % 2 else m[1][:-2] + chr(c) if run % 4 == 2 else m[0]


def _solidus(m: re.Match) -> str:
    """A JSON escape's "/" after an odd run of backslashes; an even run is a text's backslashes before
    a slash (a regex's escaped slash, in JSON), kept."""
    return m[1][:-1] + "/" if len(m[1]) % 2 else m[0]


def _python_character(m: re.Match) -> str:
    """A Python escape's character, after an odd run of backslashes (Python's text is not escaped twice)."""
    c = int(m[2] or m[3] or m[4], 16)
    return m[1][:-1] + chr(c) if len(m[1]) % 2 and _writable(c) else m[0]


def unescaped(texts: pa.Array, python: bool = False) -> pa.Array:
    r"""Raw JSON ``texts`` (or, with ``python``, texts quoting values as Python writes them) with their
    escapes of characters written as the characters, but for what JSON needs escaped. A writer of
    ASCII alone (Python's json.dumps, by default) escapes every character past it, Go's and Rails'
    ``<``, ``>`` and ``&`` too: a number or an address right after one (电话：138-0013-8000, a
    no-break space before a card, <jane@x.org>) ran into the escape's hex digits, where no pattern
    saw it.

    >>> unescaped(pa.array([r'{"q": "\u7535\u8bdd\uff1a138-0013-8000 \\u0041 \ud83d\ude00 \u0022 \u003c"}'])).to_pylist()
    ['{"q": "电话：138-0013-8000 A 😀 \\u0022 <"}']
    >>> unescaped(pa.array([r'{"attr": "[{\"content\": \"\\uff1a138-0013-8000\"}]"}'])).to_pylist()
    ['{"attr": "[{\\"content\\": \\"：138-0013-8000\\"}]"}']
    >>> unescaped(pa.array([r"{'content': '06\xa012\xa034', 'x': '\\xa0'}"]), python=True).to_pylist()
    ["{'content': '06\xa012\xa034', 'x': '\\\\xa0'}"]
    """
    hit = pc.fill_null(pc.match_substring_regex(texts, r"\\[xuU]" if python else r"\\[u/]"), False)
    at = np.flatnonzero(hit.to_numpy(zero_copy_only=False))
    if not len(at):
        return texts
    written = [_PYTHON_ESCAPE.sub(_python_character, text) if python else _json_unescaped(text)
               for text in texts.take(at).to_pylist()]
    return pc.replace_with_mask(texts, hit, pa.array(written, pa.string()))


def _json_unescaped(text: str) -> str:
    text = _JSON_ESCAPE.sub(_json_character, text)
    return _JSON_SOLIDUS.sub(_solidus, text) if "\\/" in text else text


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


def scrub(text: str, found: Counter | None = None, secrets: bool | None = None, numbers: bool = True) -> str:
    """``text`` with e-mail addresses, phone and card numbers and keys/tokens replaced; counts into ``found``.
    ``secrets`` says whether the text passes :data:`SECRETS_GATE`, where a caller asked RE2 already;
    without ``numbers``, phone and card numbers are kept (a math answer may look like one; no math
    answer is an IBAN, or a number a text calls a social security number).

    >>> c = Counter(); scrub("mail a.b@example.com or +1 415-555-0100, card 4111 1111 1111 1111", c)
    'mail <EMAIL> or <PHONE>, card <CARD>'
    >>> sorted(c.items()), scrub("What is 12 plus 34? 46")
    ([('card', 1), ('email', 1), ('phone', 1)], 'What is 12 plus 34? 46')
    """
    counts = found if found is not None else Counter()
    if secrets is None:
        secrets = _SECRETS_GATE_AT.search(text) is not None or _LABELLED_AT.search(text) is not None
    if secrets:
        # what a match keeps: its label (its only groups), where it has one
        text = _SECRET.sub(lambda m: next(filter(None, m.groups()), "") + _counted(counts, "secret", "<SECRET>"), text)
    if any(at in text for at in _ATS):
        if "://" in text:  # the user and password of a URL, before its host is read as an address's domain
            text = _URL_CREDENTIALS.sub(lambda m: _counted(counts, "secret", "<SECRET>"), text)
        text = _EMAIL.sub(_address(counts), text)
    return _numbers(text, counts, numbers)


# Top-level domains of private networks, which the public list leaves out: addresses all the same.
_PRIVATE_TLDS = frozenset({"local", "internal", "corp", "lan", "home", "intranet", "localdomain", "private"})
# A full-width dot ends their sentences too, and a list's number (第1．).
_CJK_RUN = re.compile(rf"(?:[{_CJK}．]|\d+．)*")
_CJK_TLD_CHARS = 6  # the longest top-level domain in those scripts (ファッション)
# A domain no code's object is named like (example.com, uni.ac.uk): what runs on past it with no
# space (jane@example.com.Thanks, jane@example.com.谢谢) or a "(" after it (jane@example.com(work))
# leaves it an address; many top-level domains are attributes' and methods' names too (x@self.net(h),
# x@y.to(device), foo@bar.py.Module).
_PLAIN_DOMAIN = re.compile(r"\.(?:(?:co|com|org|net|ac|gov|edu)\.[a-z]{2}|com|edu|gov)\Z")


@functools.cache
def _public_suffixes():
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def _a_tld(tld: str) -> bool:
    tld = (tld if tld.isascii() else unicodedata.normalize("NFKC", tld)).lower()  # ｊｐ is jp
    return tld in _PRIVATE_TLDS or _public_suffixes().publicsuffix("x." + tld, accept_unknown=False) is not None


def _address(counts: Counter):
    """The replacement of an :data:`_EMAIL` match: an address's placeholder where its top-level domain
    is one (PyTorch's X@W.values, logo@2x.png and getty@tty1.service are not), after the Chinese,
    Japanese or Korean text it ran into and before what runs on past its domain (see :func:`_ending`)."""
    def replace(m: re.Match) -> str:
        ending = _ending(m)
        if ending is None:
            return m.group()
        address, rest = ending
        if not rest and m.string[m.end():m.end() + 1] in ("(", "_") and not _PLAIN_DOMAIN.search(address.lower()):
            return m.group()  # x@self.net(h), x@self.in_proj_weight
        return address[:_CJK_RUN.match(address).end()] + _counted(counts, "email", "<EMAIL>") + rest

    return replace


def _ending(m: re.Match) -> tuple[str, str] | None:
    """The address of an :data:`_EMAIL` match and what ran on past its domain with no space: text in
    the script of a top-level domain written in Chinese or Japanese (张伟@例子.中国谢谢), or anything
    after a plain domain (jane@example.com.Thanks); None where its top-level domain is none."""
    address, tld = m.group(), m["tld"]
    if _CJK_RUN.fullmatch(tld):  # the longest start of the run that is a top-level domain
        k = next((k for k in range(min(len(tld), _CJK_TLD_CHARS), 1, -1) if _a_tld(tld[:k])), 0)
        if k:
            return address[:len(address) - len(tld) + k], tld[k:]
    elif _a_tld(tld):
        return address, ""
    head = address[:-len(tld) - 1]
    plain = head if head.isascii() else unicodedata.normalize("NFKC", head)
    # A full-width dot ends a Chinese or Japanese sentence (taro@example.jp．よろしく): no code's.
    ended = address[-len(tld) - 1] == "．" and _a_tld(re.split("[.．]", head)[-1])
    return (head, address[len(head):]) if ended or _PLAIN_DOMAIN.search(plain.lower()) else None


def _counted(counts: Counter, kind: str, placeholder: str) -> str:
    counts[kind] += 1
    return placeholder


def issued(digits: str) -> bool:
    """Whether a number starts, and is as long, as the cards of a network are (Visa, Mastercard, Amex,
    Discover, JCB, Diners, UnionPay, Maestro, Mir). With Luhn, this lets through under 1% of other
    long numbers (a math answer, an epoch in milliseconds), where Luhn alone lets through 10%.

    >>> issued("4111111111111111"), issued("1700000000006"), issued("378282246310005"), issued("3782822463100050")
    (True, False, True, False)
    """
    n, first, two, three, four = len(digits), int(digits[0]), int(digits[:2]), int(digits[:3]), int(digits[:4])
    if two in (34, 37):  # Amex
        return n == 15
    if two in (36, 38, 39) or 300 <= three <= 305:  # Diners
        return n in (14, 16)
    if first == 4:  # Visa
        return n in (13, 16, 19)
    return 16 <= n <= 19 and (first in (5, 6) or two in (35, 81) or 2200 <= four <= 2204 or 2221 <= four <= 2720)


def _card(counts: Counter):
    """The replacement of a :data:`_CARD` match: a card's placeholder where it is one."""
    def card(number: str) -> bool:
        digits = re.sub(r"\D", "", number)
        # Written without a space or dash, a card has 13 to 16 digits; longer bare runs are ids and
        # times (an OTLP span's nanoseconds, in a quarantined raw line, pass Luhn one time in ten).
        return 13 <= len(digits) <= (16 if digits == number else 19) and issued(digits) and luhn(digits)

    def replace(m: re.Match) -> str:
        if card(m.group()):
            return _counted(counts, "card", "<CARD>")
        # The last short group may be the next number's (an expiry: 4111 1111 1111 1111 12/26).
        if m["tail"] and card(m.group()[:m.start("tail") - m.start()]):
            return _counted(counts, "card", "<CARD>") + m["tail"]
        return m.group()

    return replace


# US social security numbers, in a text that names one (SSN, SSNs, customer_ssn, social security
# number, Social-Security-Number): in groups anywhere (a table's column, a second one after the
# label), or bare after the label (SSN: 536221234). In a text that names none, three, two and four
# digits are as often a sum (250-15-1200) or an order's number, and are kept. Of an area, group and
# serial ever issued (python-stdnum).
_SSN_HINTS = ("ssn", "SSN", "Ssn", "ocial", "OCIAL")
_SSN_LABEL = r"(?i:ssns?(?![a-z])|social[\s_-]*security)"
_SSN_NAMED = re.compile(_SSN_LABEL)
_SSN = re.compile(rf"(?P<label>{_SSN_LABEL}[^\d\n]{{0,24}}?)(?<![\d-])(?P<bare>\d{{9}})(?![\d-])"
                  rf"|(?<![\d-])(?P<number>\d{{3}}(?P<sep>[{_SPACES}{_DASH}-])\d{{2}}(?P=sep)\d{{4}})(?![\d-])")
# An IBAN, bare or in groups of four after single spaces (no-break ones too), as banks print it;
# checked (its check digits and its country's length and layout, python-stdnum) with its last groups
# dropped until it is one: the words after it may look like a group (DE89 3704 0044 0532 0130 00 BIC
# COBADEFF).
# Begun by a capital, not by a word's start (which Python's re then tried at every character): its
# scan skips to the capitals, four times as fast.
_IBAN = re.compile(r"[A-Z](?<!\w[A-Z])[A-Z]\d{2}(?:[A-Z0-9]{11,30}|(?:[ \xa0][A-Z0-9]{4}){2,7}(?:[ \xa0][A-Z0-9]{1,4})?)"
                   r"(?![A-Za-z0-9])")
_LAST_GROUP = re.compile(r"[ \xa0][A-Z0-9]{1,4}\Z")


def _ssn(counts: Counter, bare: bool = True):
    """The replacement of an :data:`_SSN` match; without ``bare``, of one in groups alone (a reference
    answer's nine digits are an answer: ssn_count = 123456789)."""
    from stdnum.us import ssn

    def replace(m: re.Match) -> str:
        if (m["bare"] and not bare) or not ssn.is_valid(re.sub(r"\D", "", m["bare"] or m["number"])):
            return m.group()
        return (m["label"] or "") + _counted(counts, "ssn", "<SSN>")

    return replace


def _iban(counts: Counter):
    from stdnum import iban

    def replace(m: re.Match) -> str:
        number = m.group()
        while not iban.is_valid(number) and _LAST_GROUP.search(number):
            number = _LAST_GROUP.sub("", number)
        if not iban.is_valid(number):
            return m.group()
        return _counted(counts, "iban", "<IBAN>") + m.group()[len(number):]

    return replace


# Signed decimals one after another, which an international number's plus sign and separators take
# in: a point's coordinates (+37.7749 -122.4194, ISO 6709's +40.6894-074.0447), scores (+4.125
# -1.0625). One alone (+1.23456789) is EPP's and WHOIS's form of a phone number (+1.4155550100).
_SIGNED_DECIMALS = re.compile(rf"\+\d+\.\d+(?:[{_SPACES}]*[{_DASH}+-]\d+\.\d+)+")
# A bare number after a phone's label (Phone: 4155550100, {"phone":"4155550100"}, mobile number:
# 9876543210, 電話：09012345678), which tells it from other numbers as nothing else does (see _PHONE):
# the label a word of its own, a short word (number, no.) and some punctuation between.
_PHONE_LABELS = tuple(form for word in ("telephone", "telefon", "phone", "tel", "mobile", "fax", "whatsapp")
                      for form in (word, word.capitalize(), word.upper())) + ("WhatsApp", "電話", "电话", "手机", "手機")
_PHONE_LABEL = re.compile(rf"(?<![A-Za-z])(?:{'|'.join(_PHONE_LABELS)})(?:[ _-]?(?i:number|no\.?|num|nr\.?|#))?"
                          r"[^\w\n]{0,4}?(?P<number>\+?\d{9,15})(?!\d)")


def _after_labels(text: str, counts: Counter) -> str:
    """``text`` with the numbers of :data:`_PHONE_LABEL`'s matches replaced, looked for only in the
    runs of number characters and the 32 characters before each (a label and what comes between
    are shorter): over the whole of a long text it was a quarter of its numbers' scrubbing."""
    out, done = [], 0
    for run in _NUMBER_RUNS.finditer(text):
        for m in _PHONE_LABEL.finditer(text, max(run.start() - 32, done), run.end()):
            out += [text[done:m.start("number")], _counted(counts, "phone", "<PHONE>")]
            done = m.end()
    return "".join(out + [text[done:]]) if out else text


# A number after a separator, then the separator and a digit again, or the line's end (not 9-17, 2nd).
_LIST_GOES_ON = re.compile(rf"([{_SPACES}])\d+(?=\1\d|[{_SPACES}]*(?:[\n,;.)\]]|\Z))")


def _phone(counts: Counter):
    """The replacement of a :data:`_PHONE` match: a phone's placeholder where it has 9 to 15 digits,
    and is not the start of a list that goes on in its own separator (04 15 23 42 08 16, a hex
    dump's 00 11 22 33 44 55), where a number after another one (415-555-0132 24 hours) is not."""
    def replace(m: re.Match) -> str:
        goes_on = _LIST_GOES_ON.match(m.string, m.end())
        if (goes_on and goes_on[1] in m.group()) or _SIGNED_DECIMALS.fullmatch(m.group()):
            return m.group()
        n = len(_DIGIT.findall(m.group()))
        return _counted(counts, "phone", "<PHONE>") if 9 <= n <= 15 else m.group()

    return replace


# Every character a card or phone number can hold. Their matches lie inside runs of these, and
# their lookarounds look at most four characters out, past a first that is never in a run's set: so
# scrubbing each run (with four characters on each side, too few to hold a match) is scrubbing the
# text, minus scanning all of it twice. The
# gate (nine digits close together somewhere) is made of those characters too, so it is asked of the
# runs as well.
_NUMBER_RUNS = re.compile(rf"[\d().+/{_WIDE}{_SPACES}{_DASH}-]{{8,}}")  # no card or phone number is shorter
_DIGIT = re.compile(r"\d")
# The digits of every script as ASCII's, one character for one: the patterns' ranges ([2-9]) are ASCII's,
# and Chinese and Japanese text writes numbers in full-width digits (４１５-５５５-０１００), and the
# signs among them full-width too (＋８１, （０３）).
_AS_ASCII = {c: 48 + unicodedata.digit(chr(c)) for c in range(0x80, 0x20000) if unicodedata.category(chr(c)) == "Nd"}
_AS_ASCII.update({ord(c): ord(unicodedata.normalize("NFKC", c)) for c in _WIDE})


def _numbers(text: str, counts: Counter, cards_and_phones: bool = True) -> str:
    """``text`` with IBANs, social security numbers, card numbers, then phone numbers (but, without
    ``cards_and_phones``, neither of these two), replaced, when it has nine digits close together."""
    runs = list(_NUMBER_RUNS.finditer(text))
    if not any(_MANY_DIGITS.search(run.group()) for run in runs):
        return text
    out = _IBAN.sub(_iban(counts), text)  # letters and all: in no run
    if any(hint in out for hint in _SSN_HINTS) and _SSN_NAMED.search(out):
        out = _SSN.sub(_ssn(counts, bare=cards_and_phones), out)
    if not cards_and_phones:
        return out
    for pattern, replace in ((_CARD, _card(counts)), (_PHONE, _phone(counts))):
        if out != text:  # the runs found again only where one changed the text
            runs, text = list(_NUMBER_RUNS.finditer(out)), out
        out = _in_runs(out, runs, pattern, replace)
    if any(label in out for label in _PHONE_LABELS):
        out = _after_labels(out, counts)
    return out


def _in_runs(text: str, runs, pattern: re.Pattern, replace) -> str:
    """``pattern.sub(replace, text)``, scanning only the ``runs`` of ``text`` (and four characters
    around), its digits read as ASCII's."""
    out, done = [], 0
    for run in runs:
        start, end = run.span()
        a, b = max(start - 4, 0), min(end + 4, len(text))
        replaced = _sub_as_written(pattern, replace, text[a:b])
        middle = replaced[start - a:len(replaced) - (b - end)]  # the characters around it never change
        if middle != run.group():
            out += [text[done:start], middle]
            done = end
    return "".join(out + [text[done:]]) if out else text


def _sub_as_written(pattern: re.Pattern, replace, text: str) -> str:
    """``pattern.sub(replace, text)`` over ``text`` read with ASCII digits, what is kept (between
    matches, a match not replaced, a match's end kept: a card's expiry) as written."""
    if text.isascii():
        return pattern.sub(replace, text)
    plain = text.translate(_AS_ASCII)
    out, done = [], 0
    for m in pattern.finditer(plain):
        new = replace(m)
        kept = len(os.path.commonprefix([new[::-1], m.group()[::-1]]))
        out += [text[done:m.start()], new[:len(new) - kept]]
        done = m.end() - kept
    return "".join(out + [text[done:]]) if out else text


def scrub_array(texts: pa.Array, found: Counter, repeats: bool = True, numbers: bool = True) -> pa.Array:
    """:func:`scrub` (with ``numbers``) over a column of texts, counting what it finds in every occurrence. With
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
    suspect = distinct.take(at)
    suspects = suspect.to_pylist()
    secrets = pc.match_substring_regex(suspect, SECRETS_GATE).to_pylist()
    clean = []
    for n_uses, text, secret in zip(uses.tolist(), suspects, secrets):
        kinds: Counter = Counter()
        clean.append(scrub(text, kinds, secret, numbers))
        for kind, n in kinds.items():
            found[kind] += n * n_uses
    if clean == suspects:  # numbers or hints, but nothing to scrub
        return texts
    scrubbed = pc.replace_with_mask(distinct, hit, pa.array(clean, pa.string()))
    return scrubbed.take(encoded.indices) if repeats else scrubbed
