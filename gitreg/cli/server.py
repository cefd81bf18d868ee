"""Running the server: the listening socket first, then the app, until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gitreg import __version__
from gitreg.config.model import Config

if TYPE_CHECKING:
    from gitreg.index.process import EarlyStart, Role

log = logging.getLogger("gitreg")


class ListenError(Exception):
    """The listening socket could not be opened (address in use, no such address, permission)."""

    def __init__(self, error: OSError) -> None:
        # asyncio rewords bind errors ("error while attempting to bind on address ..."): the plain
        # reason from errno; a resolver error (negative errno) keeps its own text.
        reason = os.strerror(error.errno) if error.errno and error.errno > 0 else (error.strerror or str(error))
        super().__init__(reason)
        self.strerror = reason


async def run_server(
    config: Config,
    ssl_context: ssl.SSLContext | None,
    reuse_port: bool = False,
    on_serving: Callable[[str], None] | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT, then finish in-flight requests and release everything.

    `on_serving` is called with the first URL served, once requests are answered (`gitreg demo`).
    """
    from gitreg.index.process import EarlyStart, Role, serve_role

    role = serve_role(config)
    # The index process first: it imports gitreg while this process imports and builds the application.
    early = EarlyStart() if role is Role.SERVE else None
    if early is not None:
        await early.start()
    try:
        await _serve(config, ssl_context, reuse_port, on_serving, role, early)
    finally:
        if early is not None:
            await early.close()  # (not taken: the application did not start)


async def _serve(
    config: Config,
    ssl_context: ssl.SSLContext | None,
    reuse_port: bool,
    on_serving: Callable[[str], None] | None,
    role: Role,
    early: EarlyStart | None,
) -> None:
    from aiohttp import web

    from gitreg.observability.logs import AccessLogger
    from gitreg.web.app import create_app
    from gitreg.web.listener import Listener, ListeningSocket, loop_exception

    loop = asyncio.get_running_loop()
    loop.set_exception_handler(loop_exception)
    log.debug("event loop: %s.%s", type(loop).__module__, type(loop).__qualname__)  # uvloop.Loop (core/loop.py)
    idle = config.server.idle_timeout_seconds
    runner = web.AppRunner(
        create_app(config, role=role, early=early),
        handle_signals=False,
        access_log_class=AccessLogger,  # combined log format; fields as JSON with --log-format json
        shutdown_timeout=10,
        # A client that hangs up cancels its handler, so git work it queued is dropped before
        # it starts (gitpool) instead of running for nobody. aiohttp's default keeps it running.
        handler_cancellation=True,
        # aiohttp starts this timer when a connection opens and again after each response; when
        # it fires with no complete request received, the connection is closed: a header-read
        # timeout (slow or silent clients) and the keep-alive idle timeout in one.
        keepalive_timeout=idle,
    )
    # reuse_port: `--workers N` listen on one port, the kernel spreading connections (workers.py).
    listening = ListeningSocket(config.server.host, config.server.port, ssl_context, idle, reuse_port=reuse_port)
    try:
        await listening.open()  # before the setup reads storage: a port in use is said at once
    except OSError as e:
        raise ListenError(e) from None
    try:
        await runner.setup()
    except BaseException:
        listening.close()
        raise
    try:
        await Listener(runner, listening).start()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        urls = announce(config, runner.addresses, "https" if ssl_context else "http")
        if on_serving is not None:
            on_serving(urls[0])
        await stop.wait()
        log.info("shutting down: finishing in-flight requests")
    finally:
        await runner.cleanup()
        AccessLogger.write_pending()  # the access lines still held back (written in blocks)


def announce(config: Config, addresses: list[Any], scheme: str) -> list[str]:
    """Log where gitreg serves (tests/support/process.py reads the line); the URLs."""
    urls = []
    for address in addresses:
        host, port = address[0], address[1]
        urls.append(f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}")
        log.info("gitreg %s serving %d module rule(s) on %s", __version__, len(config.modules), urls[-1])
    if config.orgs:
        log.info(
            "org mode: the repositories of %s", ", ".join(f"{org.label} as {org.namespace}" for org in config.orgs)
        )
    return urls
