"""The listening socket: deadlines for slow clients, and quiet when file descriptors run out.

aiohttp closes a connection that has sent no complete request within its keep-alive timeout
(counted from when the connection opens, and again after each response), which the CLI sets
to `[server] idle_timeout_seconds`. What aiohttp leaves open is the TLS handshake (asyncio's
60 s default): `Listener` gives it the same deadline.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gitreg.core.errors import OUT_OF_RESOURCES

log = logging.getLogger("gitreg")


class ListeningSocket:
    """The listening socket, opened before the app is set up and accepting only once it is.

    The runner's setup loads storage and starts the index process: a port in use is said at
    once, not after all that (and without disturbing the instance that holds the port).
    Connections that arrive before `Listener.start` wait in the backlog.
    """

    def __init__(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        handshake_timeout: float,
        reuse_port: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.handshake_timeout = handshake_timeout
        self.reuse_port = reuse_port  # `--workers N`: N processes listen on one port
        self.server: asyncio.Server | None = None
        self.handler: Callable[[], asyncio.Protocol] | None = None  # the app's, once it is set up

    async def open(self, backlog: int = 128) -> None:
        """Bind and listen, not accepting yet (OSError when the address is in use or not ours)."""
        tls: dict[str, Any] = {}
        if self.ssl_context is not None:
            tls = {"ssl": self.ssl_context, "ssl_handshake_timeout": self.handshake_timeout}
        self.server = await asyncio.get_running_loop().create_server(
            self._protocol,
            self.host,
            self.port,
            backlog=backlog,
            reuse_port=self.reuse_port or None,
            start_serving=False,
            **tls,
        )

    def _protocol(self) -> asyncio.Protocol:
        assert self.handler is not None  # connections are accepted only once the app is set up
        return self.handler()

    def close(self) -> None:
        """Close a socket that never served (the app's setup failed)."""
        if self.server is not None:
            self.server.close()


class Listener(web.BaseSite):
    """A TCP site on an already open socket, whose TLS handshake has a deadline (aiohttp's TCPSite
    cannot set one, nor be opened before the app is set up)."""

    def __init__(self, runner: web.BaseRunner, socket: ListeningSocket) -> None:
        super().__init__(runner, ssl_context=socket.ssl_context)
        self._socket = socket

    @property
    def name(self) -> str:
        """The URL this site was asked to listen on."""
        return f"{'https' if self._ssl_context else 'http'}://{self._socket.host}:{self._socket.port}"

    async def start(self) -> None:
        """Accept connections on the socket (opening it first if that was not done)."""
        await super().start()
        if self._socket.server is None:
            await self._socket.open(self._backlog)
        self._socket.handler = self._runner.server
        self._server = self._socket.server
        assert self._server is not None
        await self._server.start_serving()


def loop_exception(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's error handler, except that running out of file descriptors is one line, no traceback.

    A connection that arrives while no descriptor is left never gets here: uvloop (libuv)
    accepts it on a descriptor kept in reserve and closes it at once. Any other callback that
    runs out (opening a file or a pipe) is one warning too: a traceback would say nothing more.
    """
    exc = context.get("exception")
    if isinstance(exc, OSError) and exc.errno in OUT_OF_RESOURCES:
        log.warning("%s: %s", context.get("message", "out of resources"), exc.strerror)
        return
    loop.default_exception_handler(context)
