"""Which modules the listing API shows, and how often each was downloaded.

Listed: every fully specified `[[modules]]` rule, plus every module a wildcard rule has
resolved successfully (a versions, details or download request found tags in its
repository). Wildcard rules cannot be enumerated (`acme/*` may mean any repository on the
host), so gitreg lists what it has actually served. Both that set and the download counts
live in `<[storage] path>/catalog.json`, kept across restarts. Writes are batched: a
request only changes memory, and a background task writes the file (a `StateFile`:
atomically, off the event loop) at most every FLUSH_SECONDS and once more at shutdown, so a
crash loses at most a few seconds of counts.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from gitreg.config.model import Config
from gitreg.config.rules import ResolvedModule
from gitreg.core.errors import GitregError
from gitreg.core.events import Signal
from gitreg.core.names import ModuleAddress, address_from_text
from gitreg.registry.resolve import Resolver
from gitreg.replicas.base import SharedState
from gitreg.storage.state import StateFile

log = logging.getLogger(__name__)

FILE_NAME = "catalog.json"
FORMAT = 1
FLUSH_SECONDS = 5.0
# A wildcard rule could in principle resolve unboundedly many names; beyond this many
# remembered modules new ones are served but not listed (and a warning is logged once).
MAX_REMEMBERED = 50_000
# The temp file a write goes to before `os.replace`; one left by a crash is deleted at start.
_TMP_PREFIX = ".catalog-"  # temp files of write_atomically (`.catalog-*.tmp`)


class Catalog:
    """The listable modules and the download counts; touched from the event loop only."""

    def __init__(self, config: Config, path: Path, resolver: Resolver, shared: SharedState) -> None:
        self.config = config
        self.path = path
        self._resolver = resolver
        self._remembered: set[ModuleAddress] = set()
        self._downloads: dict[ModuleAddress, int] = {}
        self._warned_full = False
        self.state = StateFile(path, FORMAT, _TMP_PREFIX, self._snapshot, unreadable="starting with an empty catalog")
        # Told of each module a wildcard rule serves for the first time (the index lists it).
        self.on_new: Signal[[ModuleAddress]] = Signal()
        # Advances with every counted download: search results (ties by downloads) depend on it.
        self.downloads_version = 0
        # With Redis: counts of every replica, read in the background.
        self.shared = shared

    def _take(self, data: dict[str, Any] | None) -> None:
        """Take what catalog.json holds (None: nothing); the file may be edited by hand."""
        if data is None:
            return
        for key in data.get("modules", []) if isinstance(data.get("modules"), list) else []:
            address = address_from_text(key)
            if address is not None:
                self._remembered.add(address)
        downloads = data.get("downloads")
        if isinstance(downloads, dict):
            for key, count in downloads.items():
                address = address_from_text(key)
                if address is not None and isinstance(count, int) and not isinstance(count, bool) and count > 0:
                    self._downloads[address] = count

    @property
    def writes(self) -> int:
        """How many times catalog.json was written (batched: not once per request)."""
        return self.state.writes

    def listable(self, address: ModuleAddress) -> ResolvedModule | None:
        """What serves `address` when it is listed: a rule naming it, an org's module, or a module
        a wildcard rule has served; resolved as a request would be (explicit, org, wildcard)."""
        try:
            resolved = self._resolver.resolve(address)
        except GitregError:
            return None
        return resolved if resolved.rule.explicit or address in self._remembered else None

    def sources(self) -> dict[ModuleAddress, ResolvedModule]:
        """Every listable module, bound to what serves it now (rules and orgs may have changed since)."""
        found: dict[ModuleAddress, ResolvedModule] = {}
        for address in (*self._resolver.explicit(), *self._remembered, *self._resolver.org_modules()):
            if address not in found:
                resolved = self.listable(address)
                if resolved is not None:
                    found[address] = resolved
        return found

    def remembered(self) -> list[ModuleAddress]:
        """Every module a wildcard rule has served (the index process is given them at its start)."""
        return sorted(self._remembered)

    def remembers(self, address: ModuleAddress) -> bool:
        """True when a wildcard rule has served `address` (so it is listed)."""
        return address in self._remembered

    def remember(self, resolved: ResolvedModule) -> None:
        """Record that a wildcard rule served this module (explicit rules are listed anyway)."""
        address = resolved.address
        if resolved.rule.explicit or address in self._remembered:
            return
        if len(self._remembered) >= MAX_REMEMBERED:
            if not self._warned_full:
                log.warning("more than %d modules served by wildcard rules; new ones are not listed", MAX_REMEMBERED)
                self._warned_full = True
            return
        self._remembered.add(address)
        self.state.mark_dirty()
        self.on_new.emit(address)

    def forget(self, address: ModuleAddress) -> None:
        """Drop a remembered module whose repository no longer exists."""
        if address in self._remembered:
            self._remembered.discard(address)
            self.state.mark_dirty()

    def count_download(self, address: ModuleAddress) -> None:
        """One more download request answered for `address`."""
        self._downloads[address] = self._downloads.get(address, 0) + 1
        self.state.mark_dirty()
        self.downloads_version += 1
        self.shared.count_download(str(address))

    def downloads_changed(self) -> None:
        """Other replicas' counts arrived: search ranks ties by downloads, so remembered answers are void."""
        self.downloads_version += 1

    def downloads(self, address: ModuleAddress) -> int:
        """Download requests answered for `address`, across restarts (and replicas, with Redis up)."""
        shared = self.shared.downloads(str(address))
        return self._downloads.get(address, 0) if shared is None else shared

    def _snapshot(self) -> Callable[[], str]:
        """What catalog.json is to hold now (copied on the event loop); its encoder (run off it)."""
        data = {
            "format": FORMAT,
            "modules": sorted(str(a) for a in self._remembered),
            "downloads": {str(a): n for a, n in sorted(self._downloads.items())},
        }
        return functools.partial(json.dumps, data, indent=1, sort_keys=True)

    async def lifetime(self) -> AsyncIterator[None]:
        """Load, flush in the background while the app runs, flush once more at shutdown."""
        self._take(await self.state.load())
        async with self.state.flushing(FLUSH_SECONDS):
            yield
