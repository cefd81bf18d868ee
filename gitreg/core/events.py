"""The one observer style: an emitter owns a `Signal` per event, made in its constructor, and
whoever cares `connect`s to it; nothing is rewired after construction.

A listener of a plain `Signal` runs synchronously inside `emit`, in connection order; a failing
listener propagates to the emitter unless the signal was made with `failures=` (then it is
logged there and the next listener still runs). An `AsyncSignal`'s listeners are awaited one
after the other.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Generic, ParamSpec

P = ParamSpec("P")


class Signal(Generic[P]):
    """An event with synchronous listeners: `Signal[[str]]` passes one string to each."""

    def __init__(self, failures: tuple[logging.Logger, str] | None = None) -> None:
        self._listeners: list[Callable[P, object]] = []
        self._failures = failures  # (logger, message) when one failing listener must not stop the rest

    def connect(self, listener: Callable[P, object]) -> None:
        """Call `listener` at every `emit` from now on."""
        self._listeners.append(listener)

    @property
    def listened(self) -> bool:
        """True when anyone listens (to skip building what nobody hears)."""
        return bool(self._listeners)

    def emit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Call every listener with these arguments."""
        for listener in list(self._listeners):
            if self._failures is None:
                listener(*args, **kwargs)
                continue
            try:
                listener(*args, **kwargs)
            except Exception:
                logger, message = self._failures
                logger.exception(message)


class AsyncSignal(Generic[P]):
    """An event whose listeners are coroutines, awaited in turn by the emitter."""

    def __init__(self) -> None:
        self._listeners: list[Callable[P, Awaitable[object]]] = []

    def connect(self, listener: Callable[P, Awaitable[object]]) -> None:
        """Await `listener` at every `emit` from now on."""
        self._listeners.append(listener)

    async def emit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Await every listener with these arguments, one after the other."""
        for listener in list(self._listeners):
            await listener(*args, **kwargs)
