"""The one error shape of every JSON answer: `{"errors": ["..."]}` (routing.py and `/readyz` use it)."""

from __future__ import annotations

from aiohttp import web


def error_response(
    status: int, message: str, headers: dict[str, str] | None = None, oauth_error: str | None = None
) -> web.Response:
    """The one error shape of the registry API: `{"errors": ["..."]}`; OAuth endpoints add their
    protocol's `error` code beside it (`{"errors": [...], "error": "invalid_grant"}`)."""
    body: dict[str, object] = {"errors": [message]}
    if oauth_error is not None:
        body["error"] = oauth_error
    return web.json_response(body, status=status, headers=headers)
