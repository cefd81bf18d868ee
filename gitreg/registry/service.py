"""The registry service: module address -> rule -> cached tags -> versions and locations."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from gitreg.config.model import Config, ModuleRule
from gitreg.config.rules import ResolvedModule, RuleIndex, fill_template, match_rule
from gitreg.core import urls
from gitreg.core.errors import ModuleNotFound, VersionNotFound
from gitreg.core.names import ModuleAddress, check_version
from gitreg.core.versions import ModuleVersions, TaggedVersion, select_versions
from gitreg.orgs.catalog import OrgCatalog
from gitreg.registry.tags import TagCache
from gitreg.replicas.base import SharedState
from gitreg.replicas.memory import MemoryShared
from gitreg.storage.archives import ArchiveKey
from gitreg.storage.pins import TagPins

# Tag lists longer than this are turned into versions off the event loop.
BIG_TAG_LIST = 1000
ARCHIVE_NAME = "archive.tar.gz"  # .../{version}/archive.tar.gz: go-getter knows it by the suffix


class Registry:
    """Answers the module registry protocol from configured rules and Git tags."""

    def __init__(self, config: Config, cache: TagCache, pins: TagPins, orgs: OrgCatalog | None = None) -> None:
        self.config = config
        self.cache = cache
        self.rules = RuleIndex(config.modules)
        self.pins = pins
        self.orgs = orgs if orgs is not None and config.orgs else None
        self.shared: SharedState = MemoryShared()  # app.py sets the Redis one: replicas pin a tag at the same commit

    def resolve(self, address: ModuleAddress) -> ResolvedModule:
        """The rule or org serving `address`; ModuleNotFound when none does.

        An explicit [[modules]] rule wins; then an org module; a name an org namespace does not
        list is a 404 without any git call (no wildcard rule guesses a repository for it); then
        wildcard rules.
        """
        resolved = self.rules.explicit.get((address.namespace, address.name, address.system))
        if resolved is not None:
            return resolved
        if self.orgs is not None:
            resolved = self.orgs.resolve(address)
            if resolved is not None:
                return resolved
            if self.orgs.serves_namespace(address.namespace):
                raise self.orgs.not_found(address)
        resolved = match_rule(self.rules.wildcards, address)
        if resolved is None:
            raise ModuleNotFound(f"module {address} is not served by this registry: no [[modules]] rule matches it")
        return resolved

    async def versions(self, address: ModuleAddress) -> tuple[ResolvedModule, ModuleVersions]:
        """The module's versions from its repository's (cached) tags."""
        if (
            self.orgs is not None
            and not self.orgs.complete()
            and (address.namespace, address.name, address.system) not in self.rules.explicit
            and self.orgs.get(address) is None  # listed already, from a first page
        ):
            await self.orgs.wait_listed(address.namespace)  # only until the org's first listing
        resolved = self.resolve(address)
        tags = await self.cache.get(resolved.repository)
        key = ("versions", resolved.rule.tag_prefix)
        found = tags.derived.get(key)
        if found is None:
            # Parsed once per fetched tag list, not per request: this is the warm path.
            if len(tags.tags) > BIG_TAG_LIST:
                # ~10 µs a tag: a long list is parsed in a thread, so the event loop keeps
                # answering other requests meanwhile (bench/scale.py: the /healthz column).
                found = await asyncio.get_running_loop().run_in_executor(
                    None, _select_and_index, tags.tags, resolved.rule.tag_prefix
                )
            else:
                found = select_versions(tags.tags, resolved.rule.tag_prefix)
            found = tags.derived.setdefault(key, found)  # a concurrent request may have won
        assert isinstance(found, ModuleVersions)
        return resolved, found

    async def find_version(self, address: ModuleAddress, version: str) -> tuple[ResolvedModule, TaggedVersion]:
        """The tagged version a client asked for; VersionNotFound when it is not a tag."""
        check_version(version)
        resolved, versions = await self.versions(address)
        found = versions.find(version)
        if found is None:
            listed = ", ".join(tv.canonical for tv in versions.versions[:5]) or "none"
            raise VersionNotFound(f"module {address} has no version {version}; the highest listed: {listed}")
        return resolved, found

    async def download(self, address: ModuleAddress, version: str) -> Download:
        """Where Terraform and OpenTofu fetch the version from, per the rule's `download` mode."""
        resolved, found = await self.find_version(address, version)
        rule = resolved.rule
        sha = await self._served_sha(resolved, found)
        if rule.download == "git":
            if rule.ref == "commit":
                return Download(git_location(resolved.clone_url, rule.path, sha), resolved)
            return Download(git_location(resolved.clone_url, rule.path, found.tag), resolved)
        if rule.download == "archive":
            return Download(f"./{ARCHIVE_NAME}", resolved, archive=ArchiveKey(resolved.repository, sha, rule.path))
        return Download(template_location(rule, address, found, sha), resolved)

    async def archive_key(self, address: ModuleAddress, version: str) -> ArchiveKey:
        """The archive an archive-mode module version is served from (pins applied)."""
        resolved, found = await self.find_version(address, version)
        if resolved.rule.download != "archive":
            raise ModuleNotFound(f"module {address} is not served as an archive by this registry")
        return ArchiveKey(resolved.repository, await self._served_sha(resolved, found), resolved.rule.path)

    async def _served_sha(self, resolved: ResolvedModule, found: TaggedVersion) -> str:
        """The commit to serve for a tag: the first one it was served at, unless allow_moved_tags (see TagPins)."""
        allow = self.config.git.allow_moved_tags
        sha = found.sha
        if self.pins.pinned(resolved.repository, found.tag) is None:
            # First time here: the commit another replica pinned wins (Redis); a warm download asks nobody.
            sha = await self.shared.pin(resolved.repository, found.tag, sha, allow)
        rule = resolved.rule
        return await self.pins.pin(
            resolved.repository,
            found.tag,
            sha,
            allow_moved=allow,
            follows_tag=rule.download == "git" and rule.ref == "tag",
        )


def _select_and_index(tags: Mapping[str, str], tag_prefix: str) -> ModuleVersions:
    """select_versions, plus the lookups every request needs next, made while still off the loop."""
    found = select_versions(tags, tag_prefix)
    found.index  # noqa: B018 - builds the version index (and each version's canonical text)
    return found


@dataclass(frozen=True)
class Download:
    """A download answer: the location, and for archive mode the archive behind it."""

    location: str
    resolved: ResolvedModule
    archive: ArchiveKey | None = None


def template_location(rule: ModuleRule, address: ModuleAddress, found: TaggedVersion, sha: str) -> str:
    """A host tarball URL from the rule's template, pointing into the tarball's wrapper directory."""
    values = {
        "namespace": address.namespace,
        "name": address.name,
        "system": address.system,
        "tag": found.tag,
        "version": found.canonical,
        "sha": sha,
    }
    url = fill_template(rule.download, values, lambda value: quote(value, safe="/"))
    root = (
        fill_template(rule.archive_root, values, lambda value: value.replace("/", "-"))
        if rule.archive_root is not None
        else infer_archive_root(url, found.tag, sha)
    )
    subdir = "/".join(part for part in (root, rule.path) if part)
    parts = urlsplit(url)
    query = parts.query
    if not parts.path.endswith(_ARCHIVE_SUFFIXES):
        query = f"{query}&archive=tar.gz" if query else "archive=tar.gz"
    # go-getter: `//subdir` goes after the URL path and before the query.
    path = f"{parts.path}//{quote(subdir, safe='/')}" if subdir else parts.path
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))


_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip", ".tar")


def infer_archive_root(url: str, tag: str, sha: str) -> str:
    """The wrapper directory GitHub and GitLab put in their tarballs; "" for other hosts.

    GitHub (`codeload.github.com/OWNER/REPO/tar.gz/REF`, `github.com/OWNER/REPO/archive/...`):
    `REPO-REF`, where a tag `v1.2.3` becomes `1.2.3` and `/` becomes `-`. GitLab
    (`.../-/archive/REF/...`): `PROJECT-REF-SHA`. Set `archive_root` when a host differs.
    """
    parts = urlsplit(url)
    segments = [unquote(s) for s in parts.path.split("/") if s]
    host = (parts.hostname or "").lower()
    if host in ("codeload.github.com", "github.com") and len(segments) >= 2:
        repo = segments[1]
        ref = sha if sha in segments else tag
        if re.fullmatch(r"v\d.*", ref):
            ref = ref[1:]
        return f"{repo}-{ref}".replace("/", "-")
    if "-" in segments:
        i = segments.index("-")
        if i >= 1 and i + 1 < len(segments) and segments[i + 1] == "archive":
            project = segments[i - 1]
            ref = sha if sha in segments else tag
            return f"{project}-{ref}-{sha}".replace("/", "-")
    return ""


@functools.lru_cache(maxsize=4096)  # a pure function of config and tags, asked on every download
def git_location(clone_url: str, path: str, ref: str) -> str:
    """`git::<url>[//<path>]?ref=<ref>`, with `ref` percent-encoded (a `+` must reach git as `+`)."""
    subdir = f"//{path}" if path else ""
    return f"{urls.as_go_getter(clone_url)}{subdir}?ref={quote(ref, safe='/')}"
