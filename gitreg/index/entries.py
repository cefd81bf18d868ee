"""The index's listing in memory: the listed entries, the modules it looked at and does not list
(untagged, refused), and the lookups kept beside them (by repository, README words, the sorted view).

A plain structure of the event loop (no I/O, no signals): store.ModuleIndex changes it and says
what changed (index.json, the index process's change log).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from gitreg.core.names import ModuleAddress
from gitreg.index.model import IndexEntry, Untagged
from gitreg.index.search import View

# While the indexer is busy, lists may be this much behind it (see Entries.view).
VIEW_STALE_SECONDS = 1.0


class Entries:
    """Listed modules by address, with the untagged and the refused ones, and their lookups."""

    def __init__(self) -> None:
        self._entries: dict[ModuleAddress, IndexEntry] = {}
        self._untagged: dict[ModuleAddress, Untagged] = {}  # served, but no SemVer tag yet
        self._by_repository: dict[str, set[ModuleAddress]] = {}
        self._readme: dict[str, set[ModuleAddress]] = {}  # README word -> modules (search)
        # Modules the index looked at and does not list (no SemVer tag, repository gone...): their
        # pages and API answers are 404s; any other servable module not listed yet is a 503.
        self._refused: dict[ModuleAddress, str] = {}
        self._view: View | None = None
        self._view_stale = False
        self._view_built = 0.0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, address: ModuleAddress) -> IndexEntry | None:
        return self._entries.get(address)

    def listed(self) -> list[IndexEntry]:
        """Every listed entry (unordered; lists and search use the sorted view)."""
        return list(self._entries.values())

    def untagged(self, address: ModuleAddress) -> Untagged | None:
        return self._untagged.get(address)

    def all_untagged(self) -> dict[ModuleAddress, Untagged]:
        return dict(self._untagged)

    def refused(self, address: ModuleAddress) -> str | None:
        """Why the index does not list `address` after looking at it (None: it did not refuse it)."""
        return self._refused.get(address)

    def addresses(self) -> list[ModuleAddress]:
        """Every listed module's address, and every untagged one's."""
        return [*self._entries, *self._untagged]

    def of_repository(self, repository: str) -> list[ModuleAddress]:
        """The listed modules served from `repository`."""
        return list(self._by_repository.get(repository, ()))

    def view(self, busy: bool) -> View:
        """The current generation's sorted entries, rebuilt lazily after a change.

        While the indexer is `busy` (the first pass over a large org changes the index many
        times a second) a view up to VIEW_STALE_SECONDS old is served, so requests do not
        rebuild it after every module; once the indexer is idle, the next request sees all.
        """
        view = self._view
        if view is not None and (
            not self._view_stale or (busy and time.monotonic() - self._view_built < VIEW_STALE_SECONDS)
        ):
            return view
        self._view = view = View(self._entries.values(), self._readme)
        self._view_stale = False
        self._view_built = time.monotonic()
        return view

    # --- changes (store.ModuleIndex says what follows from them) -------------------------------------

    def set(self, entry: IndexEntry) -> None:
        """List `entry` in place of the module's old one (no longer untagged nor refused)."""
        self._untagged.pop(entry.address, None)
        old = self._entries.get(entry.address)
        if old is not None:
            self._unlink(old)
        self._refused.pop(entry.address, None)
        self._entries[entry.address] = entry
        self._link(entry)
        self._view_stale = True

    def unlist(self, address: ModuleAddress, why: str | None) -> tuple[IndexEntry | None, bool]:
        """No longer list `address`, refused for `why`: the entry it had, and whether it is newly refused."""
        old = self._entries.pop(address, None)
        newly_refused = address not in self._refused
        self._refused[address] = why or "the index does not list it"
        if old is not None:
            self._unlink(old)
            self._view_stale = True
        return old, newly_refused

    def set_untagged(self, address: ModuleAddress, found: Untagged) -> bool:
        """Remember `address` untagged; whether that changed what was remembered."""
        if self._untagged.get(address) == found:
            return False
        self._untagged[address] = found
        return True

    def forget_untagged(self, address: ModuleAddress) -> bool:
        """Forget that `address` is untagged; whether it was."""
        return self._untagged.pop(address, None) is not None

    def replace(self, entries: Iterable[IndexEntry], untagged: Mapping[ModuleAddress, Untagged]) -> None:
        """Every entry and untagged module replaced (a loaded or adopted index.json)."""
        for entry in self._entries.values():
            self._unlink(entry)
        self._entries.clear()
        for entry in entries:
            self._entries[entry.address] = entry
            self._link(entry)
        self._untagged = dict(untagged)
        self._view_stale = True

    def _link(self, entry: IndexEntry) -> None:
        self._by_repository.setdefault(entry.repository, set()).add(entry.address)
        for word in entry.words.split():
            self._readme.setdefault(word, set()).add(entry.address)

    def _unlink(self, entry: IndexEntry) -> None:
        self._by_repository.get(entry.repository, set()).discard(entry.address)
        for word in entry.words.split():
            modules = self._readme.get(word)
            if modules is not None:
                modules.discard(entry.address)
                if not modules:
                    del self._readme[word]
