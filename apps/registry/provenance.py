"""Where a call's arguments came from: the checks that hold when the scanner misses an injection.

An internal server is ours; the data it returns is not (an inbox, a ticket, a web page someone stored). So a
write is held for a person when its arguments

- send to a destination (an email address, a URL or web host, an IBAN or a long account number) that the
  run's request never mentions: not in its inputs, its tasks or its agents' prompts, nor in the result of a
  tool whose output an admin trusts; or
- carry a run of text (COPY_MIN characters) copied from a tool result the run read, that the request does not
  hold itself.

Both compare folded text (invisible characters dropped, compatibility forms and look-alikes mapped, case
folded, whitespace collapsed) and the decoded views of a result (base64, hex, URL encoding, HTML entities),
so a disguised injection the model decoded is still recognised as the source. Neither depends on recognising
an attack: a legitimate write that copies text from an untrusted result is held too, and a person decides.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from apps.registry.arguments import MAX_STRINGS, argument_strings
from apps.registry.disguises import skeleton, views, visible

COPY_MIN = 24  # characters an argument must share with a result (and not with the request) to count as copied
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
URL = re.compile(r"\b[a-z][a-z0-9+.-]{1,15}://[^\s\"'<>]+|\bwww\.[^\s\"'<>]+|\b(?:[a-z0-9-]+\.)+[a-z]{2,24}/[^\s\"'<>]*",
                 re.IGNORECASE)
IBAN = re.compile(r"\b[A-Z]{2}\d{2}[A-Z0-9]{10,30}\b")
ACCOUNT = re.compile(r"(?<![\w-])\d{9,34}(?![\w-])")  # a bare long number: an account, a card, a phone
MAX_DESTINATIONS = 50


def fold(text: str) -> str:
    """The text as compared: what a person sees, look-alikes mapped, folded, whitespace collapsed."""
    return " ".join(skeleton(visible(text)).split())


def fold_all(texts: Iterable[str]) -> str:
    """Every view of `texts` (decoded ones too), folded, as one text to search in."""
    return "\n".join(fold(view) for text in texts if text for _, view in views(text))


def destinations(arguments: Mapping[str, Any] | None, *, skip: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(argument path, destination) for every place the arguments send to, folded (a URL by its host)."""
    skipped, found = set(skip), []
    for n, (path, text) in enumerate(argument_strings(arguments or {})):
        if n >= MAX_STRINGS or len(found) >= MAX_DESTINATIONS:
            break
        if path in skipped or len(text) < 6:
            continue
        shown = visible(text)
        for email in EMAIL.findall(shown):
            found.append((path, fold(email)))
        for url in URL.findall(EMAIL.sub(" ", shown)):
            found.append((path, _host(url)))
        for number in (*IBAN.findall(shown), *ACCOUNT.findall(shown)):
            found.append((path, fold(number)))
    return [(p, d) for p, d in found if d]


def _host(url: str) -> str:
    try:
        host = urlsplit(url if "://" in url else f"http://{url}").hostname or ""
    except ValueError:
        return fold(url)
    host = fold(host).rstrip(".")
    return host[4:] if host.startswith("www.") else host


def unrequested(arguments: Mapping[str, Any] | None, *, known: str, skip: Iterable[str] = ()) -> list[str]:
    """The destinations in the arguments that `known` (folded request and trusted results) never mentions."""
    out = []
    for path, destination in destinations(arguments, skip=skip):
        if destination not in known and f"{path}: {destination}" not in out:
            out.append(f"{path}: {destination}")
    return out


def copied(arguments: Mapping[str, Any] | None, *, results: str, known: str, skip: Iterable[str] = ()) -> list[str]:
    """Argument paths holding a run of COPY_MIN characters found in `results` (folded tool results) and not in
    `known` (the folded request): text the model took from what a tool returned."""
    if not results:
        return []
    skipped, out = set(skip), []
    for n, (path, text) in enumerate(argument_strings(arguments or {})):
        if n >= MAX_STRINGS:
            break
        flat = fold(text)
        if path in skipped or len(flat) < COPY_MIN:
            continue
        step = COPY_MIN // 2
        if any(w in results and w not in known
               for w in (flat[i:i + COPY_MIN] for i in range(0, len(flat) - COPY_MIN + 1, step))):
            out.append(path)
    return out
