"""The module address a request names, parsed once per request and handed along on it.

The request wrapper (routing.py) parses a route's `{namespace}/{name}/{system}` before any
handler runs, or the registry credential's check does when it needs the address first
(auth.py); either way the handler, and whoever asks after, reads the parsed address here.
"""

from __future__ import annotations

from aiohttp import web

from gitreg.core.names import ModuleAddress, parse_address

# The request's module address, once parsed (routing.py sets it before the handler runs).
ADDRESS_KEY = web.RequestKey[ModuleAddress]("module_address")


def request_address(request: web.Request) -> ModuleAddress:
    """The module address of a request whose route names one; parsed on the first ask
    (BadRequest names a bad segment), then kept on the request."""
    found = request.get(ADDRESS_KEY)
    if found is None:
        m = request.match_info
        found = request[ADDRESS_KEY] = parse_address(m["namespace"], m["name"], m["system"])
    return found
