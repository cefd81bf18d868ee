"""Repositories changed: the one path from "these repositories have new tags" to fresh answers.

A webhook delivery says so on this replica; with Redis, another replica's delivery arrives as
an invalidation. Either way the cached tag lists go and are fetched again in the background,
which reaches the catalog and the index through the tag cache's observers (on_fetched).
Here too: which configured repositories a delivery's URLs name, a repository event handed to
the org listings (which ask the API), and the deliveries received lately (a replay does nothing).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from gitreg.config.model import Config
from gitreg.config.rules import is_template
from gitreg.core import urls
from gitreg.forges.payloads import RepositoryEvent
from gitreg.orgs.service import OrgCatalog
from gitreg.registry.tags import TagCache
from gitreg.replicas.base import SharedState

# A delivery already received within this long is a replay: answered, and nothing is done.
DELIVERY_MEMORY_SECONDS = 2 * 3600.0
# At most this many deliveries are remembered (about 150 bytes each): the oldest go first.
MAX_DELIVERIES = 100_000
# What names a delivery: GitHub's GUID (the same on a redelivery), GitLab's idempotency key (the
# same on its retries), else its event UUID; without one, a digest of the body.
DELIVERY_HEADERS = {
    "github": ("X-GitHub-Delivery",),
    "gitlab": ("Idempotency-Key", "X-Gitlab-Event-UUID"),
}


class Deliveries:
    """The deliveries received lately (bounded, event loop only), so that a replay does nothing.

    Only authenticated deliveries are remembered: a caller without the secret cannot fill it.
    """

    def __init__(self, seconds: float = DELIVERY_MEMORY_SECONDS, limit: int = MAX_DELIVERIES) -> None:
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._seconds = seconds
        self._limit = limit

    @staticmethod
    def key(provider: str, headers: Mapping[str, str], body: bytes) -> str:
        """What names the delivery: the host's delivery header, else a digest of the body."""
        for name in DELIVERY_HEADERS[provider]:
            value = headers.get(name, "").strip()
            if value:
                return f"{provider}:{name.lower()}:{value[:200]}"
        return f"{provider}:sha256:{hashlib.sha256(body).hexdigest()}"

    def first(self, key: str) -> bool:
        """True (and remembered) when `key` was not received within the memory; False for a replay."""
        now = time.monotonic()
        while self._seen and (len(self._seen) >= self._limit or next(iter(self._seen.values())) < now - self._seconds):
            self._seen.popitem(last=False)
        if key in self._seen:
            return False
        self._seen[key] = now
        return True

    def forget(self, key: str) -> None:
        """The delivery failed on our side: a redelivery of it is tried again."""
        self._seen.pop(key, None)


def configured_repositories(config: Config, cached: Iterable[str]) -> dict[str, set[str]]:
    """host/path (urls.host_path) -> the repository URLs (cache keys) it stands for.

    From explicit rules (their `repository`, and their `clone_url`, which names the same
    repository for clients) and from every repository a wildcard rule has resolved: those
    are the cache's keys.
    """
    index: dict[str, set[str]] = {}

    def add(url: str | None, key: str) -> None:
        if url is None or is_template(url):
            return
        host_path = urls.host_path(url)
        if host_path is not None:
            index.setdefault(host_path, set()).add(key)

    for rule in config.modules:
        if not is_template(rule.repository):
            add(rule.repository, rule.repository)
            add(rule.clone_url, rule.repository)
    for key in cached:
        add(key, key)
    return index


def matching_repositories(config: Config, cached: Iterable[str], addresses: Iterable[str]) -> list[str]:
    """The configured repositories (cache keys) that any of `addresses` (repository URLs) names."""
    index = configured_repositories(config, cached)
    found: dict[str, None] = {}
    for url in addresses:
        host_path = urls.host_path(url)
        for key in sorted(index.get(host_path, ())) if host_path is not None else ():
            found[key] = None
    return list(found)


class Publisher:
    """Invalidates and refreshes cached tag lists, here and on every other replica."""

    def __init__(self, config: Config, cache: TagCache, shared: SharedState, orgs: OrgCatalog) -> None:
        self.config = config
        self.cache = cache
        self.shared = shared
        self.orgs = orgs
        self.deliveries = Deliveries()

    def repositories_named(self, addresses: Iterable[str]) -> list[str]:
        """The repositories (cache keys) that any of `addresses` (a delivery's URLs) names: configured
        ones, ones a wildcard rule has served, and org repositories by any of their URLs."""
        addresses = list(addresses)
        keys = matching_repositories(self.config, self.cache.keys(), addresses)
        return keys + [key for key in self.orgs.repositories_named(addresses, urls.host_path) if key not in keys]

    async def repository_event(self, event: RepositoryEvent) -> int:
        """A repository event (a hint): the org listings read that repository from the API; how
        many orgs it concerned (0: none lists it)."""
        return await self.orgs.apply(event)

    async def repositories_changed(self, keys: list[str]) -> None:
        """A delivery here named these repositories (cache keys): refresh them on every replica."""
        # First the other replicas (with Redis): the shared lists go, and every replica refreshes.
        await self.shared.invalidate(keys)
        self._refresh(keys, cached_only=False)
        self.orgs.notify_pushed(keys)  # the module index looks at those org modules again

    def changed_elsewhere(self, key: str) -> None:
        """A delivery reached another replica: refreshed through the shared lock, so one git call in all."""
        self._refresh((key,), cached_only=True)

    def reconnected(self) -> None:
        """Invalidations published while Redis was away never arrived: catch up with the shared lists."""
        for key in self.cache.keys():  # noqa: SIM118 - TagCache is not a mapping; keys() is a snapshot
            self.cache.refresh_in_background(key)

    def _refresh(self, keys: Iterable[str], cached_only: bool) -> None:
        """Invalidate each key, then refresh it (only when it was cached or in flight, if `cached_only`)."""
        for key in keys:
            if self.cache.invalidate(key) or not cached_only:
                self.cache.refresh_in_background(key)
