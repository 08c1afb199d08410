"""The egress rules applied to a tool call's arguments: a URL in them is where the tool will go, so a URL
to a loopback, private, link-local or cloud-metadata address is refused before the call is made (SSRF
through a tool), held or not. And, in a tainted run, which argument strings were copied from the
untrusted content the run read (shown to the person who decides the call).

Hosts are judged by their form, without DNS: every spelling of an address (decimal, hex, octal, IPv6 with
a zone id, IPv4-mapped), trailing dots, and the names that always mean this machine or its cloud. A name
the tool resolves itself cannot be checked from here (the tool's resolver is not ours); the connection
guard (apps.core.egress) covers Airlock's own connections.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from django.conf import settings

from apps.core.egress import embedded_ipv4, is_internal

# Any scheme://: the tool decides what it fetches with, so every URL form counts, not only http.
ARGUMENT_URL = re.compile(r"\b[a-z][a-z0-9+.-]{1,15}://[^\s\"'<>]+", re.IGNORECASE)
METADATA_ADDRESSES = {ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "169.254.170.23", "100.100.100.200", "fd00:ec2::254", "fd00:ec2::23")}
METADATA_NAMES = ("metadata.google.internal", "metadata.goog", "metadata", "instance-data",
                  "instance-data.ec2.internal", "metadata.azure.internal")
LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa", ".lan")
MAX_STRINGS = 500  # strings looked at per call: arguments are small; a huge one is not walked forever
COPY_MIN = 24  # characters an argument must share with untrusted text to count as copied from it


def argument_strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, string) for every string inside the arguments, keys included, in order."""
    if isinstance(value, str):
        yield path or "(arguments)", value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            yield here, str(key)
            yield from argument_strings(item, here)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from argument_strings(item, f"{path}[{i}]")


def url_problem(arguments: Mapping[str, Any] | None, *, allow_private: bool | None = None) -> str:
    """Why these arguments may not be sent ('' when they may): a URL in them to an address the egress
    rules refuse. Link-local and cloud-metadata addresses are refused always; loopback and private ones
    unless AIRLOCK_EGRESS_ALLOW_PRIVATE (development, tests) allows them, as for Airlock's own connections."""
    allow_private = settings.AIRLOCK_EGRESS_ALLOW_PRIVATE if allow_private is None else allow_private
    for n, (path, text) in enumerate(argument_strings(arguments or {})):
        if n >= MAX_STRINGS:
            break
        if "://" not in text:
            continue
        for url in ARGUMENT_URL.findall(text)[:20]:
            problem = _host_problem(url, allow_private=allow_private)
            if problem:
                return f"The argument {path} holds a URL to {problem}: {url[:120]}"
    return ""


def _host_problem(url: str, *, allow_private: bool) -> str:
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return "a host that cannot be read (a malformed URL)"
    host = unquote(host).strip().rstrip(".").lower()
    if not host:
        return ""
    address = _literal_address(host)
    if address is not None:
        if _is_metadata(address):
            return "a link-local or cloud-metadata address, which tools may never be sent to"
        if is_internal(address) and not allow_private:
            return "a loopback, private or reserved address, which the egress rules refuse"
        return ""
    if host in METADATA_NAMES:
        return "a cloud-metadata host, which tools may never be sent to"
    if (host in LOCAL_NAMES or host.endswith(LOCAL_SUFFIXES)) and not allow_private:
        return "a local or internal host name, which the egress rules refuse"
    return ""


def _literal_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a host written as an address stands for, in any spelling (zone ids dropped), or None."""
    bare = host.split("%", 1)[0]
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    if re.fullmatch(r"[0-9a-fx.]+", bare):  # 2130706433, 0x7f.1, 0177.0.0.1: what inet_aton (and curl) accept
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    return None


def _is_metadata(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    embedded = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    if embedded is not None and _is_metadata(embedded):
        return True
    return address in METADATA_ADDRESSES or address.is_link_local


def copied_from(arguments: Mapping[str, Any] | None, untrusted: list[str]) -> list[str]:
    """The argument paths whose text was copied from untrusted content (a run of COPY_MIN characters of it),
    for the person deciding the call. Cheap enough for every call of a tainted run: one substring search per
    window of each long argument string."""
    if not untrusted:
        return []
    copied = []
    for n, (path, text) in enumerate(argument_strings(arguments or {})):
        if n >= MAX_STRINGS:
            break
        flat = " ".join(text.split())
        if len(flat) < COPY_MIN:
            continue
        step = max(1, COPY_MIN // 2)
        windows = (flat[i:i + COPY_MIN] for i in range(0, len(flat) - COPY_MIN + 1, step))
        if any(window in source for window in windows for source in untrusted):
            copied.append(path)
    return copied
