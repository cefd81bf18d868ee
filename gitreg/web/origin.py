"""Where a request was sent: the scheme and host a client used to reach this registry.

One decision for every place that needs it (absolute archive URLs, the pages' CSRF check,
the session cookie's `Secure` flag): the connection's own scheme and `Host`, or, only from an
address in `[server] trusted_proxies`, the proxy's `X-Forwarded-Proto`/`X-Forwarded-Host`.
`Host` is whatever the client wrote: anything that is not a `host[:port]` is refused (None),
and `[server] public_url`, when set, wins over all of it.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from urllib.parse import urlsplit

from aiohttp import web

from gitreg.web.keys import CONFIG

# A DNS name (letters, digits, `-`, `_` in dot-separated labels of 1-63, an optional final dot),
# an IPv4 address (a DNS-shaped name too) or a bracketed IPv6 literal; then an optional port.
_HOST = re.compile(r"(?:(?P<name>[A-Za-z0-9_-]{1,63}(?:\.[A-Za-z0-9_-]{1,63})*\.?)|\[(?P<ipv6>[0-9A-Fa-f:.]+)\])")
_PORT = re.compile(r"[0-9]{1,5}")


def valid_host(value: str) -> bool:
    """`value` is a `host[:port]` as a URL's authority may hold it: no user, path, space or other host syntax."""
    host = value
    if ":" in value.rpartition("]")[2]:  # a port (an IPv6 literal's colons are inside its brackets)
        host, _, port = value.rpartition(":")
        if not _PORT.fullmatch(port) or not 0 < int(port) <= 65535:
            return False
    found = _HOST.fullmatch(host)
    if found is None or len(host) > 253:
        return False
    if found["ipv6"] is not None:
        try:
            ipaddress.IPv6Address(found["ipv6"])
        except ValueError:
            return False
    return True


def origin(scheme: str, netloc: str) -> str:
    """`scheme://host[:port]`, lowercased, without the scheme's default port (as browsers send Origin)."""
    scheme, netloc = scheme.lower(), netloc.lower()
    default = {"http": ":80", "https": ":443"}.get(scheme)
    if default and netloc.endswith(default):
        netloc = netloc[: -len(default)]
    return f"{scheme}://{netloc}"


def from_trusted_proxy(request: web.Request) -> bool:
    """The connection comes from an address in `[server] trusted_proxies`."""
    proxies = request.app[CONFIG].server.trusted_proxies
    if not proxies or not request.remote:
        return False
    try:
        peer = ipaddress.ip_address(request.remote)
    except ValueError:
        return False  # a Unix socket: no address to trust
    return any(peer in network for network in _networks(proxies))


# Buys 26.7 µs of CPU an archive-mode download request with two trusted proxies
# (bench/warm_parts.py's operator scenario, 40 paired rounds with and without it, medians; under load).
@functools.lru_cache(maxsize=8)
def _networks(proxies: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """`[server] trusted_proxies` parsed once (config checked them), not on every request."""
    return tuple(ipaddress.ip_network(p, strict=False) for p in proxies)


def request_origin(request: web.Request) -> str | None:
    """The origin the client sent this request to; None when its host is not a `host[:port]`.

    The connection's scheme (https when gitreg serves TLS itself) and `Host`, or, from a trusted
    proxy, its `X-Forwarded-Proto`/`X-Forwarded-Host` (a TLS-terminating proxy talks http to us).
    """
    scheme, host = request.scheme, request.headers.get("Host", "")
    if from_trusted_proxy(request):
        # A chain of proxies appends: the first value is what the client used.
        scheme = request.headers.get("X-Forwarded-Proto", scheme).split(",")[0].strip() or scheme
        host = request.headers.get("X-Forwarded-Host", host).split(",")[0].strip() or host
    return _checked_origin(scheme, host)


# Clients send the same few Hosts: each is checked and spelled once (archive downloads ask per
# request). Buys 2.4 µs of CPU an archive-mode download request (as `_networks`; within that
# run's noise) and 4.2 µs a call (`timeit`, same load).
@functools.lru_cache(maxsize=256)
def _checked_origin(scheme: str, host: str) -> str | None:
    if scheme.lower() not in ("http", "https") or not valid_host(host):
        return None
    return origin(scheme, host)


def base_url(request: web.Request) -> str | None:
    """The URL this registry's paths hang off for clients: `[server] public_url`, else `request_origin`."""
    public = request.app[CONFIG].server.public_url
    return public if public else request_origin(request)


def public_origin(request: web.Request) -> str | None:
    """`[server] public_url`'s origin, when set."""
    public = request.app[CONFIG].server.public_url
    return origin(*urlsplit(public)[:2]) if public else None
