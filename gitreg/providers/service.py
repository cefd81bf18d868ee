"""`Providers`: the one facade of provider serving (see the package docstring).

A request names `namespace/type`; the most specific `[[providers]]` rule serves it (its type,
else `*`). Its repository's releases are read from the Git host with gitreg's credential for
that host (the token of an `[[orgs]]` entry on the same API, else the password of the
`[[credentials]]` entry covering the repository URL) and kept like a tag list: for `[cache]
ttl_seconds`, one read at a time per provider, the last good list served for `stale_seconds`
when the host fails. Each release is verified once (its assets' URLs and digests are the key)
and the answer, served or refused with a reason, is remembered.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import semver

from gitreg.config.model import PROVIDER_TYPE_RE, Config, OrgConfig, ProviderRule, credential_for
from gitreg.core.errors import GitregError, ModuleNotFound, UpstreamUnavailable, VersionNotFound
from gitreg.core.flight import InFlight
from gitreg.core.urls import host_path, parse
from gitreg.core.versions import parse_version
from gitreg.forges.base import ForgeClient, ForgeError, ForgeNotFound
from gitreg.forges.hosts import client_for
from gitreg.forges.records import Release
from gitreg.forges.releases import open_asset, read_asset, storage_location
from gitreg.providers.fetches import Follower, NotKept, PackageFetch, PackageFetches, PackageMismatch
from gitreg.providers.hashstore import HashStore
from gitreg.providers.keys import Keyring, KeysError, PublicKey
from gitreg.providers.packages import DIRECTORY as PACKAGES_DIRECTORY
from gitreg.providers.packages import PackageFiles
from gitreg.providers.readme import ReleaseReadmes
from gitreg.providers.release import (
    Candidate,
    Package,
    ProviderVersion,
    Refusal,
    candidate,
    checksums,
    packages,
    protocols,
)

log = logging.getLogger(__name__)

MAX_SUMS_BYTES = 256 * 1024
MAX_SIGNATURE_BYTES = 64 * 1024
MAX_MANIFEST_BYTES = 64 * 1024
# Releases verified at once when a list is first read (each costs two or three small downloads and a gpgv).
VERIFY_CONCURRENCY = 4
MAX_REMEMBERED = 20_000
# A mirror's version answer waits this long for `h1:` hashes not computed yet (then answers `zh:` alone).
H1_WAIT = 8.0


def full_name(repository: str, api_url: str) -> str:
    """A repository URL's full name as its host's API names it: the URL's path without `.git`, and
    without the path a host served under a sub-path lives at (a GitLab whose API is
    `https://git.example.com/gitlab/api/v4` names `https://git.example.com/gitlab/acme/x` `acme/x`)."""
    found = parse(repository)
    if found is None:
        return ""
    path = found.path.strip("/").removesuffix(".git")
    api = urlsplit(api_url)
    root = api.path.strip("/").removesuffix("api/v4").removesuffix("api/v3").strip("/")
    if root and found.host.lower() == (api.hostname or "").lower() and path.lower().startswith(root.lower() + "/"):
        path = path[len(root) + 1 :]
    return path


@functools.lru_cache(maxsize=64)
def type_pattern(repository: str, api_url: str) -> re.Pattern[str]:
    """A `*` rule's repository as a pattern over a repository's full name on its host (lowercase),
    `{type}` a group named `type`."""
    marker = "gitregprovidertype"
    path = full_name(repository.replace("{type}", marker), api_url).lower()
    return re.compile(re.escape(path).replace(marker, "(?P<type>[a-z0-9-]+)"))


@dataclass(frozen=True)
class Listing:
    """A provider's releases: those served (newest first) and those refused, with the reasons."""

    versions: tuple[ProviderVersion, ...]
    refused: tuple[Refusal, ...]

    def find(self, version: str) -> ProviderVersion | None:
        """The served version spelled `version` (normalized: `v1.0.0` is 1.0.0)."""
        parsed = parse_version(version)
        wanted = str(parsed) if parsed is not None else version
        return next((v for v in self.versions if v.version == wanted), None)


@dataclass(frozen=True)
class Readme:
    """The README at a release's tag: its Markdown, the commit, the repository's web page."""

    text: str
    commit: str
    web_url: str


@dataclass(frozen=True)
class Source:
    """Where `namespace/type` comes from: its rule, the repository URL and its path on the host."""

    namespace: str
    type: str
    rule: ProviderRule
    repository: str
    full_name: str


class Providers:
    """Providers served from releases (see the module docstring); `start` loads the keys, `close` drops them."""

    def __init__(
        self,
        config: Config,
        session: Callable[[], aiohttp.ClientSession],
        clock: Callable[[], float],
        hashes: HashStore | None = None,
        packages: PackageFiles | None = None,
        repositories: Callable[[], Iterable[tuple[str, str]]] = tuple,
        readmes: ReleaseReadmes | None = None,
    ) -> None:
        self.config = config
        # (API URL, full name) of the repositories the orgs enumerated: the types `*` rules serve unasked.
        self._repositories = repositories
        self.readmes = readmes  # None: no README on the pages (`gitreg check --probe`)
        self._repository_urls: dict[str, tuple[str, str]] = {}  # full name -> (clone URL, web URL)
        self.rules = config.providers
        self._session = session
        self._clock = clock
        self._keyrings: dict[str, Keyring] = {}
        self._unreadable: dict[str, str] = {}  # keys files gpg could not read: why
        self._lists: dict[tuple[str, str], tuple[float, Listing]] = {}
        self._reading: InFlight[tuple[str, str], Listing] = InFlight()
        self._verified: dict[tuple[object, ...], ProviderVersion | Refusal] = {}
        self._verify_slots = asyncio.Semaphore(VERIFY_CONCURRENCY)
        self.hashes = hashes or HashStore(Path(config.storage.path))
        self.packages = packages or PackageFiles(Path(config.storage.path) / PACKAGES_DIRECTORY)
        self.fetches = PackageFetches(self.packages)

    async def start(self) -> None:
        """Import each keys file into a GNUPGHOME of gitreg's own; read the `h1:` hashes kept."""
        await asyncio.to_thread(self.hashes.load)
        await self.packages.start()
        for rule in self.rules:
            if rule.keys not in self._keyrings and rule.keys not in self._unreadable:
                try:
                    self._keyrings[rule.keys] = await Keyring.load(rule.keys)
                except KeysError as e:  # every release of its rules is refused, saying why
                    log.error("[[providers]] keys %s: %s; no release signed for it is served", rule.keys, e)
                    self._unreadable[rule.keys] = str(e)

    def close(self) -> None:
        """Stop the packages' fetches (`stopped` waits for them); remove the GNUPGHOMEs."""
        self.fetches.close()
        for keyring in self._keyrings.values():
            keyring.close()
        self._keyrings.clear()

    async def aclose(self) -> None:
        """`close`, then wait until the fetches it stopped removed their temporary files."""
        self.close()
        await self.fetches.wait_closed()

    # ---- which rule serves an address ------------------------------------------------------

    def source(self, namespace: str, type_: str) -> Source:
        """The rule serving `namespace/type` (its own type before `*`); ModuleNotFound when none."""
        ns = namespace.lower()
        found = [r for r in self.rules if r.namespace.lower() == ns and r.type in (type_, None)]
        if not found:
            raise ModuleNotFound(f"no provider {namespace}/{type_} is served here")
        rule = min(found, key=lambda r: r.type is None)
        repository = rule.repository_for(type_)
        return Source(namespace, type_, rule, repository, full_name(repository, rule.api_url))

    def _client(self, source: Source) -> ForgeClient:
        rule = source.rule
        token = next((o.token for o in self.config.orgs if o.api_url == rule.api_url and o.token), None)
        if token is None:
            cred = credential_for(self.config.credentials, source.repository)
            token = cred.password if cred is not None else None
        org = OrgConfig(
            provider=rule.provider, api_url=rule.api_url, group=source.full_name, namespace=rule.namespace, token=token
        )
        return client_for(org, self._session())

    def keys(self, source: Source) -> tuple[PublicKey, ...]:
        """The keys that may sign `source`'s releases."""
        return self._keyrings[source.rule.keys].keys

    def known(self) -> list[tuple[str, str]]:
        """The providers a listing shows: each rule's fixed type, the types of `*` rules whose repositories
        the orgs enumerated (an `[[orgs]]` entry's `providers = true` included), and those asked for so far."""
        found = {(r.namespace.lower(), r.type) for r in self.rules if r.type is not None}
        wildcards = [
            (r.api_url, r.namespace.lower(), type_pattern(r.repository, r.api_url))
            for r in self.rules
            if r.type is None
        ]
        if wildcards:
            for api_url, full_name in self._repositories():
                for api, namespace, pattern in wildcards:
                    m = pattern.fullmatch(full_name.lower()) if api == api_url else None
                    if m is not None and PROVIDER_TYPE_RE.fullmatch(m["type"]):
                        found.add((namespace, m["type"]))
        found |= set(self._lists)
        return sorted(found)

    def released(self, repository_urls: tuple[str, ...]) -> int:
        """A webhook says a repository's releases changed (a hint): its cached lists are read again
        on the next request. How many providers it serves."""
        named = {host_path(u) for u in repository_urls} - {None}
        served = [key for key in self.known() if host_path(self.source(*key).repository) in named]
        for key in served:
            self._lists.pop(key, None)
        return len(served)

    # ---- releases, verified ----------------------------------------------------------------

    async def listing(self, namespace: str, type_: str) -> Listing:
        """The provider's verified releases (cached for [cache] ttl_seconds; stale on a host failure)."""
        source = self.source(namespace, type_)
        key = (source.namespace.lower(), type_)
        now = self._clock()
        cached = self._lists.get(key)
        if cached is not None and now - cached[0] < self.config.cache.ttl_seconds:
            return cached[1]
        try:
            return await InFlight.wait(self._reading.join(key, lambda: self._read(key, source)))
        except UpstreamUnavailable:
            if cached is not None and now - cached[0] < self.config.cache.ttl_seconds + self.config.cache.stale_seconds:
                return cached[1]
            raise

    async def listings(self, keys: list[tuple[str, str]]) -> list[Listing | GitregError]:
        """Each provider's listing, or why there is none, read at once (the first view of an org's
        providers reads all their release lists)."""

        async def one(namespace: str, type_: str) -> Listing | GitregError:
            try:
                return await self.listing(namespace, type_)
            except GitregError as e:
                return e

        return list(await asyncio.gather(*(one(*key) for key in keys)))

    async def _read(self, key: tuple[str, str], source: Source) -> Listing:
        client = self._client(source)
        try:
            releases = await client.releases(source.full_name)
        except ForgeNotFound:
            raise ModuleNotFound(
                f"provider {source.namespace}/{source.type}: no repository {source.full_name}"
            ) from None
        except ForgeError as e:
            raise UpstreamUnavailable(f"provider {source.namespace}/{source.type}: {e.message}") from None
        found = await asyncio.gather(*(self._verify(client, source, r) for r in releases))
        served = sorted(
            (v for v in found if isinstance(v, ProviderVersion)),
            key=lambda v: semver.Version.parse(v.version),
            reverse=True,
        )
        listing = Listing(tuple(served), tuple(v for v in found if isinstance(v, Refusal)))
        self._lists[key] = (self._clock(), listing)
        return listing

    async def _verify(self, client: ForgeClient, source: Source, release: Release) -> ProviderVersion | Refusal | None:
        found = candidate(source.type, release)
        if not isinstance(found, Candidate):
            return found
        key = (source.rule.keys, source.full_name, release.tag, tuple(release.assets))
        known = self._verified.get(key)
        if known is not None:
            return known
        async with self._verify_slots:
            try:
                verdict = await self._check(client, source, found)
            except ForgeError as e:  # not remembered: the next read tries again
                return Refusal(release.tag, f"cannot read its files: {e.message}")
        if len(self._verified) >= MAX_REMEMBERED:
            self._verified.pop(next(iter(self._verified)))
        self._verified[key] = verdict
        if isinstance(verdict, Refusal):
            log.warning("provider %s/%s %s not served: %s", source.namespace, source.type, release.tag, verdict.reason)
        return verdict

    async def _check(self, client: ForgeClient, source: Source, c: Candidate) -> ProviderVersion | Refusal:
        headers = client.asset_headers()
        keyring = self._keyrings.get(source.rule.keys)
        if keyring is None:
            reason = self._unreadable.get(source.rule.keys, "not loaded")
            return Refusal(c.tag, f"the keys file {source.rule.keys} cannot be used: {reason}")
        sums = await read_asset(client, c.sums, headers, MAX_SUMS_BYTES)
        signature = await read_asset(client, c.signature, headers, MAX_SIGNATURE_BYTES)
        signer = await keyring.verify(sums, signature)
        if isinstance(signer, str):
            return Refusal(c.tag, signer)
        listed = checksums(sums)
        if listed is None:
            return Refusal(c.tag, f"{c.sums.name} is not a checksums file (`<sha256>  <name>` lines)")
        found = packages(c, listed)
        if isinstance(found, Refusal):
            return found
        manifest = None
        if c.manifest is not None:
            manifest = await read_asset(client, c.manifest, headers, MAX_MANIFEST_BYTES)
            if listed.get(c.manifest.name) not in (None, hashlib.sha256(manifest).hexdigest()):
                return Refusal(c.tag, f"{c.manifest.name} does not match SHA256SUMS")
        speaks = protocols(manifest)
        if isinstance(speaks, str):
            return Refusal(c.tag, speaks)
        return ProviderVersion(
            version=c.version,
            tag=c.tag,
            prerelease=c.prerelease,
            protocols=speaks,
            packages=found,
            sums_name=c.sums.name,
            sums=sums,
            signature=signature,
            key_id=signer.key_id,
        )

    async def version(self, namespace: str, type_: str, version: str) -> ProviderVersion:
        """One served version; VersionNotFound when the provider has none by that name."""
        found = (await self.listing(namespace, type_)).find(version)
        if found is None:
            raise VersionNotFound(f"provider {namespace}/{type_} has no served version {version[:64]!r}")
        return found

    def signer(self, namespace: str, type_: str, version: ProviderVersion) -> PublicKey:
        """The key that signed `version`'s SHA256SUMS."""
        keys = self.keys(self.source(namespace, type_))
        return next((k for k in keys if k.key_id == version.key_id), keys[0])

    async def hashes_of(self, namespace: str, type_: str, version: ProviderVersion) -> dict[Package, list[str]]:
        """Each package's hashes for a mirror: `h1:` (computed once per zip, within H1_WAIT seconds) and `zh:`."""

        async def one(package: Package) -> list[str]:
            found = await self.hashes.h1(package.shasum, lambda: self.kept(namespace, type_, package), H1_WAIT)
            return [found, f"zh:{package.shasum}"] if found else [f"zh:{package.shasum}"]

        listed = await asyncio.gather(*(one(p) for p in version.packages))
        return dict(zip(version.packages, listed, strict=True))

    async def readme(self, namespace: str, type_: str, version: ProviderVersion) -> Readme | None:
        """The README at `version`'s tag (readme.py), with where its relative links point; None when none."""
        if self.readmes is None:
            return None
        source = self.source(namespace, type_)
        clone_url, web_url = await self._urls(source)
        found = await self.readmes.at_tag(clone_url, version.tag)
        if found is None or not found[0]:
            return None
        return Readme(found[0], found[1], web_url)

    async def _urls(self, source: Source) -> tuple[str, str]:
        """The repository's clone and web URLs as its host's API names them (else the configured URL)."""
        known = self._repository_urls.get(source.full_name)
        if known is None:
            try:
                record = await self._client(source).repository(source.full_name)
            except ForgeError:
                return source.repository, source.repository  # not remembered: the next page asks again
            known = (source.repository, source.repository)
            if record is not None and self._on_git_host(source, record.https_url):
                known = (
                    record.https_url,
                    record.web_url if record.web_url.startswith("https://") else source.repository,
                )
            self._repository_urls[source.full_name] = known
        return known

    def _on_git_host(self, source: Source, url: str) -> bool:
        """True when a clone URL the API names is on the repository's host, the API's Git host or an
        `[[orgs]]` entry's `clone_hosts` for that API (URLs from an API stay on that API's host)."""
        found = parse(url)
        api = (urlsplit(source.rule.api_url).hostname or "").lower()
        configured = parse(source.repository)
        hosts = {api, api.removeprefix("api."), configured.host if configured is not None else ""}
        hosts.update(h for o in self.config.orgs if o.api_url == source.rule.api_url for h in o.clone_hosts)
        return found is not None and not found.is_scp and found.user is None and found.host in hosts - {""}

    # ---- a package's bytes -----------------------------------------------------------------

    def prefetch(self, namespace: str, type_: str, package: Package) -> None:
        """Start fetching the package into the kept store (a download answer was just given: its zip
        is asked for next), unless it is kept, on its way, or too many are (fetches.py), or its
        rule sends clients to the host's storage (`download = "redirect"`)."""
        if self.source(namespace, type_).rule.download == "proxy" and not self.packages.known(package.shasum):
            self._fetch(namespace, type_, package, speculative=True)

    async def location(self, namespace: str, type_: str, package: Package) -> str | None:
        """Where the client fetches the package itself (`download = "redirect"`): the host's short-lived
        storage URL for it, asked for now (it expires within minutes); None when its rule proxies, or
        when the host has no credential-free URL for it (the bytes pass through gitreg then)."""
        source = self.source(namespace, type_)
        if source.rule.download != "redirect":
            return None
        client = self._client(source)
        try:
            return await storage_location(client, package.asset, client.asset_headers())
        except ForgeError as e:
            raise UpstreamUnavailable(f"provider {namespace}/{type_}: {e.message}") from None

    def follow(self, namespace: str, type_: str, package: Package) -> Follower:
        """Follow the package's fetch (the one under way, else a new one): use it in a `with`."""
        fetch = self._fetch(namespace, type_, package)
        assert fetch is not None  # a fetch that is not speculative always starts
        return fetch.follow()

    def _fetch(self, namespace: str, type_: str, package: Package, speculative: bool = False) -> PackageFetch | None:
        return self.fetches.join(
            package.shasum,
            f"{namespace}/{type_} {package.filename}",
            package.asset.size,
            lambda: self._chunks(namespace, type_, package),
            speculative,
        )

    @contextlib.asynccontextmanager
    async def kept(self, namespace: str, type_: str, package: Package) -> AsyncIterator[Path]:
        """The package's verified zip on disk (fetched from the Git host first when not kept), held
        while in the `async with`; GitregError when it cannot be fetched or kept."""
        path = self.packages.open(package.shasum)
        if path is None:
            fetch = self._fetch(namespace, type_, package)
            assert fetch is not None
            try:
                await fetch.finished()
            except NotKept as e:
                raise UpstreamUnavailable(f"provider {namespace}/{type_}: {e.message}") from None
            path = self.packages.open(package.shasum)
            if path is None:
                raise UpstreamUnavailable(f"provider {namespace}/{type_}: {package.filename} could not be kept on disk")
        try:
            yield path
        finally:
            self.packages.release(path)

    async def _chunks(self, namespace: str, type_: str, package: Package) -> AsyncGenerator[bytes, None]:
        """The package's bytes from the Git host as they come (never more than the size it announced)."""
        source = self.source(namespace, type_)
        client = self._client(source)
        size, limit = 0, package.asset.size
        try:
            async with open_asset(client, package.asset, client.asset_headers()) as resp:
                # The pieces as they came off the socket (no copy to make chunks of one size).
                async for chunk, _ in resp.content.iter_chunks():
                    if not chunk:
                        continue
                    size += len(chunk)
                    if limit is not None and size > limit:
                        raise PackageMismatch(f"{package.filename} is larger than the Git host says; refused")
                    yield chunk
        except ForgeError as e:
            raise UpstreamUnavailable(f"provider {namespace}/{type_}: {e.message}") from None
        except (aiohttp.ClientError, TimeoutError) as e:  # the body stopped half-way
            raise UpstreamUnavailable(
                f"provider {namespace}/{type_}: {package.filename} was cut short ({type(e).__name__})"
            ) from None

    async def stream(self, namespace: str, type_: str, package: Package) -> AsyncGenerator[bytes, None]:
        """The package's bytes from the Git host, its SHA-256 checked as they pass, nothing kept (the disk
        has no room for it: fetches.py keeps it otherwise).

        The last chunk is held back until the whole zip hashed right: on a mismatch PackageMismatch
        is raised instead, so a client never receives a complete package that is not the signed one.
        """
        digest = hashlib.sha256()
        held = b""
        # The hash runs on a worker thread (hashlib lets go of the GIL), one chunk behind the bytes passed on.
        hashing: asyncio.Future[None] | None = None
        try:
            async with contextlib.aclosing(self._chunks(namespace, type_, package)) as chunks:
                async for chunk in chunks:
                    if hashing is not None:
                        await hashing
                    hashing = asyncio.ensure_future(asyncio.to_thread(digest.update, chunk))
                    if held:
                        yield held
                    held = chunk
            if hashing is not None:
                await hashing
                hashing = None
            if digest.hexdigest() != package.shasum:
                log.error(
                    "provider %s/%s: %s does not match its signed SHA-256; refused", namespace, type_, package.filename
                )
                raise PackageMismatch(f"{package.filename} does not match SHA256SUMS; refused")
            if held:
                yield held
        finally:
            if hashing is not None:  # (on a failure above it just finishes, unread)
                await asyncio.wait([hashing])
