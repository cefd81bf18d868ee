"""The one place that picks a replicas backend for `[cache] backend`."""

from __future__ import annotations

from gitreg.config.model import CacheConfig
from gitreg.replicas.base import SharedState
from gitreg.replicas.memory import MemoryShared
from gitreg.replicas.redis import RedisShared


def make_shared(config: CacheConfig, lock_seconds: float) -> SharedState:
    """The shared state for `[cache] backend`: Redis's locks outlive one git call of `lock_seconds`."""
    if config.backend == "redis":
        return RedisShared(config, lock_seconds)
    return MemoryShared()
