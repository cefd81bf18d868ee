"""Versions from tags: which tags count, how they order, and why the others are skipped."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

import semver


@dataclass(frozen=True)
class TaggedVersion:
    """A SemVer version found at a tag, with the commit the tag points to (peeled)."""

    version: semver.Version
    tag: str
    sha: str

    @functools.cached_property
    def canonical(self) -> str:
        """The version as listed to clients: SemVer without a leading `v`."""
        return str(self.version)


@dataclass(frozen=True)
class SkippedTag:
    """A tag that is not served, and the reason."""

    tag: str
    reason: str


@dataclass(frozen=True)
class ModuleVersions:
    """The versions of one module, highest first, and the tags that were skipped."""

    versions: tuple[TaggedVersion, ...]
    skipped: tuple[SkippedTag, ...]

    @functools.cached_property
    def index(self) -> dict[str, TaggedVersion]:
        """canonical version (with and without build metadata) -> tagged version."""
        index: dict[str, TaggedVersion] = {}
        for tv in self.versions:
            index.setdefault(tv.canonical.split("+", 1)[0], tv)
            index.setdefault(tv.canonical, tv)
        return index

    def find(self, requested: str) -> TaggedVersion | None:
        """The listed version a client asked for (`1.2.3`, `v1.2.3`, with or without build metadata)."""
        # SemVer text is canonical (no leading zeros, no spaces), so the text without its `v` IS
        # the normal form: one dict lookup, never a parse or a scan, for known and unknown alike.
        return self.index.get(requested[1:] if requested.startswith("v") else requested)

    def latest(self) -> TaggedVersion | None:
        """The highest release, or the highest prerelease when there is no release."""
        for tv in self.versions:
            if not tv.version.prerelease:
                return tv
        return self.versions[0] if self.versions else None


# SemVer 2.0 as semver.org gives it ("Is there a suggested regular expression?"), with ASCII
# digits only (Python's \d also matches other scripts' digits): the one statement of the
# grammar in gitreg. SEMVER_RE: exactly the versions that parse_version accepts, less its
# optional leading `v` (a version as listed); TAG_VERSION_RE: with it (as requested or tagged).
SEMVER = (
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)
SEMVER_RE = re.compile(SEMVER)
TAG_VERSION_RE = re.compile("v?" + SEMVER)


@functools.lru_cache(maxsize=4096)
def is_canonical(text: str) -> bool:
    """True when `text` is a version as gitreg lists it: SemVer 2.0, no leading `v`.

    The check of every version in a persisted index at start: one regex match (remembered:
    the same versions recur across modules), not a semver.Version built and thrown away.
    """
    return SEMVER_RE.fullmatch(text) is not None


def parse_version(text: str) -> semver.Version | None:
    """Parse SemVer 2.0 with an optional leading `v`; None when it is not SemVer."""
    if text.startswith("v"):
        text = text[1:]
    # semver.Version.parse accepts bytes and surrounding oddities we do not want: be strict.
    if not text or not text.isascii() or not text[0].isdigit():
        return None
    try:
        return semver.Version.parse(text)
    except ValueError:
        return None


# A sort key in SemVer precedence order (see `precedence`): major, minor, patch, 1 for a release
# or 0 for a prerelease, then the prerelease identifiers as (0, number, "") or (1, 0, text).
PrecedenceKey = tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]


def select_versions(tags: Mapping[str, str], tag_prefix: str = "") -> ModuleVersions:
    """Pick the tags that are `tag_prefix` + optional `v` + SemVer 2.0, one per version."""
    found: dict[tuple[int, int, int, str | None], TaggedVersion] = {}  # by version without build metadata
    skipped: list[SkippedTag] = []
    # Sorted so the choice between duplicates never depends on the order git lists tags in.
    for tag in sorted(tags):
        if not tag.startswith(tag_prefix):
            continue  # another module's tag in a monorepo: not ours to explain
        rest = tag[len(tag_prefix) :]
        version = parse_version(rest)
        if version is None:
            skipped.append(SkippedTag(tag, _why_not_semver(rest, tag_prefix)))
            continue
        tv = TaggedVersion(version, tag, tags[tag])
        # Build metadata does not count for precedence: 1.0.0+a and 1.0.0+b are the same version.
        key = (version.major, version.minor, version.patch, version.prerelease)
        kept = found.get(key)
        if kept is None:
            found[key] = tv
            continue
        winner, loser = (kept, tv) if _preferred(kept, tv) else (tv, kept)
        found[key] = winner
        skipped.append(SkippedTag(loser.tag, f"duplicate of version {winner.canonical}: tag {winner.tag!r} is served"))
    ordered = sorted(found.values(), key=precedence, reverse=True)
    return ModuleVersions(tuple(ordered), tuple(sorted(skipped, key=lambda s: s.tag)))


def precedence(tv: TaggedVersion) -> PrecedenceKey:
    """A sort key in SemVer 2.0 precedence order, made of plain tuples.

    Sorting 10,000 tags by semver.Version comparisons took ~0.4 s (each compare builds
    tuples); one key per version sorts them in milliseconds. Rules (semver.org, 11): numbers
    compare numerically; a prerelease sorts before its release; prerelease identifiers compare
    numerically when numeric, by ASCII otherwise, numeric before alphanumeric, and a shorter
    list of identifiers first when all before are equal.
    """
    v = tv.version
    if not v.prerelease:
        return (v.major, v.minor, v.patch, 1, ())
    return (
        v.major,
        v.minor,
        v.patch,
        0,
        tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in v.prerelease.split(".")),
    )


def _preferred(a: TaggedVersion, b: TaggedVersion) -> bool:
    """Between two tags of one version, prefer the one without `v`, then the shorter name, then by name."""

    def rank(tv: TaggedVersion) -> tuple[bool, int, str]:
        return (tv.tag.rsplit("/", 1)[-1].startswith("v"), len(tv.tag), tv.tag)

    return rank(a) <= rank(b)


def _why_not_semver(rest: str, prefix: str) -> str:
    shown = f"{prefix!r} + {rest!r}" if prefix else repr(rest)
    bare = rest[1:] if rest.startswith("v") else rest
    parts = bare.split("+", 1)[0].split("-", 1)[0].split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return f"{shown} is not MAJOR.MINOR.PATCH (SemVer 2.0 needs exactly three numbers)"
    if any(len(p) > 1 and p.startswith("0") for p in parts):
        return f"{shown} has a leading zero, which SemVer 2.0 forbids"
    return f"{shown} is not a valid SemVer 2.0 version (check the prerelease and build parts)"
