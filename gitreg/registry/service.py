"""The registry service: module address -> rule -> cached tags -> versions and locations.

The facade of the registry protocol (`terraform init`'s path): the handlers in
web/api/modules.py call this and nothing else to answer versions, downloads and archives.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from gitreg.config.model import Config, ModuleRule
from gitreg.config.rules import ResolvedModule, fill_template
from gitreg.core import urls
from gitreg.core.content import ContentKey
from gitreg.core.errors import GitregError, ModuleNotFound, VersionNotFound, VersionRevoked
from gitreg.core.names import ModuleAddress, check_version
from gitreg.core.versions import ModuleVersions, TaggedVersion, select_versions
from gitreg.git.remote import TagList
from gitreg.registry.catalog import Catalog
from gitreg.registry.declared import Declarations
from gitreg.registry.lifecycle import NOTHING, Declaration
from gitreg.registry.resolve import Resolver
from gitreg.registry.signatures import Signatures
from gitreg.registry.tags import TagCache
from gitreg.replicas.base import SharedState
from gitreg.storage.archives import ArchiveStore
from gitreg.storage.pins import TagPins

# Tag lists longer than this are turned into versions off the event loop.
BIG_TAG_LIST = 1000
ARCHIVE_NAME = "archive.tar.gz"  # .../{version}/archive.tar.gz: go-getter knows it by the suffix
# How long a download lookup waits for an archive build before answering with its URL anyway
# (Terraform gives the lookup 10 s; the package fetch then waits for the build, untimed).
ARCHIVE_LOOKUP_WAIT = 5.0


@dataclass
class _Derived:
    """What the warm path derives from one fetched tag list, computed once per fetch."""

    versions: dict[str, ModuleVersions] = field(default_factory=dict)  # by tag_prefix
    # (tag_prefix, address) -> (the signatures' generation and the .gitreg.toml declaration it was
    # rendered with, its JSON, whether it lists any version)
    answers: dict[tuple[str, ModuleAddress], tuple[int, Declaration, bytes, bool]] = field(default_factory=dict)


class _DerivedByTagList:
    """_Derived per TagList, keyed by the list's identity and dropped with it (a refresh is a new list).

    Buys 221 µs of CPU a versions request (bench/warm_parts.py's operator request, its versions
    selected and its answer rendered every time instead: 4 paired runs, medians; under load).
    """

    def __init__(self) -> None:
        self._by_id: dict[int, _Derived] = {}

    def of(self, tags: TagList) -> _Derived:
        found = self._by_id.get(id(tags))
        if found is None:
            found = self._by_id[id(tags)] = _Derived()
            # Runs when the list is freed, before its id can be reused.
            weakref.finalize(tags, self._by_id.pop, id(tags), None)
        return found


class Registry:
    """Answers the module registry protocol from configured rules and Git tags."""

    def __init__(
        self,
        config: Config,
        resolver: Resolver,
        cache: TagCache,
        pins: TagPins,
        shared: SharedState,
        catalog: Catalog,
        archives: ArchiveStore,
        signatures: Signatures | None = None,
        declarations: Declarations | None = None,
    ) -> None:
        self.config = config
        self.resolver = resolver
        self.cache = cache
        self.pins = pins
        self.shared = shared  # with Redis, replicas pin a tag at the same commit
        self.catalog = catalog
        self.archives = archives
        self.signatures = signatures  # [signing]: which versions are served where signatures are required
        self.declarations = declarations  # .gitreg.toml: deprecated and revoked versions (declared.py)
        self._derived = _DerivedByTagList()

    def resolve(self, address: ModuleAddress) -> ResolvedModule:
        """The rule or org serving `address`; ModuleNotFound when none does (see Resolver.resolve)."""
        return self.resolver.resolve(address)

    async def versions(self, address: ModuleAddress) -> tuple[ResolvedModule, ModuleVersions]:
        """The module's versions from its repository's (cached) tags."""
        resolved, _, found = await self._versions(address)
        return resolved, found

    def _ready(self, address: ModuleAddress) -> tuple[ResolvedModule, _Derived, ModuleVersions] | None:
        """What `_versions` finds when nothing needs waiting for (the warm path, without a
        coroutine): the org listed, the repository's tags fresh in the cache, their versions
        selected; None otherwise."""
        if self.resolver.must_wait(address):
            return None
        resolved = self.resolver.resolve(address)
        tags = self.cache.fresh(resolved.repository)
        if tags is None:
            return None
        derived = self._derived.of(tags)
        found = derived.versions.get(resolved.rule.tag_prefix)
        return None if found is None else (resolved, derived, found)

    async def _versions(self, address: ModuleAddress) -> tuple[ResolvedModule, _Derived, ModuleVersions]:
        ready = self._ready(address)
        if ready is not None:
            return ready
        resolved = await self.resolver.resolve_listed(address)
        tags = await self.cache.get(resolved.repository)
        derived = self._derived.of(tags)
        prefix = resolved.rule.tag_prefix
        found = derived.versions.get(prefix)
        if found is None:
            # Parsed once per fetched tag list, not per request: this is the warm path.
            if len(tags.tags) > BIG_TAG_LIST:
                # ~10 µs a tag: a long list is parsed in a thread, so the event loop keeps
                # answering other requests meanwhile (bench/scale.py: the /healthz column).
                found = await asyncio.get_running_loop().run_in_executor(None, _select_and_index, tags.tags, prefix)
            else:
                found = select_versions(tags.tags, prefix)
            found = derived.versions.setdefault(prefix, found)  # a concurrent request may have won
        return resolved, derived, found

    async def served_versions(self, address: ModuleAddress) -> tuple[ResolvedModule, ModuleVersions]:
        """versions() for a client (revoked versions left out): a module served with versions becomes listed."""
        resolved, found = await self.versions(address)
        if self.signatures is not None:  # where required, unsigned versions are not served
            found, _ = await self.signatures.served(resolved, found)
        found = (await self.declared(resolved)).served(found)
        if found.versions:
            self.served(resolved)
        return resolved, found

    def served(self, resolved: ResolvedModule) -> None:
        """A module was served with versions: a wildcard rule's module becomes listable."""
        self.catalog.remember(resolved)

    async def versions_answer(self, address: ModuleAddress) -> bytes:
        """The versions endpoint's JSON body (UTF-8), rendered once per fetched tag list and address."""
        resolved, derived, found = await self._versions(address)
        declared = self._declared_now(resolved)
        key = (resolved.rule.tag_prefix, address)
        stamp = self.signatures.stamp(resolved.rule) if self.signatures is not None else 0
        memo = derived.answers.get(key)
        if declared is not None and memo is not None and memo[0] == stamp and memo[1] is declared:
            text, listed = memo[2], memo[3]
        else:
            # The .gitreg.toml read and the signatures' verification wait side by side, not one after the other.
            pending = asyncio.ensure_future(self.declared(resolved)) if declared is None else None
            complete = True
            try:
                if self.signatures is not None:  # where required, unsigned versions are left out
                    found, complete = await self.signatures.served(resolved, found)
            except BaseException:
                if pending is not None:
                    pending.cancel()  # the read itself is shared and goes on (Declarations)
                raise
            if pending is not None:
                declared = await pending
            assert declared is not None
            # Neither CLI reads `source` (Terraform and OpenTofu only log it); Renovate shows it as the
            # module's source link when it is an http(s) URL: the repository's web page, when known.
            source = urls.web_url(resolved.clone_url) or str(address)
            body = {"modules": [{"source": source, "versions": lifecycle_entries(declared, found)}]}
            text, listed = json.dumps(body).encode(), bool(found.versions)
            if complete:  # a version not verified in time is asked about again by the next request
                derived.answers[key] = (stamp, declared, text, listed)
        if listed:
            self.served(resolved)
        return text

    def _declared_now(self, resolved: ResolvedModule) -> Declaration | None:
        """The module's .gitreg.toml declaration when known at its default branch's commit (no coroutine)."""
        if self.declarations is None:
            return NOTHING
        tags = self.cache.peek(resolved.repository)
        return self.declarations.known(resolved.repository, resolved.rule.path, tags.head if tags else None)

    async def declared(self, resolved: ResolvedModule) -> Declaration:
        """The module's .gitreg.toml declaration at its default branch's commit (read when it moved)."""
        if self.declarations is None:
            return NOTHING
        tags = self.cache.peek(resolved.repository)
        head = tags.head if tags is not None else None
        return await self.declarations.declaration(resolved.repository, resolved.rule.path, head)

    def declared_for(self, address: ModuleAddress) -> Declaration:
        """The .gitreg.toml declaration of a module for its pages and details, as last read: browsing
        runs no git (a moved default branch is read in the background); NOTHING when none was read."""
        if self.declarations is None:
            return NOTHING
        try:
            resolved = self.resolve(address)
        except GitregError:
            return NOTHING
        tags = self.cache.peek(resolved.repository)
        if tags is None:
            # Not served from this process yet (with an index process, pages come from its index): the
            # tag list is fetched in the background, and its fetch reads the file (tags_fetched).
            self.cache.refresh_in_background(resolved.repository)
            return NOTHING
        return self.declarations.last(resolved.repository, resolved.rule.path, tags.head)

    def tags_fetched(self, repository: str) -> None:
        """A new tag list of `repository` (TagCache.on_fetched): its modules' .gitreg.toml is read in the
        background when the default branch moved, so that pages (which run no git) find it known."""
        tags = self.cache.peek(repository)
        if self.declarations is None or tags is None or tags.head is None:
            return
        folders = {rule.path for rule in self.config.modules if rule.repository == repository} or {""}
        for folder in folders | self.declarations.folders(repository):
            self.declarations.last(repository, folder, tags.head)

    async def latest(self, address: ModuleAddress) -> TaggedVersion:
        """The highest version a client is served; VersionNotFound when no tag is a version."""
        _, found = await self.served_versions(address)
        latest = found.latest()
        if latest is None:
            raise VersionNotFound(f"module {address} has no versions: no tag is a SemVer version")
        return latest

    def downloaded(self, address: ModuleAddress, answer: Download) -> None:
        """A download answer went out: counted (in memory; the catalog writes it in batches), and listed."""
        self.catalog.count_download(address)
        self.served(answer.resolved)

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
        await self._not_revoked(resolved, found, counted=True)
        if self.signatures is not None:
            await self.signatures.check(resolved, found)  # NotSigned (403) where required and unsigned
        rule = resolved.rule
        sha = await self._served_sha(resolved, found)
        if rule.download == "git":
            if rule.ref == "commit":
                return Download(git_location(resolved.clone_url, rule.path, sha, commit=True), resolved)
            return Download(git_location(resolved.clone_url, rule.path, found.tag, shallow=rule.shallow), resolved)
        if rule.download == "archive":
            return Download(f"./{ARCHIVE_NAME}", resolved, archive=ContentKey(resolved.repository, rule.path, sha))
        return Download(template_location(rule, address, found, sha), resolved)

    async def archive_key(self, address: ModuleAddress, version: str) -> ContentKey:
        """The archive an archive-mode module version is served from (pins applied)."""
        resolved, found = await self.find_version(address, version)
        await self._not_revoked(resolved, found)  # revocation wins over an archive already built
        if resolved.rule.download != "archive":
            raise ModuleNotFound(f"module {address} is not served as an archive by this registry")
        if self.signatures is not None:
            await self.signatures.check(resolved, found)  # NotSigned (403) where required and unsigned
        return ContentKey(resolved.repository, resolved.rule.path, await self._served_sha(resolved, found))

    async def _not_revoked(self, resolved: ResolvedModule, found: TaggedVersion, counted: bool = False) -> None:
        """VersionRevoked (410, with the reason) when .gitreg.toml revokes `found`; a deprecated one is counted."""
        if self.declarations is None:
            return
        declared = self._declared_now(resolved) or await self.declared(resolved)
        check_revoked(self.declarations, resolved.address, declared, found, counted)

    async def archive_checksum(self, key: ContentKey) -> str | None:
        """Start the build (so a broken module fails here, with its reason); the archive's SHA-256 once built.

        go-getter takes `checksum` out of the URL and checks the downloaded bytes against it before
        unpacking. A build still running after ARCHIVE_LOOKUP_WAIT has no checksum yet: that one
        answer goes without (waiting longer would pass Terraform's 10 s lookup timeout and fail init).
        """
        if self.archives.cached(key) is None:
            task = self.archives.start(key)
            with contextlib.suppress(TimeoutError):
                # A quick build finishes here; a slow first clone goes on while the client follows the URL.
                await asyncio.wait_for(asyncio.shield(task), ARCHIVE_LOOKUP_WAIT)
        return await self.archives.checksum(key)

    async def hold_archive(self, address: ModuleAddress, version: str) -> tuple[str, Callable[[], None]]:
        """The archive file of an archive-mode version, held against eviction until `release` is called."""
        path = await self.archives.hold(await self.archive_key(address, version))
        return path, functools.partial(self.archives.release, path)

    async def _served_sha(self, resolved: ResolvedModule, found: TaggedVersion) -> str:
        """The commit to serve for a tag: the first one it was served at, unless allow_moved_tags (see TagPins)."""
        allow = self.config.git.allow_moved_tags
        sha, at = found.sha, None
        if self.pins.pinned(resolved.repository, found.tag) is None:
            # First time here: the commit another replica pinned wins (Redis); a warm download asks nobody.
            sha, at = await self.shared.pin(resolved.repository, found.tag, sha, allow, time.time())
        rule = resolved.rule
        return await self.pins.pin(
            resolved.repository,
            found.tag,
            sha,
            allow_moved=allow,
            follows_tag=rule.download == "git" and rule.ref == "tag",
            at=at,
        )


def lifecycle_entries(declared: Declaration, found: ModuleVersions) -> list[dict[str, object]]:
    """The versions answer's entries: revoked versions left out, deprecated ones with `deprecation`
    (HCP Terraform's shape; both Terraform CLIs install them, warning or not)."""
    entries: list[dict[str, object]] = []
    for tv in declared.served(found).versions:
        rule = declared.deprecation(tv)
        if rule is None:
            entries.append({"version": tv.canonical})
        else:
            entries.append({"version": tv.canonical, "deprecation": {"reason": rule.reason, "link": rule.link}})
    return entries


def check_revoked(
    declarations: Declarations, address: ModuleAddress, declared: Declaration, found: TaggedVersion, count: bool
) -> None:
    """Raise VersionRevoked when `declared` revokes `found` (counted); count a deprecated download."""
    revoked = declared.revocation(found)
    if revoked is not None:
        declarations.revoked_requests.add(address)
        raise VersionRevoked(f"module {address} version {found.canonical} is revoked: {revoked.reason}")
    if count and declared.deprecation(found) is not None:
        declarations.deprecated_downloads.add(address)


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
    archive: ContentKey | None = None


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


# A pure function of config and tags, asked on every download: buys 20.6 µs of CPU a download
# request (bench/warm_parts.py's operator scenario asking for a download, 60 paired rounds with and
# without it in one process, medians; under load: ~130 µs a request).
@functools.lru_cache(maxsize=4096)
def git_location(clone_url: str, path: str, ref: str, *, commit: bool = False, shallow: bool = False) -> str:
    """`git::<url>[//<path>]?ref=<ref>`, with `ref` percent-encoded (a `+` must reach git as `+`).

    `ref` is the location's only query unless the rule says `shallow`: Checkov 3.3.30 takes all
    after `?ref=` as the tag and tfmodcache 0.1.0 clones `<url>?<other parameters>`, so any other
    parameter, in any order, makes them skip the module. With `shallow` (a tag only) `&depth=1`
    follows: go-getter then runs `git clone --depth 1 --branch <tag>`. A commit cannot be cloned
    shallow (`--branch` takes no SHA, and go-getter refuses `depth` with one).
    """
    subdir = f"//{path}" if path else ""
    depth = "&depth=1" if shallow and not commit else ""
    return f"{urls.as_go_getter(clone_url)}{subdir}?ref={quote(ref, safe='/')}{depth}"
