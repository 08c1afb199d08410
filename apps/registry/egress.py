"""The one egress guard for remote MCP servers: http/https only, and every address the host
resolves to is checked (loopback, private, link-local, multicast, reserved, IPv4-mapped IPv6)
unless settings.AIRLOCK_EGRESS_ALLOW_PRIVATE (development and tests) allows private ones.

Checking the resolved address (not the URL text) catches decimal, hex, octal and Unicode-digit
spellings. `guarded_transport()` checks again at every TCP connect and connects to the address
it checked (no DNS rebinding between check and use), so no redirect, retry or reconnect can reach
a refused address; our HTTP clients also never follow redirects and ignore proxy variables."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpcore2
import httpx2
from django.conf import settings
from httpcore2._backends.auto import AutoBackend

ALLOWED_SCHEMES = ("http", "https")


class EgressRefused(Exception):
    """The URL may not be reached from Airlock; the message says why."""


class Unresolvable(EgressRefused):
    """The host name does not resolve (now): refused for connecting, not a reason to refuse registering."""


NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
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


def _is_internal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    embedded = _embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    if embedded is not None and _is_internal(embedded):
        return True
    return (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast or ip.is_reserved
            or ip.is_unspecified or not ip.is_global)


def resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Unresolvable(f"The host {host!r} could not be resolved ({exc}).") from None
    return sorted({info[4][0] for info in infos})


def check_host(host: str, port: int, *, allow_private: bool | None = None) -> list[str]:
    """The checked addresses of `host`, or raises EgressRefused."""
    allow_private = settings.AIRLOCK_EGRESS_ALLOW_PRIVATE if allow_private is None else allow_private
    addresses = resolve(host, port)
    if not allow_private:
        for address in addresses:
            if _is_internal(ipaddress.ip_address(address.split("%", 1)[0])):
                raise EgressRefused(
                    f"{host} resolves to {address}, a loopback/private/reserved address; "
                    "those are blocked (an operator can allow them with AIRLOCK_EGRESS_ALLOW_PRIVATE=1)."
                )
    return addresses


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
    return check_host(parts.hostname, port, allow_private=allow_private)


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's network backend, checking every address it is asked to connect to and then
    connecting to exactly that checked address (TLS still verifies the original host name)."""

    def __init__(self, allow_private: bool | None = None) -> None:
        self.allow_private = settings.AIRLOCK_EGRESS_ALLOW_PRIVATE if allow_private is None else allow_private
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
