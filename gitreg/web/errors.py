"""The one error shape of every JSON answer: `{"errors": ["..."]}` (the middleware and `/readyz` use it)."""

from __future__ import annotations

from aiohttp import web


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    """The one error shape of the registry API: `{"errors": ["..."]}`."""
    return web.json_response({"errors": [message]}, status=status, headers=headers)
