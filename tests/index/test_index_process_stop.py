"""`gitreg serve` stopped while its index process is being started: the index process is told to
stop (its input ends) like a running one, never left running until it is killed STOP_SECONDS later."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from pathlib import Path

import pytest

from gitreg.index.process import STOP_SECONDS
from tests.support.app import make_config

pytestmark = pytest.mark.slow  # a real index process


async def test_stopping_right_after_the_start_ends_the_index_process_without_waiting_to_kill_it(
    serve_client, repo, caplog
):
    caplog.set_level(logging.INFO, logger="gitreg.index.process")
    rule = {"namespace": "demo", "name": "hello", "system": "null", "repository": repo.url, "download": "archive"}
    client = await serve_client(make_config([rule]))
    started = time.monotonic()
    await client.close()  # SIGTERM (or a rolling restart) just after the start: the index process is starting
    took = time.monotonic() - started
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "did not stop" in m], messages
    # Before: the stop found no input to close while the process was being spawned, so the
    # process ran on and was killed STOP_SECONDS later, every time.
    assert took < STOP_SECONDS - 2, (took, messages)


def _index_children() -> list[int]:
    """This process's children that are an index process (the test's app started it)."""
    pid = os.getpid()
    found = []
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with contextlib.suppress(FileNotFoundError):
            if b"gitreg.indexer" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(int(child))
    return found


def _state(pid: int) -> str | None:
    """The process's state letter (Z: a zombie, ended and not reaped); None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


async def test_an_index_process_killed_at_shutdown_is_gone_when_the_shutdown_returns(serve_client, repo, caplog):
    caplog.set_level(logging.INFO, logger="gitreg.index.process")
    rule = {"namespace": "demo", "name": "hello", "system": "null", "repository": repo.url, "download": "archive"}
    client = await serve_client(make_config([rule]))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # running: it was given its seed
        if any("index process started" in r.getMessage() for r in caplog.records):
            break
        await asyncio.sleep(0.05)
    children = _index_children()
    assert len(children) == 1, children
    child = children[0]
    os.kill(child, signal.SIGSTOP)  # it cannot write index.json and exit: killed after STOP_SECONDS
    try:
        await client.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGCONT)
    messages = [r.getMessage() for r in caplog.records]
    assert [m for m in messages if "did not stop" in m], messages  # it was the kill that ended it
    # Before: killed and never waited for, so the shutdown returned with the process still there
    # (still running in 2 runs of 4, "R"), reaped later, or not, by whatever child watcher the loop has.
    assert _state(child) is None, _state(child)
