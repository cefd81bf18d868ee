"""What the rest of gitreg asks of the state replicas share: one Protocol, two peer backends.

`memory.MemoryShared` (this process alone) and `redis.RedisShared` (replicas sharing Redis)
both implement it; callers hold a `SharedState` and never ask which backend it is, only what
it answers (`is_shared`, `up`, `leading()`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from gitreg.core.events import Signal
from gitreg.git.remote import TagList
from gitreg.replicas.installs import SharedInstalls
from gitreg.replicas.logins import SharedLogins
from gitreg.replicas.verdicts import SharedVerdicts

Loader = Callable[[str], Awaitable[TagList]]


class SharedState(Protocol):
    """Tag lists, invalidations, moved-tag records, download counts and the index lease."""

    # Made by the backend's constructor; the application connects what a message from another
    # replica does here.
    on_invalidate: Signal[[str]]  # another replica invalidated this repository
    on_reconnect: Signal[[]]  # the store is back: invalidations may have been missed
    on_downloads: Signal[[]]  # the shared download counts changed
    on_index: Signal[[str]]  # another replica published its index.json text (see follow_index)
    on_pin: Signal[[str, str, str, float]]  # (repository, tag, commit, when): an earlier pin than this one's
    on_owner: Signal[[str, str, float]]  # (address, holder, first held): an org module owner another replica recorded
    # The issued login tokens and their one-time codes, shared on this store's connection (None: alone).
    logins: SharedLogins | None
    # Observed CI installs, shared on this store's connection (None: alone).
    installs: SharedInstalls | None
    # Signature verdicts shared on this store's connection (None: alone; see registry.signatures).
    verdicts: SharedVerdicts | None

    @property
    def is_shared(self) -> bool:
        """True when other replicas may share this state: a lease to watch, an index to offer, a store to report."""
        ...

    @property
    def up(self) -> bool:
        """True while the shared store answers (never, alone)."""
        ...

    @property
    def errors(self) -> int:
        """Commands or connections to the shared store that failed (for /metrics)."""
        ...

    @property
    def bad_values(self) -> int:
        """Values read from the shared store that gitreg never writes, ignored (for /metrics)."""
        ...

    @property
    def tag_loads(self) -> Mapping[str, int]:
        """Tag cache misses by how they were answered: shared, led, waited, local (for /metrics)."""
        ...

    async def start(self) -> None:
        """Connect; never raises (an unreachable store means: alone for now)."""
        ...

    async def close(self) -> None:
        """Flush what is pending, give up what is held, disconnect; never raises."""
        ...

    async def load_tags(self, key: str, loader: Loader) -> TagList:
        """The tag list of `key`, from the shared store or `loader` (git)."""
        ...

    async def invalidate(self, keys: list[str]) -> None:
        """Tell the other replicas these repositories changed."""
        ...

    async def pin(self, repository: str, tag: str, sha: str, allow_moved: bool, at: float) -> tuple[str, float]:
        """The commit to pin `tag` at, and when it was first pinned, when this replica has no record
        of it: (`sha`, `at`), or the earliest pin another replica recorded."""
        ...

    async def pinned(self, repository: str, tag: str) -> tuple[str, float] | None:
        """The commit another replica pinned `tag` at, and when; None when none is known (or the
        shared store is down). Read-only: what pages and details show of a moved tag."""
        ...

    def share_pins(self, source: Callable[[], list[tuple[str, str, str, float]]], allow_moved: bool) -> None:
        """Where this replica's pins on disk are read (`TagPins.entries`), to publish them again
        whenever the shared store (re)connects: it may have lost them."""
        ...

    def share_owners(self, source: Callable[[], list[tuple[str, str, float]]]) -> None:
        """Where this replica's org module owners are read (address, holder, first held), to publish them
        again whenever the shared store (re)connects, and then learn every owner it holds."""
        ...

    def publish_owner(self, address: str, holder: str, since: float, replaces: str) -> None:
        """Record that `holder` first held `address` at `since` (replacing the record of `replaces`, a
        holder found gone, if any), in the background; an earlier owner comes back through on_owner."""
        ...

    async def access(self, key: str) -> bool | None:
        """A Git host's "can read" answer another replica stored under `key` (a digest), or None."""
        ...

    def remember_access(self, key: str, allowed: bool, seconds: float) -> None:
        """Store a Git host's "can read" answer under `key` (a digest) for the others, for `seconds`."""
        ...

    def leading(self) -> bool:
        """True when this replica builds the index."""
        ...

    async def publish_index(self, text: str) -> None:
        """Offer the index.json text this replica wrote to the others."""
        ...

    def follow_index(self) -> None:
        """From now on, emit on_index for each index another replica publishes (once the
        application has connected what loads it; one published before is not lost)."""
        ...

    def count_download(self, address: str) -> None:
        """One more download of `address` (the catalog counts it locally too)."""
        ...

    def downloads(self, address: str) -> int | None:
        """The shared download count of `address`, or None to use the local one."""
        ...

    def status(self) -> dict[str, Any]:
        """For /readyz: the backend and its state (never a URL)."""
        ...
