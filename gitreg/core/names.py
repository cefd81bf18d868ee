"""The registry's address grammar, checked before any rule or git command sees a request."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import NamedTuple, Protocol

from gitreg.core.errors import BadRequest
from gitreg.core.versions import TAG_VERSION_RE

# namespace and name: 1-64 letters, digits, '-' and '_', starting and ending with a letter or digit.
NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9])?", re.ASCII)
# system: 1-64 lowercase letters and digits.
SYSTEM_RE = re.compile(r"[a-z0-9]{1,64}", re.ASCII)
# The host of a module source (`host/namespace/name/system`): DNS labels, an optional port.
REGISTRY_HOST_RE = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*(?::[0-9]{1,5})?",
    re.ASCII,
)


class ModuleAddress(NamedTuple):
    """A module's `namespace/name/system`, already checked against the grammar.

    A named tuple: hashed and compared in C (a warm request hashes its address in several dict
    lookups; a frozen dataclass's generated `__hash__` ran Python code each time), ordered by
    its fields, no `__dict__` (an org of 230,000 modules keeps as many), pickled by its fields.
    """

    namespace: str
    name: str
    system: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}/{self.system}"


_NAME_EXPECTED = "1-64 letters, digits, '-' or '_', starting and ending with a letter or digit"
_SYSTEM_EXPECTED = "1-64 lowercase letters and digits"
# Address segments (also route `match_info` keys) and the grammar each must match.
_SEGMENTS = {
    "namespace": (NAME_RE, _NAME_EXPECTED),
    "name": (NAME_RE, _NAME_EXPECTED),
    "system": (SYSTEM_RE, _SYSTEM_EXPECTED),
}


def _check_segment(label: str, value: str) -> None:
    grammar, expected = _SEGMENTS[label]
    if not grammar.fullmatch(value):
        raise BadRequest(f"invalid module {label} {value[:80]!r}: expected {expected}")


# A request's address is parsed once (check_request, or the credential check that needs it
# first: web/address.py), and the warm path asks for the same few addresses again and again: an
# address, once valid, is not checked again. Buys 5.1 µs of CPU a versions request
# (bench/warm_parts.py's operator request, 100 paired rounds with and without it in one process,
# medians; under load: ~90 µs a request). Bad segments raise, and lru_cache keeps no exception,
# so each one is checked every time.
@functools.lru_cache(maxsize=4096)
def parse_address(namespace: str, name: str, system: str) -> ModuleAddress:
    """Check request segments against the registry grammar; BadRequest names the bad one."""
    _check_segment("namespace", namespace)
    _check_segment("name", name)
    _check_segment("system", system)
    return ModuleAddress(namespace, name, system)


def address_from_text(text: object) -> ModuleAddress | None:
    """`namespace/name/system` read back (a file, the index process), or None when it is not one."""
    if not isinstance(text, str):
        return None
    parts = text.split("/")
    if (
        len(parts) != 3
        or not NAME_RE.fullmatch(parts[0])
        or not NAME_RE.fullmatch(parts[1])
        or not SYSTEM_RE.fullmatch(parts[2])
    ):
        return None
    return ModuleAddress(*parts)


def check_version(value: str) -> None:
    """BadRequest unless `value` is SemVer 2.0 text, with or without a leading `v`."""
    if not TAG_VERSION_RE.fullmatch(value):  # a cheap check before any cache or git work
        raise BadRequest(f"{value[:80]!r} is not a SemVer version (expected MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD])")


# What a query string may hold. The API's parameters are short (`q` at most 200 characters);
# a longer query string is refused before anything parses it.
MAX_QUERY_BYTES = 4096
MAX_SEARCH_CHARS = 200
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class _Request(Protocol):
    """The parts of an aiohttp request `check_request` reads (so this module needs no aiohttp)."""

    @property
    def match_info(self) -> Mapping[str, str]: ...

    @property
    def query(self) -> Mapping[str, str]: ...

    @property
    def raw_path(self) -> str: ...


def _digits(key: str, value: str) -> None:
    # Digits only: "-1", "1.5", "1e3", "" and fullwidth digits are refused; 12 bound the cost.
    if not value.isascii() or not value.isdigit() or len(value) > 12:
        raise BadRequest(f"{key} must be a non-negative integer (at most 12 digits), not {value[:40]!r}")


def check_request(request: _Request, address: ModuleAddress | None = None) -> ModuleAddress | None:
    """Every path segment and query parameter the API reads, checked before any handler runs;
    the module address the route names (`address` when the caller parsed it already), else None.

    So a malformed request is a 400 before any rule, cache or git command sees it, whichever
    handler it is routed to (handlers check again where they parse a value other than the address).
    """
    raw_query = request.raw_path.partition("?")[2]
    if len(raw_query) > MAX_QUERY_BYTES:  # as sent, percent-encoded
        raise BadRequest(f"the query string is longer than {MAX_QUERY_BYTES} bytes")
    segments = request.match_info
    whole = "namespace" in segments and "name" in segments and "system" in segments
    if whole:  # a whole address: parsed once, for the handler too
        if address is None:
            address = parse_address(segments["namespace"], segments["name"], segments["system"])
        if not raw_query and len(segments) == 3:
            return address  # the warm path (versions): the address was all there was to check
    for key, value in segments.items():
        if key in _SEGMENTS:
            if not whole:
                _check_segment(key, value)
        elif key == "version":
            check_version(value)
    if raw_query:  # most requests have none: no query to parse
        _check_query(request.query)
    return address


def _check_query(query: Mapping[str, str]) -> None:
    for key, value in query.items():
        if _CONTROL_RE.search(key) or _CONTROL_RE.search(value):
            raise BadRequest(f"query parameter {key[:40]!r} contains a control character")
    for key in ("offset", "limit"):
        if key in query:
            _digits(key, query[key])
    for key, grammar, expected in (("namespace", NAME_RE, _NAME_EXPECTED), ("provider", SYSTEM_RE, _SYSTEM_EXPECTED)):
        given = query.get(key)
        if given and not grammar.fullmatch(given):
            raise BadRequest(f"invalid {key} filter {given[:80]!r}: expected {expected}")
    if len(query.get("q", "")) > MAX_SEARCH_CHARS:
        raise BadRequest(f"the search query is longer than {MAX_SEARCH_CHARS} characters")
