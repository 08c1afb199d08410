"""The one egress guard for every URL Airlock fetches (remote MCP servers, LLM connections' base
URLs, webhooks): http/https only, and every address the host is or resolves to is checked
(loopback, private, link-local, multicast, reserved, IPv4-mapped and other embedded IPv6) unless
the operator allowed it: `AIRLOCK_EGRESS_ALLOW` names hosts, addresses or CIDRs that may be
internal, `AIRLOCK_EGRESS_ALLOW_PRIVATE` (development and tests) allows every private address.

The host is first put the way a resolver reads it (brackets off, zone id decoded, lower case, no
trailing dot), so `localhost.` is `localhost`. IP literals, with or without a zone id, are judged
without DNS; names under `localhost` are loopback by definition (RFC 6761) and refused without
asking DNS too, so neither can slip through as "does not resolve here". Checking the resolved
address (not the URL text) catches decimal, hex, octal and Unicode-digit spellings.
`guarded_transport()` checks again at every TCP connect and connects to the address it checked (no
DNS rebinding between check and use), so no redirect, retry or reconnect can reach a refused
address; our HTTP clients also ignore proxy variables."""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import anyio
import httpcore2
import httpx2
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from httpcore2._backends.auto import AutoBackend

ALLOWED_SCHEMES = ("http", "https")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class EgressRefused(Exception):
    """The URL may not be reached from Airlock; the message says why."""


class Unresolvable(EgressRefused):
    """The host name does not resolve (now): refused for connecting, not a reason to refuse registering."""


NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4, Teredo server), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if any(ip in net for net in NAT64):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def is_internal(ip: IPAddress) -> bool:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:  # a zone id names an interface of this machine: only link-local use has one
            return True
        embedded = embedded_ipv4(ip)
        if embedded is not None and is_internal(embedded):
            return True
    return (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast or ip.is_reserved
            or ip.is_unspecified or not ip.is_global)


def normalize_host(host: str) -> str:
    """The host as a resolver reads it: no brackets, the zone id's `%25` decoded, lower case, no trailing dot."""
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return unquote(host).lower().rstrip(".")


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _is_localhost_name(host: str) -> bool:
    return host == "localhost" or host.endswith(".localhost")


# --- the operator's allow-list ------------------------------------------------------------------

@dataclass(frozen=True)
class AllowList:
    """What AIRLOCK_EGRESS_ALLOW lets through although it is internal: host names (exactly, after
    normalizing) and addresses or networks (every address a host resolves to must be inside one)."""

    names: frozenset[str]
    networks: tuple[IPNetwork, ...]

    def allows_address(self, ip: IPAddress) -> bool:
        if getattr(ip, "scope_id", None):  # an interface of this machine: only AIRLOCK_EGRESS_ALLOW_PRIVATE
            return False
        return any(ip.version == net.version and ip in net for net in self.networks)


@functools.lru_cache(maxsize=8)
def _parse_allow_list(entries: tuple[str, ...]) -> AllowList:
    names: set[str] = set()
    networks: list[IPNetwork] = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip().strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        name = normalize_host(entry)
        if not name or "/" in name or ":" in name or " " in name:
            raise ImproperlyConfigured(f"AIRLOCK_EGRESS_ALLOW: {entry!r} is neither a host name nor an IP "
                                       "address or CIDR (e.g. ollama.internal,10.0.5.0/24).")
        names.add(name)
    return AllowList(frozenset(names), tuple(networks))


def allow_list() -> AllowList:
    """The operator's AIRLOCK_EGRESS_ALLOW, parsed. Raises ImproperlyConfigured naming a bad entry."""
    entries = getattr(settings, "AIRLOCK_EGRESS_ALLOW", ())
    if isinstance(entries, str):
        entries = entries.split(",")
    return _parse_allow_list(tuple(e for e in entries if e.strip()))


def _refusal(host: str, why: str) -> EgressRefused:
    """`why` completes "<host> ...", e.g. "resolves to 127.0.0.1, a loopback/private/reserved address"."""
    return EgressRefused(
        f"{host} {why}; those are blocked. An operator can allow it with AIRLOCK_EGRESS_ALLOW={host} "
        "(host names, addresses or CIDRs, comma-separated), or allow every private address with "
        "AIRLOCK_EGRESS_ALLOW_PRIVATE=1."
    )


# --- the checks ---------------------------------------------------------------------------------

def resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Unresolvable(f"The host {host!r} could not be resolved ({exc}).") from None
    return sorted({info[4][0] for info in infos})


def check_host(host: str, port: int, *, allow_private: bool | None = None) -> list[str]:
    """The checked addresses of `host` (to connect to), or raises EgressRefused."""
    allow_private = settings.AIRLOCK_EGRESS_ALLOW_PRIVATE if allow_private is None else allow_private
    host = normalize_host(host)
    allowed = allow_list()
    if allow_private or host in allowed.names:
        return resolve(host, port)
    literal = _ip_literal(host)
    if literal is not None:
        if is_internal(literal) and not allowed.allows_address(literal):
            raise _refusal(host, "is a loopback/private/reserved/link-local address")
        return [str(literal)]
    if _is_localhost_name(host):
        raise _refusal(host, "is a loopback name (localhost and every name under it)")
    addresses = resolve(host, port)
    for address in addresses:
        ip = ipaddress.ip_address(address)
        if is_internal(ip) and not allowed.allows_address(ip):
            raise _refusal(host, f"resolves to {address}, a loopback/private/reserved address")
    return addresses


def check_url(url: str, *, allow_private: bool | None = None) -> list[str]:
    """Returns the checked addresses of `url`'s host, or raises EgressRefused."""
    parts = urlsplit(url)
    if parts.scheme not in ALLOWED_SCHEMES:
        raise EgressRefused(f"Only http and https URLs are allowed, not {parts.scheme or 'no scheme'!r}.")
    if not parts.hostname:
        raise EgressRefused("The URL has no host.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise EgressRefused("The URL has an invalid port.") from None
    return check_host(parts.hostname, port, allow_private=allow_private)


def save_time_error(url: str) -> str:
    """Why Airlock may never connect to `url` (an internal address, a bad port), or '' — for a form's
    field error. A name that does not resolve right now is not refused here: every connect is checked."""
    try:
        check_url(url)
    except Unresolvable:
        return ""
    except EgressRefused as exc:
        return str(exc)
    return ""


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's network backend, checking every address it is asked to connect to and then
    connecting to exactly that checked address (TLS still verifies the original host name)."""

    def __init__(self, allow_private: bool | None = None) -> None:
        self.allow_private = allow_private  # None: the settings at each connect
        self._inner = AutoBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore2.AsyncNetworkStream:
        addresses = await anyio.to_thread.run_sync(
            lambda: check_host(host, port, allow_private=self.allow_private))
        error: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                                      socket_options=socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                error = exc
        raise error or EgressRefused(f"{host} has no address to connect to.")

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore2.AsyncNetworkStream:
        raise EgressRefused("Unix sockets are not reachable from Airlock.")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded_transport(*, allow_private: bool | None = None) -> httpx2.AsyncHTTPTransport:
    """An httpx2 transport whose every connection goes through the egress check; proxies from the
    environment are ignored (they would make the proxy, not the server, the checked address)."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    transport._pool._network_backend = GuardedBackend(allow_private)  # httpx2 does not expose the backend
    return transport
