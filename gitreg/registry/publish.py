"""Repositories changed: the one path from "these repositories have new tags" to fresh answers.

A webhook delivery says so on this replica; with Redis, another replica's delivery arrives as
an invalidation. Either way the cached tag lists go and are fetched again in the background,
which reaches the catalog and the index through the tag cache's observers (on_fetched).
"""

from __future__ import annotations

from collections.abc import Iterable

from gitreg.orgs.catalog import OrgCatalog
from gitreg.registry.tags import TagCache
from gitreg.replicas.base import SharedState


class Publisher:
    """Invalidates and refreshes cached tag lists, here and on every other replica."""

    def __init__(self, cache: TagCache, shared: SharedState, orgs: OrgCatalog) -> None:
        self.cache = cache
        self.shared = shared
        self.orgs = orgs

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
