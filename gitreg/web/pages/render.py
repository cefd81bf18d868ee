"""Rendering a page: the Jinja2 environment (autoescape on), the security headers, HTML errors.

Also the small helpers whose output goes into templates (the host clients put in `source`,
a version constraint, a ready-to-paste `module` block). Nothing here reads git or the API.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jinja2
from aiohttp import web

from gitreg.index.model import IndexedVersion, IndexEntry
from gitreg.web.keys import CONFIG

HERE = Path(__file__).parent
# Applied to every page and static file: nothing inline, nothing from elsewhere, no framing.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' https: data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}
# Whether the page's visitor has a session (the header then offers to log out); set by the guard.
LOGGED_IN = web.RequestKey("ui_logged_in", bool)

_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
_templates.globals["static"] = lambda name: f"/static/{name}"


def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    """`template` rendered with `context` and what every page shows (title, login state, path)."""
    config = request.app[CONFIG]
    context.setdefault("logged_in", request.get(LOGGED_IN, False))
    html = _templates.get_template(template).render(
        title=config.ui.title,
        auth=config.auth.enabled,
        path=request.path,
        **context,
    )
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


def not_found(request: web.Request, message: str) -> web.Response:
    """The HTML 404 page, saying what was not found."""
    return render(request, "error.html", status=404, heading="Not found", message=message)


def page_error(request: web.Request, status: int, message: str) -> web.Response:
    """An HTML error page (pages never answer with the API's JSON)."""
    heading = {404: "Not found", 403: "Refused", 405: "Not allowed", 413: "Too large"}.get(status, "Error")
    return render(request, "error.html", status=status, heading=heading, message=message)


def registry_host(request: web.Request) -> str:
    """The host clients put in `source`: `[server] public_url`'s, else the one the browser is on."""
    public = request.app[CONFIG].server.public_url
    if public:
        return urlsplit(public).netloc
    return request.host


def constraint(version: IndexedVersion) -> str:
    """A version constraint that follows compatible releases: `~> 2.1` (`= x` for a prerelease)."""
    text = version.canonical.split("+", 1)[0]
    if "-" in text:
        return text  # a prerelease is only selected by an exact version
    major, minor, patch = text.split(".")
    return f"~> {major}.{minor}" if major != "0" else f"~> 0.{minor}.{patch}"


def snippet(request: web.Request, entry: IndexEntry, version: IndexedVersion) -> str:
    """A `module` block ready to paste."""
    label = entry.address.name.replace("-", "_")
    if not label[0].isalpha():
        label = f"m_{label}"
    return (
        f'module "{label}" {{\n  source  = "{registry_host(request)}/{entry.address}"\n'
        f'  version = "{constraint(version)}"\n}}\n'
    )
