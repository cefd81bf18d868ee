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
from typing import Any

from aiohttp import web

from gitreg.core.errors import OUT_OF_RESOURCES

log = logging.getLogger("gitreg")


class Listener(web.BaseSite):
    """A TCP site whose TLS handshake has a deadline (aiohttp's TCPSite cannot set one)."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        handshake_timeout: float,
        reuse_port: bool = False,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._handshake_timeout = handshake_timeout
        self._reuse_port = reuse_port  # `--workers N`: N processes listen on one port

    @property
    def name(self) -> str:
        """The URL this site was asked to listen on."""
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self._port}"

    async def start(self) -> None:
        """Open the listening socket (OSError when the address is in use or not ours)."""
        await super().start()
        server = self._runner.server
        assert server is not None
        tls: dict[str, Any] = {}
        if self._ssl_context is not None:
            tls = {"ssl": self._ssl_context, "ssl_handshake_timeout": self._handshake_timeout}
        self._server = await asyncio.get_running_loop().create_server(
            server, self._host, self._port, backlog=self._backlog, reuse_port=self._reuse_port or None, **tls
        )


def loop_exception(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's error handler, except that running out of file descriptors is one line, no traceback.

    When accept() fails for want of descriptors, asyncio stops accepting for a second and
    tries again by itself; the traceback it would log says nothing more.
    """
    exc = context.get("exception")
    if isinstance(exc, OSError) and exc.errno in OUT_OF_RESOURCES:
        log.warning(
            "%s: %s; new connections wait until others close", context.get("message", "out of resources"), exc.strerror
        )
        return
    loop.default_exception_handler(context)
