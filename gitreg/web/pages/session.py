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
import secrets
from urllib.parse import urlencode, urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler

from gitreg.config.model import ForgeAuthConfig
from gitreg.core.errors import GitregError
from gitreg.forges.host_oauth import HostGrant
from gitreg.identity.door import LoginFlows, Principal
from gitreg.web.auth import admit
from gitreg.web.keys import CONFIG, IDENTITY
from gitreg.web.origin import base_url, origin, public_origin, request_origin
from gitreg.web.pages.render import LOGGED_IN, SECURITY_HEADERS, render
from gitreg.web.signing import ExpiringSigner, SignatureError

COOKIE = "gitreg_session"
SESSION_SECONDS = 12 * 3600
# "Sign in with ...": a random value in this cookie, its digest in the flow's state, binds the
# host's callback to the browser that started the sign-in. SameSite=Lax: the callback is a
# top-level navigation from the Git host's site, on which a Strict cookie would not be sent.
NONCE_COOKIE = "gitreg_signin"
NONCE_SECONDS = 600


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


async def _principal_from_cookie(request: web.Request) -> tuple[bool, Principal | None]:
    """(logged in, principal) for a page request; (True, None) when the registry is open."""
    config = request.app[CONFIG]
    if not config.auth.enabled:
        return True, None
    found = request.app[SESSIONS].token_id(request.cookies.get(COOKIE))
    if found is None:
        return False, None
    # Not a secret: the signed cookie's MAC was checked above. None: expired, revoked, removed from
    # the config since, or the host refused its refresh.
    principal = await request.app[IDENTITY].session_caller(found)
    return (True, principal) if principal is not None else (False, None)


def guarded(handler: Handler) -> Handler:
    """`handler` behind the session: the visitor's scope from the cookie, a redirect to /login without one."""

    async def page(request: web.Request) -> web.StreamResponse:
        private = request.app[CONFIG].auth.enabled
        try:
            logged_in, principal = await _principal_from_cookie(request)
        except GitregError as e:  # the Git host is needed (a refresh) and unreachable
            return render(request, "error.html", status=e.status, heading="Unavailable", message=e.message)
        request[LOGGED_IN] = logged_in and private
        try:
            if not logged_in:
                target = request.path_qs if request.method == "GET" else "/"
                raise web.HTTPFound("/login?" + urlencode({"next": target}))
            await admit(request, principal)
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


def same_origin(request: web.Request) -> bool:
    """A form POST from our own pages: Origin (or Referer) names this registry (CSRF defence).

    This registry is `[server] public_url`'s origin when set, and the origin the browser sent
    the request to (`request_origin`): a browser sets Origin itself, so a page elsewhere
    cannot claim either.
    """
    sent = request.headers.get("Origin") or request.headers.get("Referer")
    if not sent or sent == "null":
        return False
    parts = urlsplit(sent)
    ours = {request_origin(request), public_origin(request)} - {None}
    return origin(parts.scheme, parts.netloc) in ours


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


def forge_title(forge: ForgeAuthConfig, forges: tuple[ForgeAuthConfig, ...]) -> str:
    """How a button names a host: "GitLab", or "GitLab (gitlab.example.com)" beside another GitLab."""
    name = {"gitlab": "GitLab", "github": "GitHub"}[forge.provider]
    alike = sum(1 for f in forges if f.provider == forge.provider)
    return name if alike == 1 else f"{name} ({forge.label.split(':', 1)[1]})"


def callback_url(request: web.Request) -> str:
    """gitreg's OAuth callback: `[server] public_url`'s, else the origin the browser used."""
    base = base_url(request)
    if base is None:  # a Host that is no host[:port]: nowhere safe to send the Git host back to
        raise web.HTTPBadRequest(reason="the Host header is not a host name; set [server] public_url")
    return f"{base.rstrip('/')}/oauth/callback"


def _login_page(request: web.Request, target: str, status: int = 200, error: str = "") -> web.Response:
    flows = request.app[IDENTITY].logins
    forges = flows.forges if flows is not None else ()
    signins = [
        {"title": forge_title(f, forges), "href": f"/login/with/{i}?" + urlencode({"next": target})}
        for i, f in enumerate(forges)
    ]
    return render(
        request,
        "login.html",
        status=status,
        next=target,
        error=error,
        logged_in=False,
        signins=signins,
        tokens=bool(request.app[CONFIG].auth.tokens),
    )


async def login_form(request: web.Request) -> web.Response:
    """The login form (only with registry auth configured): the token form, and "Sign in with ..." per host."""
    if not request.app[CONFIG].auth.enabled:
        raise web.HTTPFound("/")
    return _login_page(request, _next_target(request.query.get("next", "/")))


async def sign_in(request: web.Request) -> web.Response:
    """ "Sign in with ...": to the Git host's authorize page, this browser bound by a nonce cookie."""
    flows = request.app[IDENTITY].logins
    index = request.match_info["forge"]
    if flows is None or not index.isdigit() or int(index) >= len(flows.forges):
        raise web.HTTPNotFound()
    nonce = secrets.token_urlsafe(24)
    flow = LoginFlows.page_flow(_next_target(request.query.get("next", "/")), nonce)
    response = web.HTTPFound(flows.start(flows.forges[int(index)], callback_url(request), flow))
    response.set_cookie(
        NONCE_COOKIE,
        nonce,
        max_age=NONCE_SECONDS,
        path="/oauth/callback",
        httponly=True,
        samesite="Lax",
        secure=_secure(request),
    )
    raise response


async def signed_in(
    request: web.Request,
    forge: ForgeAuthConfig,
    username: str,
    grant: HostGrant,
    target: str,
    callback: str,
) -> web.Response:
    """The end of "Sign in with ...": a session token issued, its cookie set, on a page of our own.

    The browser came here from the Git host (a cross-site redirect chain), so a SameSite=Strict
    cookie would not be sent on a redirect from here: this small page takes the browser on (meta
    refresh, and a link) as a same-site navigation, which carries the new cookie.
    """
    issued = await request.app[IDENTITY].session_signed_in(forge, username, grant, SESSION_SECONDS, callback)
    response = render(request, "signed_in.html", refresh_to=_next_target(target), username=username, logged_in=False)
    _set_session(request, response, issued)
    response.del_cookie(NONCE_COOKIE, path="/oauth/callback")
    response.headers.update({**SECURITY_HEADERS, **_PRIVATE_HEADERS})
    return response


def _secure(request: web.Request) -> bool:
    """Cookies get `Secure` when the browser reached us over https (directly or through a trusted proxy)."""
    return (request_origin(request) or request.scheme).startswith("https")


def _set_session(request: web.Request, response: web.StreamResponse, payload: str) -> None:
    """The session cookie: signed, expiring, HttpOnly, SameSite=Strict, Secure over https."""
    response.set_cookie(
        COOKIE,
        request.app[SESSIONS].issue(payload),
        max_age=SESSION_SECONDS,
        path="/",
        httponly=True,
        samesite="Strict",
        secure=_secure(request),
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
    session = request.app[IDENTITY].session_for(presented)
    if session is None:
        return _login_page(request, target, 401, "That token is not valid here.")
    response = web.HTTPFound(target)
    _set_session(request, response, session)
    raise response


async def logout(request: web.Request) -> web.Response:
    """Forget the session cookie."""
    if not same_origin(request):
        return _cross_site(request, "Logging out")
    found = request.app[SESSIONS].token_id(request.cookies.get(COOKIE))
    if found is not None:
        await request.app[IDENTITY].session_ended(found)  # a session's issued token dies with the cookie
    response = web.HTTPFound("/login" if request.app[CONFIG].auth.enabled else "/")
    response.del_cookie(COOKIE, path="/")
    raise response
