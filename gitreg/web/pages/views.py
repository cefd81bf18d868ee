"""The module browser: server-rendered pages over the index (no git, no API call while rendering).

Pages (fixed paths): `/` (the modules this visitor may see, newest-published first, search
and filters), `/modules/{namespace}/{name}/{system}[/{version}]` (README, inputs, outputs,
providers, dependencies, resources, submodules and examples, versions, a copy-ready
`module` block), and with registry tokens configured `/login` and `/logout`.

Everything comes from the index and the details it keeps on disk. Templates are Jinja2 with
autoescape on; READMEs are rendered by markdown-it-py with raw HTML disabled and links
limited to http, https, mailto and relative ones (resolved to the repository's web page).
Every page carries a Content-Security-Policy without inline script, so a README can never
run anything; the one script (a copy button) is a static file and the pages work without it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urljoin, urlsplit

import jinja2
from aiohttp import web
from aiohttp.typedefs import Handler
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from gitreg.config.model import TokenConfig
from gitreg.core.errors import GitregError, ModuleNotFound
from gitreg.core.names import NAME_RE, SYSTEM_RE, ModuleAddress, check_version, parse_address
from gitreg.core.secrets import digest, same_secret
from gitreg.index.details import ModuleDetails
from gitreg.index.store import DetailsPending, IndexedVersion, IndexEntry
from gitreg.web.auth import SCOPE_KEY
from gitreg.web.keys import AUTH, CATALOG, CONFIG, INDEX, REGISTRY

HERE = Path(__file__).parent
PAGE_SIZE = 20
COOKIE = "gitreg_session"
SESSION_SECONDS = 12 * 3600
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
_SAFE_SCHEMES = ("http", "https", "mailto")

_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
_templates.globals["static"] = lambda name: f"/static/{name}"


# ---------------------------------------------------------------------------------------
# README rendering
# ---------------------------------------------------------------------------------------


def _safe_link(url: str) -> bool:
    """Only http, https, mailto and relative links (no javascript:, data:, file:, vbscript:...)."""
    text = "".join(c for c in url.strip() if c.isprintable() and not c.isspace()).lower()
    scheme, sep, _ = text.partition(":")
    if not sep or "/" in scheme or "?" in scheme or "#" in scheme:
        return True  # relative: `docs/x.md`, `#usage`, `/abs/path`, `?q`
    return scheme in _SAFE_SCHEMES


def repository_file_url(source: str, ref: str, path: str, raw: bool) -> str:
    """The web URL of a file in the repository at `ref` (GitLab's `/-/blob/` or GitHub's `/blob/`)."""
    kind = "raw" if raw else "blob"
    host = (urlsplit(source).hostname or "").lower()
    middle = f"/-/{kind}/" if "gitlab" in host else f"/{kind}/"
    return f"{source.rstrip('/')}{middle}{quote(ref, safe='')}/{path.lstrip('/')}"


def render_readme(text: str, source: str, ref: str, base: str) -> str:
    """The README as HTML: no raw HTML, safe links only, relative links into the repository."""
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")
    # markdown-it's documented way to restrict links is to replace this method on the instance.
    md.validateLink = _safe_link  # type: ignore[method-assign]

    def resolve(url: str, raw: bool) -> str | None:
        if not url or url.startswith("#") or urlsplit(url).scheme:
            return url
        if not source:
            return None  # nowhere to point a relative link at: drop it
        target = urljoin(f"{base.strip('/')}/" if base.strip("/") else "", url)
        return repository_file_url(source, ref, target, raw)

    def link_open(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
        token = tokens[idx]
        href = resolve(str(token.attrGet("href") or ""), raw=False)
        if href is None:
            token.attrs.pop("href", None)
        else:
            token.attrSet("href", href)
            if urlsplit(href).scheme in ("http", "https"):
                token.attrSet("rel", "nofollow noopener noreferrer")
        return self.renderToken(tokens, idx, options, env)

    def image(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
        token = tokens[idx]
        src = resolve(str(token.attrGet("src") or ""), raw=True)
        if src is None:
            return ""  # an image we cannot locate: its alt text is in the page anyway
        token.attrSet("src", src)
        token.attrSet("loading", "lazy")
        token.attrSet("referrerpolicy", "no-referrer")
        return self.image(tokens, idx, options, env)

    md.add_render_rule("link_open", link_open)
    md.add_render_rule("image", image)
    html: str = md.render(text)  # markdown-it types render() as Any (its renderer is pluggable)
    return html


# ---------------------------------------------------------------------------------------
# Sessions (registry tokens in a signed cookie)
# ---------------------------------------------------------------------------------------


class Sessions:
    """A signed, expiring cookie naming which registry token logged in (by its digest, never the token)."""

    def __init__(self, key: str, tokens: tuple[TokenConfig, ...]) -> None:
        self._key = hashlib.sha256(b"gitreg-ui-session\0" + key.encode()).digest()
        self._tokens = tokens

    def _mac(self, payload: str) -> str:
        digest = hmac.new(self._key, payload.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def issue(self, token_id: str, now: float | None = None) -> str:
        """The cookie value for a logged-in token, valid SESSION_SECONDS."""
        expires = int((time.time() if now is None else now) + SESSION_SECONDS)
        payload = f"{token_id}.{expires}"
        return f"{payload}.{self._mac(payload)}"

    def token_id(self, value: str | None, now: float | None = None) -> str | None:
        """The token id a valid, unexpired cookie names, else None."""
        if not value or value.count(".") != 2:
            return None
        token_id, expires, mac = value.split(".")
        if not same_secret(mac, digest(self._mac(f"{token_id}.{expires}"))):
            return None
        if not expires.isdigit() or int(expires) < (time.time() if now is None else now):
            return None
        return token_id


def token_id(token: TokenConfig) -> str:
    """A stable, non-secret name of a configured token: the start of its SHA-256."""
    digest = token.token[7:] if token.token.startswith("sha256:") else hashlib.sha256(token.token.encode()).hexdigest()
    return digest[:32]


SESSIONS = web.AppKey("ui_sessions", Sessions)


def _scope_from_cookie(request: web.Request) -> tuple[bool, frozenset[str] | None]:
    """(logged in, namespaces) for a page request; (True, None) when the registry is open."""
    config = request.app[CONFIG]
    if not config.auth.enabled:
        return True, None
    found = request.app[SESSIONS].token_id(request.cookies.get(COOKIE))
    if found is None:
        return False, frozenset()
    for token in config.auth.tokens:
        if token_id(token) == found:  # not a secret: the signed cookie's MAC was checked above
            return True, frozenset(token.namespaces) if token.namespaces is not None else None
    return False, frozenset()  # the token was removed from the config since


def same_origin(request: web.Request) -> bool:
    """A form POST from our own pages: Origin (or Referer) names this host (CSRF defence)."""
    origin = request.headers.get("Origin") or request.headers.get("Referer")
    if not origin or origin == "null":
        return False
    parts = urlsplit(origin)
    return parts.scheme == request.scheme and parts.netloc == request.host


# ---------------------------------------------------------------------------------------
# Helpers for the templates
# ---------------------------------------------------------------------------------------


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


def _render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    config = request.app[CONFIG]
    context.setdefault("logged_in", request.get(LOGGED_IN, False))
    html = _templates.get_template(template).render(
        title=config.ui.title,
        auth=config.auth.enabled,
        path=request.path,
        **context,
    )
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


def _not_found(request: web.Request, message: str) -> web.Response:
    return _render(request, "error.html", status=404, heading="Not found", message=message)


def page_error(request: web.Request, status: int, message: str) -> web.Response:
    """An HTML error page (pages never answer with the API's JSON)."""
    heading = {404: "Not found", 403: "Refused", 405: "Not allowed"}.get(status, "Error")
    return _render(request, "error.html", status=status, heading=heading, message=message)


LOGGED_IN = web.RequestKey("ui_logged_in", bool)


async def ui_guard(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Pages: the visitor's scope from the session cookie, a redirect to /login without one."""
    logged_in, scope = _scope_from_cookie(request)
    request[LOGGED_IN] = logged_in and request.app[CONFIG].auth.enabled
    if not logged_in:
        target = request.path_qs if request.method == "GET" else "/"
        raise web.HTTPFound("/login?" + urlencode({"next": target}))
    request[SCOPE_KEY] = scope
    return await handler(request)


def _visible(request: web.Request, address: ModuleAddress) -> bool:
    scope = request.get(SCOPE_KEY)
    return scope is None or address.namespace in scope


# ---------------------------------------------------------------------------------------
# Pages
# ---------------------------------------------------------------------------------------


def _published_order(entries: list[IndexEntry]) -> list[IndexEntry]:
    return sorted(entries, key=lambda e: (e.published_at, str(e.address)), reverse=True)


async def index_page(request: web.Request) -> web.Response:
    """The modules this visitor may see, newest first; search and filters."""
    q = request.query.get("q", "").strip()[:200]
    namespace = request.query.get("namespace", "")
    system = request.query.get("system", "")
    namespace = namespace if NAME_RE.fullmatch(namespace) else ""
    system = system if SYSTEM_RE.fullmatch(system) else ""
    offset_text = request.query.get("offset", "0")
    offset = int(offset_text) if offset_text.isascii() and offset_text.isdigit() and len(offset_text) < 9 else 0
    index = request.app[INDEX]
    scope = request.get(SCOPE_KEY)

    def keep(e: IndexEntry) -> bool:
        return (
            (scope is None or e.address.namespace in scope)
            and (not namespace or e.address.namespace == namespace)
            and (not system or e.address.system == system)
        )

    memo = ("ui", namespace, system, scope)
    catalog = request.app[CATALOG]
    if q:
        entries = index.search(q, keep, (*memo, catalog.downloads_version), catalog.downloads)
    else:
        entries = _published_order(index.listed(keep, memo, scope))
    visible = index.listed(lambda e: scope is None or e.address.namespace in scope, ("ui-all", scope), scope)
    shown = entries[offset : offset + PAGE_SIZE]
    params = {k: v for k, v in (("q", q), ("namespace", namespace), ("system", system)) if v}

    def page_url(at: int) -> str:
        return "/?" + urlencode({**params, "offset": at}) if at else ("/?" + urlencode(params) if params else "/")

    return _render(
        request,
        "index.html",
        modules=[{"entry": e, "downloads": catalog.downloads(e.address)} for e in shown],
        total=len(entries),
        q=q,
        namespace=namespace,
        system=system,
        namespaces=sorted({e.address.namespace for e in visible}),
        systems=sorted({e.address.system for e in visible}),
        previous=page_url(max(0, offset - PAGE_SIZE)) if offset > 0 else None,
        next=page_url(offset + PAGE_SIZE) if offset + PAGE_SIZE < len(entries) else None,
        first=offset + 1,
        last=offset + len(shown),
        complete=index.complete,
    )


async def module_page(request: web.Request) -> web.Response:
    """One module at its latest version, or at `{version}`."""
    m = request.match_info
    try:
        address = parse_address(m["namespace"], m["name"], m["system"])
        if "version" in m:
            check_version(m["version"])
    except GitregError:
        return _not_found(request, "There is no such module: the address is not a registry module address.")
    index = request.app[INDEX]
    entry = index.get(address)
    if entry is None or not _visible(request, address):
        return _not_found(request, f"No module {address} is listed by this registry.")
    version = entry.latest if "version" not in m else entry.find(m["version"])
    if version is None:
        return _not_found(request, f"Module {address} has no version {m['version']}.")
    pending = False
    try:
        request.app[REGISTRY].resolve(address)
        # From memory or disk, never git while rendering: a version not read yet is read in the
        # background and the page says so (and reloads itself in a moment).
        details: ModuleDetails | None = await index.stored_details(entry, version)
    except DetailsPending:
        details, pending = None, True
    except ModuleNotFound:
        return _not_found(request, f"No module {address} is listed by this registry.")
    except GitregError as e:
        return _render(request, "error.html", status=e.status, heading="Details unavailable", message=e.message)
    root = details.root if details else {}
    base = entry.path
    readme_html = render_readme(root.get("readme", ""), entry.source, version.tag, base) if details else ""
    submodules = details.submodules if details else []
    examples = details.examples if details else []
    systems = [
        e.address.system
        for e in index.listed(lambda e: e.address.namespace == address.namespace and e.address.name == address.name)
    ]
    return _render(
        request,
        "module.html",
        entry=entry,
        version=version,
        latest=entry.latest,
        versions=entry.versions,
        snippet=snippet(request, entry, version),
        readme=readme_html,
        root=root,
        submodules=[
            {
                **s,
                "readme_html": render_readme(
                    s.get("readme", ""), entry.source, version.tag, f"{base}/{s.get('path', '')}".strip("/")
                ),
            }
            for s in submodules
        ],
        examples=[
            {
                **s,
                "readme_html": render_readme(
                    s.get("readme", ""), entry.source, version.tag, f"{base}/{s.get('path', '')}".strip("/")
                ),
            }
            for s in examples
        ],
        downloads=request.app[CATALOG].downloads(address),
        systems=systems,
        published_at=(details.published_at if details else "")
        or (entry.published_at if version == entry.latest else ""),
        description=(details.description if details and version != entry.latest else entry.description),
        details_missing=details is None,
        details_pending=pending,
    )


async def login_form(request: web.Request) -> web.Response:
    """The login form (only with registry tokens configured)."""
    if not request.app[CONFIG].auth.enabled:
        raise web.HTTPFound("/")
    return _render(request, "login.html", next=_next_target(request.query.get("next", "/")), error="", logged_in=False)


def _next_target(value: str) -> str:
    """Only a path on this site (never `//evil.example` or a URL): an open redirect otherwise."""
    return value if value.startswith("/") and not value.startswith("//") and "\\" not in value else "/"


def _cross_site(request: web.Request, what: str) -> web.Response:
    """The 403 for a form POST that did not come from this registry's own page (CSRF)."""
    return _render(
        request,
        "error.html",
        status=403,
        heading="Refused",
        message=f"{what} must be sent from this registry's own page.",
        logged_in=False,
    )


async def login(request: web.Request) -> web.Response:
    """Check the token; set the session cookie."""
    config = request.app[CONFIG]
    if not config.auth.enabled:
        raise web.HTTPFound("/")
    if not same_origin(request):
        return _cross_site(request, "The login form")
    form = await request.post()
    presented = str(form.get("token", "")).strip()
    target = _next_target(str(form.get("next", "/")))
    matched = request.app[AUTH].find(presented) if presented else None
    if matched is None:
        return _render(
            request, "login.html", status=401, next=target, error="That token is not valid here.", logged_in=False
        )
    response = web.HTTPFound(target)
    response.set_cookie(
        COOKIE,
        request.app[SESSIONS].issue(token_id(matched)),
        max_age=SESSION_SECONDS,
        path="/",
        httponly=True,
        samesite="Strict",
        secure=request.secure,
    )
    raise response


async def logout(request: web.Request) -> web.Response:
    """Forget the session cookie."""
    if not same_origin(request):
        return _cross_site(request, "Logging out")
    response = web.HTTPFound("/login" if request.app[CONFIG].auth.enabled else "/")
    response.del_cookie(COOKIE, path="/")
    raise response


def _guarded(handler: Handler) -> Handler:
    async def page(request: web.Request) -> web.StreamResponse:
        return await ui_guard(request, handler)

    page.__doc__ = handler.__doc__
    return page


def add_ui(app: web.Application) -> None:
    """Register the pages (when `[ui] enabled`), the static files and the session signer."""
    config = app[CONFIG]
    if not config.ui.enabled:
        return
    key = config.auth.signing_key or secrets.token_hex(32)
    app[SESSIONS] = Sessions(key, config.auth.tokens)
    app.router.add_get("/", _guarded(index_page), name="ui-index")
    app.router.add_get("/modules/{namespace}/{name}/{system}", _guarded(module_page), name="ui-module")
    app.router.add_get("/modules/{namespace}/{name}/{system}/{version}", _guarded(module_page), name="ui-version")
    app.router.add_get("/login", login_form, name="ui-login-form")
    app.router.add_post("/login", login, name="ui-login")
    app.router.add_post("/logout", logout, name="ui-logout")
    app.router.add_static("/static/", HERE / "static", name="ui-static", append_version=True)


def is_page(request: web.Request) -> bool:
    """True for the browser pages and their static files (HTML errors, security headers)."""
    route = request.match_info.route
    name = route.name if route is not None else None
    return bool(name and name.startswith("ui-"))
