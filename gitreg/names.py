"""The registry's address grammar, checked before any rule or git command sees a request."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import BadRequest

# namespace and name: 1-64 letters, digits, '-' and '_', starting and ending with a letter or digit.
NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9])?", re.ASCII)
# system: 1-64 lowercase letters and digits.
SYSTEM_RE = re.compile(r"[a-z0-9]{1,64}", re.ASCII)


@dataclass(frozen=True, order=True)
class ModuleAddress:
    """A module's `namespace/name/system`, already checked against the grammar."""

    namespace: str
    name: str
    system: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}/{self.system}"


def parse_address(namespace: str, name: str, system: str) -> ModuleAddress:
    """Check request segments against the registry grammar; BadRequest names the bad one."""
    for label, value, grammar, expected in (
        ("namespace", namespace, NAME_RE, "1-64 letters, digits, '-' or '_', starting and ending with a letter or digit"),
        ("name", name, NAME_RE, "1-64 letters, digits, '-' or '_', starting and ending with a letter or digit"),
        ("system", system, SYSTEM_RE, "1-64 lowercase letters and digits"),
    ):
        if not grammar.fullmatch(value):
            raise BadRequest(f"invalid module {label} {value[:80]!r}: expected {expected}")
    return ModuleAddress(namespace, name, system)
