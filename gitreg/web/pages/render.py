"""Rendering a page: the Jinja2 environment (autoescape on), the security headers, HTML errors.

Also the small helpers whose output goes into templates (the host clients put in `source`, and
what a page says when it was reached at another; a version constraint, a ready-to-paste
`module` block). Nothing here reads git or the API.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import jinja2
from aiohttp import web
from markupsafe import Markup, escape

from gitreg.core.names import ModuleAddress, address_from_text
from gitreg.index.model import IndexedVersion, IndexEntry
from gitreg.index.search import query_terms
from gitreg.web.auth import caller
from gitreg.web.keys import CONFIG
from gitreg.web.origin import base_url, public_origin, request_origin

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
# A type or default longer than this (or on several lines) is shown folded, in a <details>.
FOLD_WIDTH = 60

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
    principal = caller(request)
    # "Signed in as <username>" for a person signed in through a Git host.
    context.setdefault("signed_in_as", principal.name if principal is not None and principal.kind == "login" else "")
    html = _templates.get_template(template).render(
        title=config.ui.title,
        auth=config.auth.enabled,
        path=request.path,
        providers_served=bool(config.providers),
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
    """The host clients put in `source`: `[server] registry_host`, else `[server] public_url`'s, else
    the one the browser is on.

    The browser's `Host` (or a trusted proxy's) counts only when it is a `host[:port]` (web/origin.py).
    """
    named = request.app[CONFIG].server.registry_host
    if named:
        return named
    base = base_url(request)
    return urlsplit(base).netloc if base else "registry.example.com"


def host_note(request: web.Request) -> str:
    """What a module page says of the host its `module` blocks name, when the address the page was
    reached at is not `[server] public_url` and no host Terraform can install from (plain HTTP:
    Terraform finds a registry over HTTPS only); "" otherwise."""
    reached = request_origin(request)
    if reached is None or reached.startswith("https://") or reached == public_origin(request):
        return ""
    server, host = request.app[CONFIG].server, registry_host(request)
    if server.registry_host:
        return (
            f"These blocks name {host}, the host Terraform installs from ([server] registry_host; your Terraform "
            f"CLI configuration maps it to this registry): not {reached}, where this page was reached, which "
            "Terraform cannot use (it finds a registry over HTTPS only)."
        )
    if server.public_url:
        return (
            f"These blocks name {host}, the host Terraform installs from ([server] public_url): not {reached}, where "
            "this page was reached, which Terraform cannot use (it finds a registry over HTTPS only)."
        )
    return (
        f"Terraform finds a registry over HTTPS only: a source naming {host} installs only where a `host` block of "
        "the Terraform CLI configuration maps that name to this registry. Use this registry's HTTPS host name "
        "(set [server] public_url and these blocks name it), or the name your CLI configuration maps (set "
        "[server] registry_host)."
    )


def constraint(version: IndexedVersion) -> str:
    """A version constraint that follows compatible releases: `~> 2.1` (`= x` for a prerelease)."""
    text = version.canonical.split("+", 1)[0]
    if "-" in text:
        return text  # a prerelease is only selected by an exact version
    major, minor, patch = text.split(".")
    return f"~> {major}.{minor}" if major != "0" else f"~> 0.{minor}.{patch}"


def snippet(request: web.Request, entry: IndexEntry, version: IndexedVersion, path: str = "") -> str:
    """A `module` block ready to paste: the full address (`host/ns/name/system[//path]`) and a `version` line.

    `path` is a submodule's or an example's directory: its label is the directory's last part.
    """
    label = re.sub(r"[^A-Za-z0-9_]", "_", path.rsplit("/", 1)[-1] if path else entry.address.name)
    if not label[:1].isalpha():
        label = f"m_{label}"
    source = f"{registry_host(request)}/{entry.address}" + (f"//{path}" if path else "")
    return f'module "{label}" {{\n  source  = "{source}"\n  version = "{constraint(version)}"\n}}\n'


def served_address(request: web.Request, source: str) -> ModuleAddress | None:
    """The module a dependency's `source` names on this registry (`host/ns/name/system[//path]`), else None."""
    parts = source.split("//", 1)[0].split("/")
    if len(parts) != 4 or parts[0].lower() != registry_host(request).lower():
        return None
    return address_from_text("/".join(parts[1:]))


class Folded(NamedTuple):
    """A type or default as a page shows it: in full when short, else a one-line summary that opens."""

    short: str
    full: str
    long: bool


def fold(text: str, width: int = FOLD_WIDTH) -> Folded:
    """`text` for a page: a long or multi-line value (a JSON default is indented) gets a summary line."""
    if len(text) <= width and "\n" not in text:
        return Folded(text, text, False)
    full = text
    if text[:1] in "[{":
        with contextlib.suppress(ValueError):  # not JSON (a type): shown as written
            full = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    elif "\n" not in text and "{" in text:
        full = laid_out(text)
    first = text.split("\n", 1)[0]
    short = first[: width - 1] + "…" if len(first) > width else first + " …"
    return Folded(short, full, True)


def laid_out(text: str, indent: str = "  ") -> str:
    """A type written on one line (`object({a = string, b = list(object({c = number}))})`, as the
    index reads it) as Terraform's own layout: one attribute a line, nested objects indented."""
    out: list[str] = []
    opened: list[str] = []  # the brackets open at this point, innermost last
    quoted = False
    for at, c in enumerate(text):
        if quoted or c == '"':
            quoted = (c != '"' or not quoted) if text[at - 1 : at] != "\\" else quoted
            out.append(c)
        elif c in "({[":
            opened.append(c)
            out.append(c + (f"\n{indent * opened.count('{')}" if c == "{" else ""))
        elif c in ")}]":
            closing = opened.pop() if opened else ""
            out.append((f"\n{indent * opened.count('{')}" if closing == "{" else "") + c)
        elif c == "," and opened[-1:] == ["{"]:
            out.append(f"\n{indent * opened.count('{')}")
        elif c == " " and out and out[-1].endswith(("\n", " ")):
            continue  # the space after a comma or a brace that is now a line break
        else:
            out.append(c)
    return "".join(out)


# A results page marks the same query in every result's address, description and topics (dozens
# of calls a page): the query's words and their pattern are made once per query, not per call.
@functools.lru_cache(maxsize=256)
def _mark_pattern(query: str) -> re.Pattern[str] | None:
    _, words = query_terms(query)
    if not words:
        return None
    return re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)), re.IGNORECASE)


def marked(text: str, query: str) -> Markup:
    """`text`, escaped, with each word of the search `query` found in it as `<mark>` (what matched)."""
    pattern = _mark_pattern(query) if query and text else None
    if pattern is None:
        return escape(text)
    parts: list[str] = []
    at = 0
    for found in pattern.finditer(text):
        parts += [escape(text[at : found.start()]), Markup("<mark>"), escape(found.group()), Markup("</mark>")]
        at = found.end()
    parts.append(escape(text[at:]))
    return Markup("").join(parts)


_templates.globals["fold"] = fold
_templates.filters["marked"] = marked
