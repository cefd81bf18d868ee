"""Deprecation and revocation declared in Git: a module's `.gitreg.toml`, parsed and applied.

The file lives in the module's folder (the repository root, or the rule's `path`) on the default
branch; `declared.py` reads it. Here, pure and bounded (repository content is hostile input):

    [[deprecated]]
    versions = "< 2.0.0"                          # a Terraform version constraint
    reason   = "2.x moves to the new VPC layout"
    link     = "https://wiki.example.com/vpc-2"   # optional, http(s) only
    [[revoked]]
    versions = "= 1.4.2"
    reason   = "leaks the KMS key ARN in an output"

A malformed file declares nothing (and says why: `Declaration.problem`), never half of itself.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from gitreg.core.constraints import Constraint, ConstraintError, parse_constraint
from gitreg.core.versions import ModuleVersions

FILE_NAME = ".gitreg.toml"
MAX_FILE_BYTES = 64 * 1024  # a few dozen entries take a few KiB
MAX_ENTRIES = 200  # [[deprecated]] and [[revoked]] together
MAX_REASON = 1000  # characters
MAX_LINK = 2000
MAX_VERSIONS = 500  # as core.constraints.MAX_CONSTRAINT
_KINDS = ("deprecated", "revoked")
_KEYS = {"versions", "reason", "link"}


class Versioned(Protocol):
    """A version as listed (core.versions.TaggedVersion, index.model.IndexedVersion)."""

    @property
    def canonical(self) -> str: ...


@dataclass(frozen=True)
class Rule:
    """One `[[deprecated]]` or `[[revoked]]` entry."""

    constraint: Constraint
    reason: str
    link: str | None = None


@dataclass(frozen=True)
class Declaration:
    """What a module's `.gitreg.toml` declares; `problem` when the file is malformed (then nothing)."""

    deprecated: tuple[Rule, ...] = ()
    revoked: tuple[Rule, ...] = ()
    problem: str | None = None
    # canonical version -> its rule, filled on first use (a declaration is read once per default-branch commit)
    _memo: dict[tuple[str, str], Rule | None] = field(default_factory=dict, compare=False, repr=False)

    @property
    def empty(self) -> bool:
        """True when it declares nothing (no file, an empty one, or a malformed one)."""
        return not self.deprecated and not self.revoked

    def deprecation(self, version: Versioned) -> Rule | None:
        """The first `[[deprecated]]` entry whose constraint allows `version`, else None."""
        return self._match("deprecated", self.deprecated, version)

    def revocation(self, version: Versioned) -> Rule | None:
        """The first `[[revoked]]` entry whose constraint allows `version`, else None."""
        return self._match("revoked", self.revoked, version)

    def _match(self, kind: str, rules: tuple[Rule, ...], version: Versioned) -> Rule | None:
        if not rules:
            return None
        key = (kind, version.canonical)
        if key not in self._memo:
            self._memo[key] = next((r for r in rules if r.constraint.allows(version.canonical)), None)
        return self._memo[key]

    def details(self, version: Versioned) -> dict[str, object]:
        """What a version's details (API and page) say of it: `deprecation`, `revoked`, and the file's
        `declaration_problem` (each null when there is none)."""
        deprecated, revoked = self.deprecation(version), self.revocation(version)
        return {
            "deprecation": None if deprecated is None else {"reason": deprecated.reason, "link": deprecated.link},
            "revoked": None if revoked is None else {"reason": revoked.reason},
            "declaration_problem": self.problem,
        }

    def marks(self, versions: Iterable[Versioned]) -> dict[str, str]:
        """canonical -> "revoked" or "deprecated", for the versions the declaration names (a page's picker)."""
        found: dict[str, str] = {}
        for version in versions:
            if self.revocation(version) is not None:
                found[version.canonical] = "revoked"
            elif self.deprecation(version) is not None:
                found[version.canonical] = "deprecated"
        return found

    def served(self, found: ModuleVersions) -> ModuleVersions:
        """`found` without its revoked versions (what the versions answer lists)."""
        if not self.revoked:
            return found
        return ModuleVersions(tuple(tv for tv in found.versions if self.revocation(tv) is None), found.skipped)

    def to_json(self) -> dict[str, object]:
        """The stored form (declared.py keeps declarations across restarts)."""
        return {
            "deprecated": [_rule_json(r) for r in self.deprecated],
            "revoked": [_rule_json(r) for r in self.revoked],
            "problem": self.problem,
        }


NOTHING = Declaration()


def _rule_json(rule: Rule) -> dict[str, str | None]:
    return {"versions": rule.constraint.text, "reason": rule.reason, "link": rule.link}


def malformed(problem: str) -> Declaration:
    """A malformed file's declaration: nothing declared, and why."""
    return Declaration(problem=f"{FILE_NAME} is malformed and declares nothing: {problem}")


def parse_declaration(data: bytes) -> Declaration:
    """The declaration in a `.gitreg.toml`'s bytes; a malformed one (see `problem`) when it is not valid."""
    if len(data) > MAX_FILE_BYTES:
        return malformed(f"it is larger than {MAX_FILE_BYTES // 1024} KiB")
    try:
        text = data.decode("utf-8")
        document = tomllib.loads(text)
    except UnicodeDecodeError:
        return malformed("it is not UTF-8 text")
    except (tomllib.TOMLDecodeError, RecursionError) as e:
        return malformed(f"not valid TOML ({str(e)[:200]})")
    try:
        return _declaration(document)
    except ValueError as e:
        return malformed(str(e))


def _declaration(document: Mapping[str, object]) -> Declaration:
    unknown = sorted(set(document) - set(_KINDS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0][:60]!r} (expected [[deprecated]] and [[revoked]])")
    found: dict[str, tuple[Rule, ...]] = {}
    total = 0
    for kind in _KINDS:
        entries = document.get(kind, [])
        if not isinstance(entries, list):
            raise ValueError(f"{kind} must be an array of tables ([[{kind}]])")
        total += len(entries)
        if total > MAX_ENTRIES:
            raise ValueError(f"more than {MAX_ENTRIES} entries")
        found[kind] = tuple(_rule(kind, i, entry) for i, entry in enumerate(entries))
    return Declaration(deprecated=found["deprecated"], revoked=found["revoked"])


def _rule(kind: str, i: int, entry: object) -> Rule:
    where = f"{kind}[{i}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be a table")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0][:60]!r}")
    versions = _text(entry, "versions", where, MAX_VERSIONS)
    reason = _text(entry, "reason", where, MAX_REASON)
    try:
        constraint = parse_constraint(versions)
    except ConstraintError as e:
        raise ValueError(f"{where}.versions: {e}") from None
    link = None
    if "link" in entry:
        link = _text(entry, "link", where, MAX_LINK)
        parts = urlsplit(link)
        if parts.scheme not in ("http", "https") or not parts.netloc or any(c in link for c in " \t\r\n"):
            raise ValueError(f"{where}.link: only an http(s) URL is allowed")
    return Rule(constraint, reason, link)


def _text(entry: dict[str, object], key: str, where: str, limit: int) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}.{key}: missing (a non-empty string)")
    if len(value) > limit:
        raise ValueError(f"{where}.{key}: longer than {limit} characters")
    if any(ord(c) < 32 and c not in "\t\n" for c in value):
        raise ValueError(f"{where}.{key}: control characters are not allowed")
    return value.strip()


def from_json(data: object) -> Declaration | None:
    """A stored declaration (see `Declaration.to_json`); None when it is not one (then it is read again)."""
    if not isinstance(data, dict):
        return None
    try:
        problem = data.get("problem")
        if problem is not None:
            return Declaration(problem=str(problem))
        document = {kind: [{k: v for k, v in r.items() if v is not None} for r in data[kind]] for kind in _KINDS}
        return _declaration(document)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
