"""Logging in to the pages: a registry token, once, for a signed, expiring session cookie.

With registry tokens configured, every page needs a session; the cookie names which token
logged in (by `token_id`, never the token) and the visitor sees what that token may read.
The cookie is `<token id>.<expires>.<signature>` on the one expiring signer (signing.py),
under a key derived from `[auth] signing_key` for sessions alone. Login and logout are form
POSTs from our own pages only (Origin or Referer checked: the CSRF defence), and `next` is
only ever a path on this site.
"""

from __future__ import annotations

import hashlib
import ipaddress
from urllib.parse import urlencode, urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler

from gitreg.web.auth import SCOPE_KEY, token_id
from gitreg.web.keys import AUTH, CONFIG
from gitreg.web.pages.render import LOGGED_IN, render
from gitreg.web.signing import ExpiringSigner, SignatureError

COOKIE = "gitreg_session"
SESSION_SECONDS = 12 * 3600


class Sessions:
    """A signed, expiring cookie naming which registry token logged in (by its digest, never the token)."""

    def __init__(self, key: str) -> None:
        # A key of its own, so no session cookie's signature is ever an archive URL's.
        derived = hashlib.sha256(b"gitreg-ui-session\0" + key.encode()).digest()
        self._signer = ExpiringSigner(derived, SESSION_SECONDS, "{payload}.{expires}")

    def issue(self, token_id: str, now: float | None = None) -> str:
        """The cookie value for a logged-in token, valid SESSION_SECONDS."""
        expires, signature = self._signer.sign(token_id, now)
        return f"{token_id}.{expires}.{signature}"

    def token_id(self, value: str | None, now: float | None = None) -> str | None:
        """The token id a valid, unexpired cookie names, else None."""
        if not value or value.count(".") != 2:
            return None
        token_id, expires, signature = value.split(".")
        try:
            self._signer.verify(token_id, expires, signature, now)
        except SignatureError:
            return None
        return token_id


SESSIONS = web.AppKey("ui_sessions", Sessions)
# What a page behind a session answers depends on who asks: no shared cache may keep it.
_PRIVATE_HEADERS = {"Cache-Control": "private, no-store", "Vary": "Cookie"}


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


def guarded(handler: Handler) -> Handler:
    """`handler` behind the session: the visitor's scope from the cookie, a redirect to /login without one."""

    async def page(request: web.Request) -> web.StreamResponse:
        logged_in, scope = _scope_from_cookie(request)
        private = request.app[CONFIG].auth.enabled
        request[LOGGED_IN] = logged_in and private
        try:
            if not logged_in:
                target = request.path_qs if request.method == "GET" else "/"
                raise web.HTTPFound("/login?" + urlencode({"next": target}))
            request[SCOPE_KEY] = scope
            response = await handler(request)
        except web.HTTPException as e:
            if private:
                e.headers.update(_PRIVATE_HEADERS)
            raise
        if private:  # a handler's own private caching stays (files: immutable per commit, in this browser only)
            for name, value in _PRIVATE_HEADERS.items():
                response.headers.setdefault(name, value)
        return response

    page.__doc__ = handler.__doc__
    return page


def _origin(scheme: str, netloc: str) -> str:
    """`scheme://host[:port]`, lowercased, without the scheme's default port (as browsers send Origin)."""
    scheme, netloc = scheme.lower(), netloc.lower()
    default = {"http": ":80", "https": ":443"}.get(scheme)
    if default and netloc.endswith(default):
        netloc = netloc[: -len(default)]
    return f"{scheme}://{netloc}"


def _from_trusted_proxy(request: web.Request) -> bool:
    """The connection comes from an address in `[server] trusted_proxies`."""
    proxies = request.app[CONFIG].server.trusted_proxies
    if not proxies or not request.remote:
        return False
    try:
        peer = ipaddress.ip_address(request.remote)
    except ValueError:
        return False  # a Unix socket: no address to trust
    return any(peer in ipaddress.ip_network(p, strict=False) for p in proxies)


def browser_origin(request: web.Request) -> str:
    """The origin the browser sent this request to: this connection's, or, from a trusted
    proxy, its `X-Forwarded-Proto`/`X-Forwarded-Host` (a TLS-terminating proxy talks http to us)."""
    scheme, host = request.scheme, request.host
    if _from_trusted_proxy(request):
        # A chain of proxies appends: the first value is what the browser used.
        scheme = request.headers.get("X-Forwarded-Proto", scheme).split(",")[0].strip() or scheme
        host = request.headers.get("X-Forwarded-Host", host).split(",")[0].strip() or host
    return _origin(scheme, host)


def same_origin(request: web.Request) -> bool:
    """A form POST from our own pages: Origin (or Referer) names this registry (CSRF defence).

    This registry is `[server] public_url`'s origin when set, and the origin the browser sent
    the request to (`browser_origin`): a browser sets Origin itself, so a page elsewhere
    cannot claim either.
    """
    origin = request.headers.get("Origin") or request.headers.get("Referer")
    if not origin or origin == "null":
        return False
    parts = urlsplit(origin)
    ours = {browser_origin(request)}
    public = request.app[CONFIG].server.public_url
    if public:
        ours.add(_origin(*urlsplit(public)[:2]))
    return _origin(parts.scheme, parts.netloc) in ours


def _next_target(value: str) -> str:
    """Only a path on this site, else `/` (an open redirect otherwise).

    Browsers drop TABs and newlines from a URL and read a backslash as a slash, so
    `/<TAB>/evil.example` or `/\\evil.example` would be `//evil.example`: a path starting with
    one slash, not two, with no backslash and no unprintable character, and no scheme or host.
    """
    if not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    if not value.isprintable():
        return "/"  # TAB, CR, LF and every other control or separator character
    parts = urlsplit(value)
    return "/" if parts.scheme or parts.netloc else value


def _cross_site(request: web.Request, what: str) -> web.Response:
    """The 403 for a form POST that did not come from this registry's own page (CSRF)."""
    return render(
        request,
        "error.html",
        status=403,
        heading="Refused",
        message=f"{what} must be sent from this registry's own page.",
        logged_in=False,
    )


async def login_form(request: web.Request) -> web.Response:
    """The login form (only with registry tokens configured)."""
    if not request.app[CONFIG].auth.enabled:
        raise web.HTTPFound("/")
    return render(request, "login.html", next=_next_target(request.query.get("next", "/")), error="", logged_in=False)


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
        return render(
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
        secure=browser_origin(request).startswith("https:"),
    )
    raise response


async def logout(request: web.Request) -> web.Response:
    """Forget the session cookie."""
    if not same_origin(request):
        return _cross_site(request, "Logging out")
    response = web.HTTPFound("/login" if request.app[CONFIG].auth.enabled else "/")
    response.del_cookie(COOKIE, path="/")
    raise response
