"""Signed releases: which versions a trusted key signed, and which are served where signatures are required.

A version is "signed by <principal>" when git verifies its annotated tag, or else its tagged
commit, against `[signing]`'s keys (git/verify.py: gitreg writes no crypto). Each verdict is
made once per tag object (a lightweight tag: per commit) and remembered in memory, on disk
(storage/verdicts.py) and, with Redis and `[auth] signing_key`, for the other replicas
(replicas/verdicts.py, each value authenticated by an HMAC of ours). Every verdict is keyed also
by a digest of the key files: a changed key file verifies again.

The warm path asks memory only (`known`). A tag never verified is verified once, in a batch per
repository (one fetch of the tag objects and commits, no trees, then one `git verify-*` each);
a versions request waits for it at most VERIFY_WAIT seconds, well under Terraform's 10 s, and
a version still unverified then is left out of that answer only, never remembered as unsigned.
A failure to fetch or verify (a host down, a timeout) is never a verdict either.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import NamedTuple, Protocol, TypeVar

from gitreg.config.model import Config, ModuleRule
from gitreg.config.rules import ResolvedModule
from gitreg.core.errors import GitregError, NotSigned, UpstreamUnavailable
from gitreg.core.flight import Remembered
from gitreg.core.urls import mask, origin_label
from gitreg.core.versions import ModuleVersions, TaggedVersion
from gitreg.git.pool import GitPool
from gitreg.git.remote import TagObjects
from gitreg.git.verify import Keys, SignatureGit, Verdict, build_keyring
from gitreg.replicas.base import SharedState
from gitreg.replicas.connection import RedisDown
from gitreg.storage.files import run_file_work
from gitreg.storage.verdicts import VerdictStore, verdict_from_json, verdict_to_json

log = logging.getLogger(__name__)
T = TypeVar("T")

# How long a versions request waits for verdicts not known yet (Terraform gives it 10 s).
VERIFY_WAIT = 4.0
# How long a download waits for its version's verdict before answering 502 (try again).
DOWNLOAD_WAIT = 6.0
# How often the key files are looked at again (a changed one: new keyring, verdicts made again).
KEYS_RECHECK_SECONDS = 5.0


def keys_digest(config: Config) -> str:
    """A digest of the key files' contents (which keys decide every verdict). Blocking."""
    digest = hashlib.sha256(b"gitreg-signing-keys\0")
    for path in (config.signing.allowed_signers, config.signing.openpgp_keys):
        if path:
            with open(path, "rb") as f:
                digest.update(hashlib.sha256(f.read()).digest())
        else:
            digest.update(b"\0" * 32)
    return digest.hexdigest()


def signature_required(config: Config, require_signed: bool | None) -> bool:
    """Whether only signed versions are served where a rule or org says `require_signed` (None: [signing] require)."""
    return require_signed if require_signed is not None else config.signing.require


def refusal(verdict: Verdict | None, version: str) -> str:
    """Why a version is not served where signatures are required."""
    if verdict is None:
        return f"version {version} has not been verified yet; try again in a few seconds"
    why = {
        "unsigned": "neither its tag nor its commit is signed",
        "unknown_key": verdict.reason or "it is signed by a key that is not trusted",
        "bad": verdict.reason or "its signature does not match: the tag or commit was altered",
    }.get(verdict.status, verdict.reason)
    policy = "this registry serves only versions signed by a trusted key ([signing])"
    return f"version {version} is not served: {policy}, and {why}"


class _Version(Protocol):
    """What `verdicts` reads of a version: its tag and commit (a TaggedVersion, an IndexedVersion)."""

    @property
    def tag(self) -> str: ...

    @property
    def sha(self) -> str: ...


class Signatures:
    """The verdicts on module versions, and the versions served where signatures are required."""

    def __init__(
        self,
        config: Config,
        root: Path,
        git: SignatureGit,
        pool: GitPool,
        tag_objects: TagObjects,
        shared: SharedState,
        files: Executor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.root = root  # [storage] path/signatures: the GNUPGHOMEs and scratch fetches
        self.git = git
        self.pool = pool
        self.tag_objects = tag_objects
        self.shared = shared
        self.files = files
        self.clock = clock
        self.store = VerdictStore(root, files)
        self.enabled = bool(config.signing.keys)
        self.keys = ""  # the digest of the key files the verdicts in memory were made with
        self._keyring = Keys(os.devnull, str(root / "gnupg-none"))
        self._known: dict[tuple[str, str, str], Verdict] = {}  # (repository, tag, commit)
        self._futures: dict[tuple[str, str, str], asyncio.Future[Verdict | None]] = {}
        self._queued: dict[str, dict[str, str]] = {}  # repository -> tag -> commit, to verify
        self._runners: dict[str, asyncio.Task[None]] = {}
        # A failed fetch or verification, per repository: not asked again for [cache] error_retry_seconds.
        self._failures: Remembered[str, GitregError] = Remembered(config.cache.error_retry_seconds, 10_000, clock)
        self._checked_keys = 0.0
        self._rechecking: asyncio.Task[None] | None = None
        self.generation = 0  # bumped whenever a verdict is learned or forgotten (answer memos)
        self.verified = 0  # versions git verified in this process (what a restart or a replica saves)
        secret = config.auth.signing_key
        self._mac_key = hashlib.sha256(b"gitreg-signature-verdicts\0" + secret.encode()).digest() if secret else None

    # --- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Build the keyring, load the verdicts kept for these keys."""
        if not self.enabled:
            return
        await run_file_work(self.files, _remove_leftovers, str(self.root))  # scratch fetches a crash cut short
        await self._load_keys(await run_file_work(self.files, keys_digest, self.config))

    async def close(self) -> None:
        """Stop verifying, write what was learned."""
        for task in [*self._runners.values(), *([self._rechecking] if self._rechecking else [])]:
            task.cancel()
        await asyncio.gather(*self._runners.values(), return_exceptions=True)
        if self.enabled:
            await self.store.flush()

    async def _load_keys(self, digest: str) -> None:
        home = str(self.root / f"gnupg-{digest[:16]}")
        await run_file_work(self.files, build_keyring, home, self.config.signing.openpgp_keys)
        self._keyring = Keys(self.config.signing.allowed_signers or os.devnull, home)
        loaded = await self.store.load(digest)
        if self.keys and digest != self.keys:
            log.info("[signing] keys changed: every version's signature is verified again")
            self.store.forget_other_keys(digest)
        self.keys = digest
        self._known = {(r, t, c): v for (_, r, t, c), v in loaded.items()}
        self.generation += 1
        self._checked_keys = self.clock()

    def _recheck_keys(self) -> None:
        """At most every KEYS_RECHECK_SECONDS, in the background: a changed key file is taken up."""
        if self.clock() - self._checked_keys < KEYS_RECHECK_SECONDS or self._rechecking is not None:
            return
        self._checked_keys = self.clock()

        async def recheck() -> None:
            try:
                digest = await run_file_work(self.files, keys_digest, self.config)
                if digest != self.keys:
                    await self._load_keys(digest)
            except (OSError, GitregError) as e:
                log.warning("[signing] keys could not be read again (%s); the earlier keys stay in use", e)
            finally:
                self._rechecking = None

        self._rechecking = asyncio.ensure_future(recheck())

    # --- what the registry asks --------------------------------------------------------------------

    def required(self, rule: ModuleRule) -> bool:
        """Whether only signed versions of `rule`'s modules are served."""
        return signature_required(self.config, rule.require_signed)

    def stamp(self, rule: ModuleRule) -> int:
        """What an answer memo of `rule`'s modules is valid for: the verdicts' generation (0: not required)."""
        if not self.required(rule):
            return 0
        self._recheck_keys()
        return self.generation

    def known(self, repository: str, tag: str, commit: str) -> Verdict | None:
        """The verdict remembered for tag `tag` at `commit` (memory only), or None."""
        found = self._known.get((repository, tag, commit))
        if found is not None:
            # A tag object the latest ls-remote named, other than the one verified: re-created, verify again.
            want = self.tag_objects.want(repository, tag, commit)
            if want != commit and want != found.object:
                return None
        return found

    async def verdicts(self, repository: str, versions: Sequence[_Version], wait: float) -> dict[str, Verdict | None]:
        """tag -> verdict for `versions`, waiting up to `wait` seconds for those not known yet (None: not yet)."""
        self._recheck_keys()
        found: dict[str, Verdict | None] = {tv.tag: self.known(repository, tv.tag, tv.sha) for tv in versions}
        missing = {tv.tag: self._want(repository, tv.tag, tv.sha) for tv in versions if found[tv.tag] is None}
        if missing:
            await asyncio.wait(list(missing.values()), timeout=wait)
            for tag, future in missing.items():
                if future.done() and not future.cancelled():
                    found[tag] = future.result()
        return found

    async def served(self, resolved: ResolvedModule, found: ModuleVersions) -> tuple[ModuleVersions, bool]:
        """The versions served of `found` (signed ones only where required); and whether every verdict was known."""
        if not self.required(resolved.rule):
            return found, True
        verdicts = await self.verdicts(resolved.repository, found.versions, VERIFY_WAIT)
        kept = tuple(tv for tv in found.versions if (v := verdicts.get(tv.tag)) is not None and v.ok)
        return ModuleVersions(kept, found.skipped), all(v is not None for v in verdicts.values())

    async def check(self, resolved: ResolvedModule, found: TaggedVersion) -> None:
        """NotSigned (403) when `found` must be signed and is not; 502 when it could not be verified now."""
        if not self.required(resolved.rule):
            return
        verdict = (await self.verdicts(resolved.repository, [found], DOWNLOAD_WAIT))[found.tag]
        if verdict is None:
            raise UpstreamUnavailable(refusal(None, found.canonical))
        if not verdict.ok:
            raise NotSigned(refusal(verdict, found.canonical))

    async def describe(
        self, resolved: ResolvedModule, tag: str, commit: str, version: str, wait: float
    ) -> tuple[dict[str, str] | None, str | None]:
        """For a version's page and details: (its signature, or None; why it is not served, or None)."""
        verdict = (await self.verdicts(resolved.repository, [_Tagged(tag, commit)], wait))[tag]
        signature = None
        if verdict is not None and verdict.ok:
            signature = {
                "signer": verdict.signer,
                "fingerprint": verdict.fingerprint,
                "format": verdict.format,
                "signed": verdict.signed,
            }
        refused = None if signature is not None or not self.required(resolved.rule) else refusal(verdict, version)
        return signature, refused

    def refused(self, resolved: ResolvedModule, versions: Sequence[tuple[str, str, str]]) -> set[str]:
        """Of `versions` ((version, tag, commit)), those known not to be served (memory only: pages' version lists)."""
        if not self.required(resolved.rule):
            return set()
        return {
            version
            for version, tag, commit in versions
            if (verdict := self.known(resolved.repository, tag, commit)) is not None and not verdict.ok
        }

    # --- verifying ---------------------------------------------------------------------------------

    def _want(self, repository: str, tag: str, commit: str) -> asyncio.Future[Verdict | None]:
        key = (repository, tag, commit)
        future = self._futures.get(key)
        if future is None and self._failures.recall(repository) is not None:
            future = asyncio.get_running_loop().create_future()
            future.set_result(None)  # failed moments ago: not a verdict, and not asked again yet
            return future
        if future is None:
            future = self._futures[key] = asyncio.get_running_loop().create_future()
            self._queued.setdefault(repository, {})[tag] = commit
            if repository not in self._runners:
                self._runners[repository] = asyncio.ensure_future(self._run(repository))
        return future

    async def _run(self, repository: str) -> None:
        """Verify what is queued for `repository`, batch after batch, until nothing is."""
        try:
            while batch := self._queued.pop(repository, None):
                results: dict[str, Verdict] = {}
                try:
                    results = await self._verify(repository, batch)
                except (GitregError, OSError) as e:
                    log.warning("signatures of %s could not be verified now: %s", mask(repository), e)
                    failed = e if isinstance(e, GitregError) else UpstreamUnavailable(str(e))
                    self._failures.remember(repository, failed)
                for tag, commit in batch.items():
                    future = self._futures.pop((repository, tag, commit), None)
                    if future is not None and not future.done():
                        future.set_result(results.get(tag))
        finally:
            self._runners.pop(repository, None)
            for key in [k for k in self._futures if k[0] == repository and repository not in self._queued]:
                future = self._futures.pop(key)
                if not future.done():
                    future.set_result(None)

    async def _verify(self, repository: str, batch: dict[str, str]) -> dict[str, Verdict]:
        """Verdicts for `batch` (tag -> commit): another replica's (authenticated), else git's."""
        keys = self.keys
        results: dict[str, Verdict] = {}
        for tag, commit in batch.items():
            shared = await self._shared_verdict(keys, repository, tag, commit)
            if shared is not None:
                results[tag] = shared
        rest = {tag: commit for tag, commit in batch.items() if tag not in results}
        if rest:
            made = await self._verify_with_git(repository, rest)
            for tag, verdict in made.items():
                await self._share(keys, repository, tag, rest[tag], verdict)
            results.update(made)
        if keys == self.keys:  # the keys did not change meanwhile
            for tag, verdict in results.items():
                self._known[(repository, tag, batch[tag])] = verdict
                self.store.put((keys, repository, tag, batch[tag]), verdict)
            self.generation += 1
            await self.store.flush()
        return results

    async def _verify_with_git(self, repository: str, batch: dict[str, str]) -> dict[str, Verdict]:
        """One fetch of the tags' objects into a scratch repository of ours, then git verifies each."""
        tmp = self.root / f"tmp-{uuid.uuid4().hex}"
        keyring = self._keyring
        try:
            await run_file_work(self.files, os.makedirs, str(self.root), 0o700, True)
            await self._git(repository, self.git.mirror.init, str(tmp))
            await self._git(repository, self.git.fetch_tags, str(tmp), repository, sorted(batch))
            results = {}
            for tag, commit in batch.items():
                try:
                    results[tag] = await self._git(repository, self.git.verify, str(tmp), tag, commit, keyring)
                except GitregError as e:  # this tag only (moved meanwhile, a timeout): verified next time
                    log.warning("signature of %s tag %s not verified now: %s", mask(repository), tag, e)
                    continue
                self.verified += 1
                log.debug("signature of %s tag %s: %s", mask(repository), tag, results[tag].status)
            return results
        finally:
            await run_file_work(self.files, _remove_tree, str(tmp))

    async def _git(self, repository: str, fn: Callable[..., T], *args: object) -> T:
        return await self.pool.run(fn, *args, host=origin_label(repository))

    # --- shared through Redis ----------------------------------------------------------------------

    def _field(self, keys: str, repository: str, tag: str, commit: str) -> str:
        return hashlib.sha256(f"{keys}\0{repository}\0{tag}\0{commit}".encode()).hexdigest()

    def _mac(self, field: str, text: str) -> str:
        assert self._mac_key is not None
        return hmac.new(self._mac_key, f"{field}\0{text}".encode(), hashlib.sha256).hexdigest()

    async def _shared_verdict(self, keys: str, repository: str, tag: str, commit: str) -> Verdict | None:
        """Another replica's verdict, if Redis holds one with a valid HMAC of ours (else None: verify)."""
        store = self.shared.verdicts
        if store is None or self._mac_key is None:
            return None
        field = self._field(keys, repository, tag, commit)
        try:
            value = await store.get(field)
        except RedisDown:
            return None
        mac, _, text = (value or "").partition(".")
        if not text or not hmac.compare_digest(mac, self._mac(field, text)):
            if value is not None:
                log.warning(
                    "signature verdict in redis for %s %s: not signed by this registry; verified again",
                    mask(repository),
                    tag,
                )
            return None
        with contextlib.suppress(ValueError, RecursionError):
            return verdict_from_json(json.loads(text))
        return None

    async def _share(self, keys: str, repository: str, tag: str, commit: str, verdict: Verdict) -> None:
        store = self.shared.verdicts
        if store is None or self._mac_key is None:
            return
        field = self._field(keys, repository, tag, commit)
        text = json.dumps(verdict_to_json(verdict))
        with contextlib.suppress(RedisDown):
            await store.put(field, f"{self._mac(field, text)}.{text}")


class _Tagged(NamedTuple):
    """A tag and its commit, as `verdicts` reads a TaggedVersion."""

    tag: str
    sha: str


def _remove_leftovers(root: str) -> None:
    if os.path.isdir(root):
        for name in os.listdir(root):
            if name.startswith("tmp-"):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
