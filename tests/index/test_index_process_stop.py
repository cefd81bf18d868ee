"""`gitreg serve` stopped while its index process is being started: the index process is told to
stop (its input ends) like a running one, never left running until it is killed STOP_SECONDS later."""

from __future__ import annotations

import logging
import time

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
