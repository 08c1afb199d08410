"""Seeing through disguises before the scanner's patterns are tried (apps/registry/scanner.py).

`views(text)` gives the forms of a text worth matching: the text itself (ASCII tool output, the common case,
stays as it is); for anything beyond ASCII, the text without tag, zero-width and bidi characters, NFKC
(full-width and other compatibility forms), case folded, and its Latin skeleton (confusable letters from
other scripts replaced by the Latin letters they imitate: Unicode UTS #39 data, from the
`confusable_homoglyphs` package, and combining marks dropped); and text embedded as base64, hex,
URL-encoding or HTML entities, decoded, to a bounded depth and size.
"""

from __future__ import annotations

import base64
import binascii
import functools
import html
import itertools
import re
import unicodedata
from collections.abc import Iterator
from urllib.parse import unquote

HIDDEN_CHARS = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\u00ad\U000e0000-\U000e007f]")
BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{24,}={0,2}")
HEX_RUN = re.compile(r"[0-9A-Fa-f]{32,}|(?:\\x[0-9A-Fa-f]{2}){12,}|(?:[0-9A-Fa-f]{2}[ :]){15,}[0-9A-Fa-f]{2}")
# Every HEX_RUN lies inside a stretch of these characters at least 32 long (its shortest match): found first by
# one scan over a character class, which `re` does ~7 times faster than trying HEX_RUN's three branches at
# every position of the text (0.13 ms on 2 KB of tool output).
HEX_SPAN = re.compile(r"[0-9A-Fa-fx\\: ]{32,}")
URL_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
HTML_ENTITY = re.compile(r"&(#\d{2,7}|#x[0-9A-Fa-f]{2,6}|[A-Za-z]{2,10});")
TAG_CHARS = re.compile("[\U000e0020-\U000e007e]")
TAG_TO_ASCII = {0xE0000 + c: c for c in range(0x20, 0x7F)}
MAX_RUNS = 20  # encoded runs decoded per text
MAX_RUN = 64 * 1024  # characters of one encoded run
MAX_DEPTH = 2  # base64 inside base64 is decoded once more, no further
# Scripts whose letters imitate Latin ones. Letters of other scripts (CJK, Arabic...) keep their own
# patterns and are left alone: mapping them would garble text the other-language patterns read.
LOOKALIKE_SCRIPTS = ("CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC", "LATIN", "COMMON", "LISU", "TIFINAGH",
                     "GEORGIAN", "VAI", "CANADIAN-ABORIGINAL")


@functools.cache
def _skeleton_table() -> dict[int, str]:
    """{code point: the ASCII it imitates}, built once per process from the UTS #39 confusables data."""
    from confusable_homoglyphs import categories, confusables

    table: dict[int, str] = {}
    for char, entries in confusables.confusables_data.items():
        if len(char) != 1 or char.isascii():
            continue
        if categories.alias(char) not in LOOKALIKE_SCRIPTS:
            continue
        latin = next((e["c"] for e in entries if e["c"].isascii() and e["c"].isalnum()), None)
        if latin:
            table[ord(char)] = latin.lower()
    # UTS #39 gives one prototype per class ('l' for every I-like capital): a capital reads as its own
    # small letter does (Greek capital iota as small iota, i), which is what matters once text is case folded.
    for code in list(table):
        small = ord(chr(code).lower()[0])
        if small != code and small in table:
            table[code] = table[small]
    return table


def visible(text: str) -> str:
    """What a person sees and a model reads: no invisible characters, compatibility forms folded (NFKC)."""
    return unicodedata.normalize("NFKC", HIDDEN_CHARS.sub("", text))


def skeleton(text: str) -> str:
    """The Latin look-alike of a text: confusables mapped, accents and other combining marks dropped, folded."""
    mapped = text.translate(_skeleton_table()).casefold()
    decomposed = unicodedata.normalize("NFKD", mapped)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def views(text: str, *, depth: int = 0) -> Iterator[tuple[str, str]]:
    """(disguise, text) pairs to match, the plain text first. `disguise` names what was undone ('' for none)."""
    yield "", text
    plain = text
    if not text.isascii():
        if TAG_CHARS.search(text):  # a text spelt in tag characters reads as ASCII to a model, invisible to people
            yield "tag characters", text.translate(TAG_TO_ASCII)
        shown = visible(text)
        plain = shown.casefold()
        yield "unicode", plain
        latin = skeleton(shown)
        if latin != plain:
            yield "homoglyphs", latin
    if depth < MAX_DEPTH:
        for disguise, decoded in _decoded(plain):
            yield disguise, decoded
            yield from ((f"{disguise}+{inner}" if inner else disguise, t)
                        for inner, t in views(decoded, depth=depth + 1) if inner)


def _decoded(text: str) -> Iterator[tuple[str, str]]:
    for run in BASE64_RUN.findall(text)[:MAX_RUNS]:
        decoded = _base64(run[:MAX_RUN])
        if decoded:
            yield "base64", decoded
    for run in hex_runs(text):
        decoded = _hex(run[:MAX_RUN])
        if decoded:
            yield "hex", decoded
    if "%" in text and len(URL_ESCAPE.findall(text[:MAX_RUN])) >= 3:
        yield "url-encoding", unquote(text[:MAX_RUN])
    if "&" in text and HTML_ENTITY.search(text):
        yield "html-entities", html.unescape(text[:MAX_RUN])


def hex_runs(text: str) -> list[str]:
    """`HEX_RUN.findall(text)[:MAX_RUNS]`, looked for only inside HEX_SPAN's stretches."""
    runs = (run for span in HEX_SPAN.findall(text) for run in HEX_RUN.findall(span))
    return list(itertools.islice(runs, MAX_RUNS))


def _readable(raw: bytes) -> str:
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    if len(decoded) < 8 or not all(c.isprintable() or c.isspace() for c in decoded):
        return ""
    return decoded


def _base64(run: str) -> str:
    padded = run + "=" * (-len(run) % 4)
    try:
        urlsafe = "-" in run or "_" in run
        raw = base64.urlsafe_b64decode(padded) if urlsafe else base64.b64decode(padded, validate=True)
    except (ValueError, binascii.Error):
        return ""
    return _readable(raw)


def _hex(run: str) -> str:
    digits = re.sub(r"\\x|\s|:", "", run)
    try:
        return _readable(bytes.fromhex(digits))
    except ValueError:
        return ""
