"""The memory backend (`[cache] backend = "memory"`): this process is the whole truth.

Also what the index process and the services' defaults hold: there is nobody to share with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from gitreg.core.events import Signal
from gitreg.git.remote import TagList
from gitreg.replicas.base import Loader
from gitreg.replicas.installs import SharedInstalls
from gitreg.replicas.logins import SharedLogins
from gitreg.replicas.verdicts import SharedVerdicts

_NO_LOADS: Mapping[str, int] = MappingProxyType({})


class MemoryShared:
    """Implements `SharedState` alone: each method answers locally."""

    is_shared = False
    up = False  # no shared store to reach
    logins: SharedLogins | None = None  # issued tokens: this replica's own file only
    installs: SharedInstalls | None = None  # observed installs: this replica's own file only
    verdicts: SharedVerdicts | None = None  # signature verdicts: this replica's own file only
    errors = 0
    bad_values = 0
    tag_loads = _NO_LOADS

    def __init__(self) -> None:
        # Never emitted (no other replica): there for the application to connect to either backend.
        self.on_invalidate: Signal[[str]] = Signal()
        self.on_reconnect: Signal[[]] = Signal()
        self.on_downloads: Signal[[]] = Signal()
        self.on_index: Signal[[str]] = Signal()
        self.on_pin: Signal[[str, str, str, float]] = Signal()
        self.on_owner: Signal[[str, str, float]] = Signal()

    async def start(self) -> None:
        """Nothing to connect to."""

    async def close(self) -> None:
        """Nothing to disconnect from."""

    async def load_tags(self, key: str, loader: Loader) -> TagList:
        """The tag list of `key`: here, straight from the loader (git)."""
        return await loader(key)

    async def invalidate(self, keys: list[str]) -> None:
        """Nobody else to tell."""

    async def pin(self, repository: str, tag: str, sha: str, allow_moved: bool, at: float) -> tuple[str, float]:
        """No other replica's record: (`sha`, `at`)."""
        return sha, at

    async def pinned(self, repository: str, tag: str) -> tuple[str, float] | None:
        """No other replica."""
        return None

    def share_pins(self, source: Callable[[], list[tuple[str, str, str, float]]], allow_moved: bool) -> None:
        """Nobody to share them with."""

    def share_owners(self, source: Callable[[], list[tuple[str, str, float]]]) -> None:
        """Nobody to share them with."""

    def publish_owner(self, address: str, holder: str, since: float, replaces: str) -> None:
        """Nobody to tell: this replica's own owners decide."""

    async def access(self, key: str) -> bool | None:
        """No other replica asked a Git host: None."""
        return None

    def remember_access(self, key: str, allowed: bool, seconds: float) -> None:
        """Nobody to tell: the identity package keeps its own answers."""

    def leading(self) -> bool:
        """Alone, this replica always builds the index."""
        return True

    async def publish_index(self, text: str) -> None:
        """Nobody to offer it to."""

    def follow_index(self) -> None:
        """No other replica publishes an index."""

    def count_download(self, address: str) -> None:
        """The catalog's local count is the whole count."""

    def downloads(self, address: str) -> int | None:
        """None: use the local count."""
        return None

    def status(self) -> dict[str, Any]:
        """For /readyz: the backend."""
        return {"backend": "memory"}
