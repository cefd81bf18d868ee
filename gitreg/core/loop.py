"""The one way gitreg runs a coroutine to completion: on uvloop's event loop.

uvloop (libuv under the asyncio API, what aiohttp's own `GunicornUVLoopWebWorker` runs on)
takes about a tenth off the CPU each warm request costs the serving process
(bench/warm_path.py --operator: BENCHMARKS.md section 18); everything else gitreg does on the
loop (subprocesses, signals, TLS, timers, executors) is the same asyncio API. Every process
gitreg starts runs its main coroutine through `run_main`: the server, its workers, the index
process and the one-shot commands alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def run_main(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on a new uvloop event loop."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
