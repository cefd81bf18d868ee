"""`python -m gitreg.indexer`: the index process of `gitreg serve`, which starts it (not for people).

Its entry point only: it reads the Seed, sets up logging as the serving process has it, runs
the services of Role.INDEX (gitreg/services: no HTTP application, no port) and follows the
serving process's commands until its stdin closes. What the two processes do and say is
gitreg/index/process.py and protocol.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import struct
import sys

from gitreg.core.loop import run_main
from gitreg.index.child import IndexSide, ReportFeed
from gitreg.index.parse_workers import FRAME
from gitreg.index.process import NICENESS, READ_LIMIT, Role
from gitreg.index.protocol import Seed, decode_command
from gitreg.observability.setup import configure_logging
from gitreg.services.compose import Services


async def _child(seed: Seed, read_fd: int, write_fd: int) -> None:
    """The index process's life: run the services of the INDEX role, follow the serving process."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb"))
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb"))
    out = asyncio.StreamWriter(transport, protocol, None, loop)

    async with contextlib.AsyncExitStack() as services_running:
        # Loads index.json and starts indexing; no HTTP application, no port.
        services = await services_running.enter_async_context(Services(seed.config, Role.INDEX, seed=seed).running())
        index = services.index
        side = IndexSide(seed, index, services.catalog, services.orgs, services.cache, services.registry)
        feed = ReportFeed(index, out, seed.resync)
        index.on_written.connect(feed.written)
        services.cache.on_fetched.connect(feed.fetched)
        feeder = asyncio.ensure_future(feed.run())
        loop.add_signal_handler(signal.SIGTERM, reader.feed_eof)  # stop as when the input ends
        try:
            while True:
                try:
                    size = FRAME.unpack(await reader.readexactly(FRAME.size))[0]
                    command = decode_command(await reader.readexactly(size))
                except asyncio.IncompleteReadError:
                    break  # the serving process closed our input (stopping) or died
                side.apply(command)
        finally:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)
            await services_running.aclose()  # index.json written once more
            with contextlib.suppress(ConnectionError):
                await feed.send()
            out.close()


def main() -> int:
    """`python -m gitreg.indexer`, started by the serving process (IndexProcess); not for people."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the serving process decides
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    stdin = sys.stdin.fileno()
    try:
        size = FRAME.unpack(_read_exactly(stdin, FRAME.size))[0]
        seed = decode_command(_read_exactly(stdin, size))
    except (EOFError, ValueError, struct.error):
        seed = None
    if not isinstance(seed, Seed):
        sys.stderr.write("gitreg.indexer: this is the index process of `gitreg serve`, which starts it\n")
        return 2
    # stdout carries messages: anything else printed goes to stderr.
    write_fd = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    configure_logging(seed.log_level, "json" if seed.log_json else "text", serve=True)
    run_main(_child(seed, stdin, write_fd))
    return 0


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


if __name__ == "__main__":
    sys.exit(main())
