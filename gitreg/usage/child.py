"""The usage scan's own process: the reads of one pass, away from the serving process's event loop.

A pass's git work runs in git pool threads; each git process those threads start (a clone, two
local commands per repository: thousands in a first scan) is forked while its thread holds the
interpreter lock, and on a busy host a thread descheduled there stops the event loop with it
(bench/usage_scale.py measured stalls of a second at 2,000 repositories). So the serving process
decides what a pass must read (usage/scan.py `plan`: no git) and, when there is anything, starts
`python -m gitreg.usage.child` at `nice` +10, as the index process is started (the same
environment, the config without the secrets it has no use for, the Git credentials kept): it
is given the config, `[storage] path` and the repositories to read (a length-prefixed pickle on
stdin: its parent is the trusted side), reads them into usage.json, writes the pass's counts as
one JSON line on stdout, and exits. The serving process then loads usage.json.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

from gitreg.config.model import Config
from gitreg.core.loop import run_main
from gitreg.git.pool import GitPool
from gitreg.git.remote import GitAdapter
from gitreg.git.runner import GitRunner
from gitreg.index.parse_workers import FRAME
from gitreg.usage.scan import PassStats, Target
from gitreg.usage.service import Usage

NICENESS = 10


async def _scan(config: Config, storage: Path, todo: list[Target]) -> PassStats:
    stats = PassStats(repositories=len(todo))
    with tempfile.TemporaryDirectory(prefix="gitreg-home-") as home:
        git = config.git
        pool = GitPool(git.max_concurrency, git.max_queue, git.max_per_host)
        adapter = GitAdapter(GitRunner(git, config.credentials, home))
        usage = Usage(config, list, lambda: True, pool, adapter, storage, in_process=True)
        try:
            await usage.store.load()
            await usage.scanner.scan(todo, stats)
            await usage.store.flush()
        finally:
            await usage.workers.close()
            pool.shutdown()
            adapter.runner.kill_running()
    return stats


def main() -> int:
    """Read the request, scan, write the counts; the exit code says whether usage.json was written."""
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    header = sys.stdin.buffer.read(FRAME.size)
    if len(header) < FRAME.size:
        return 2
    (size,) = FRAME.unpack(header)
    request: dict[str, Any] = pickle.loads(sys.stdin.buffer.read(size))
    stats = run_main(_scan(request["config"], Path(request["storage"]), request["todo"]))
    sys.stdout.write(json.dumps(dataclasses.asdict(stats)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
