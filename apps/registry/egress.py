"""The one egress guard for remote MCP servers: http/https only, and every address the host
resolves to is checked (loopback, private, link-local, multicast, reserved, IPv4-mapped IPv6)
unless settings.AIRLOCK_EGRESS_ALLOW_PRIVATE (development and tests) allows private ones.

Checking the resolved address (not the URL text) catches decimal, hex, octal and Unicode-digit
spellings. Redirects to another origin are never followed (the MCP SDK refuses them)."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

ALLOWED_SCHEMES = ("http", "https")


class EgressRefused(Exception):
    """The URL may not be reached from Airlock; the message says why."""


def _is_internal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast or ip.is_reserved
            or ip.is_unspecified or not ip.is_global)


def resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise EgressRefused(f"The host {host!r} could not be resolved ({exc}).") from None
    return sorted({info[4][0] for info in infos})


def check_url(url: str, *, allow_private: bool | None = None) -> list[str]:
    """Returns the checked addresses of `url`'s host, or raises EgressRefused."""
    allow_private = settings.AIRLOCK_EGRESS_ALLOW_PRIVATE if allow_private is None else allow_private
    parts = urlsplit(url)
    if parts.scheme not in ALLOWED_SCHEMES:
        raise EgressRefused(f"Only http and https URLs are allowed, not {parts.scheme or 'no scheme'!r}.")
    if not parts.hostname:
        raise EgressRefused("The URL has no host.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise EgressRefused("The URL has an invalid port.") from None
    addresses = resolve(parts.hostname, port)
    if not allow_private:
        for address in addresses:
            if _is_internal(ipaddress.ip_address(address.split("%", 1)[0])):
                raise EgressRefused(
                    f"{parts.hostname} resolves to {address}, a loopback/private/reserved address; "
                    "those are blocked (an operator can allow them with AIRLOCK_EGRESS_ALLOW_PRIVATE=1)."
                )
    return addresses
