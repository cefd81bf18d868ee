"""`terraform login`'s endpoints (login.v1) and the Git host's OAuth callback.

- `GET /oauth/authorize`: Terraform's request, checked (identity/oauth.py), then the browser goes
  to the Git host's authorize page; with several OAuth hosts, a page lets the person pick one.
- `GET /oauth/callback`: the host sends the browser back here; the code is exchanged
  server-side, and the browser goes on to Terraform's localhost listener with a one-time code
  (or, for a page sign-in, to the pages with a session: pages/session.py).
- `POST /oauth/token`: Terraform redeems its code with its PKCE verifier for a registry token.

These paths are open (no registry token: they are how one is had). A refusal is the JSON error
shape with OAuth's own `error` code beside `errors`; nothing is issued.
"""

from __future__ import annotations

import base64
import binascii
from urllib.parse import unquote, urlencode

from aiohttp import web

from gitreg.core.errors import GitregError
from gitreg.git.pool import Priority
from gitreg.identity.door import LoginFlows, LoginRefused, check_terraform_request
from gitreg.web.errors import error_response
from gitreg.web.keys import IDENTITY
from gitreg.web.pages.render import SECURITY_HEADERS, render
from gitreg.web.pages.session import NONCE_COOKIE, callback_url, forge_title, signed_in
from gitreg.web.route_rules import Access

oauth_routes = web.RouteTableDef()
# Nothing here may be kept by a cache: each answer is one person's.
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


def _flows(request: web.Request) -> LoginFlows:
    flows = request.app[IDENTITY].logins
    if flows is None:
        raise web.HTTPNotFound()  # no [[auth.forges]] entry has an OAuth application
    return flows


def _refused(e: GitregError) -> web.Response:
    """The JSON error shape, with OAuth's `error` code beside it."""
    code = e.error if isinstance(e, LoginRefused) else "temporarily_unavailable"
    return error_response(e.status, e.message, {**_NO_STORE, **_retry_after(e)}, oauth_error=code)


def _retry_after(e: GitregError) -> dict[str, str]:
    retry = getattr(e, "retry_after", None)
    return {"Retry-After": str(retry)} if retry is not None else {}


@oauth_routes.get("/oauth/authorize", access=Access.OPEN, priority=Priority.BROWSE)
async def authorize(request: web.Request) -> web.StreamResponse:
    """Terraform's authorize request: checked, then on to the Git host (or a page to pick one)."""
    flows = _flows(request)
    try:
        checked = check_terraform_request(request.query)
    except LoginRefused as e:
        return _refused(e)
    chosen = request.query.get("forge")
    forge = flows.forge(chosen)
    if forge is None and chosen is not None:
        return _refused(LoginRefused("invalid_request", "forge names no Git host with OAuth here"))
    if forge is None:  # several hosts: the person picks one
        query = {k: v for k, v in request.query.items() if k != "forge"}
        choices = [
            {"title": forge_title(f, flows.forges), "href": "/oauth/authorize?" + urlencode({**query, "forge": f.url})}
            for f in flows.forges
        ]
        response = render(request, "signin_pick.html", choices=choices, logged_in=False)
        response.headers.update({**SECURITY_HEADERS, **_NO_STORE})
        return response
    raise web.HTTPFound(flows.start(forge, callback_url(request), flows.terraform_flow(checked)), headers=_NO_STORE)


@oauth_routes.get("/oauth/callback", access=Access.OPEN, priority=Priority.BROWSE)
async def callback(request: web.Request) -> web.StreamResponse:
    """The host's answer: its code exchanged server-side, then Terraform's localhost URL (or the pages)."""
    flows = _flows(request)
    if "error" in request.query:  # the person declined on the host's page
        return _refused(LoginRefused("access_denied", "the Git host did not grant access (declined on its page?)", 401))
    try:
        flow = flows.open_state(request.query.get("state", ""))
        page = "tf" not in flow
        if page and not flows.page_nonce_matches(flow, request.cookies.get(NONCE_COOKIE)):
            raise LoginRefused("invalid_request", "this sign-in was started in another browser; start it again")
        forge, username, grant = await flows.exchange(flow, request.query.get("code", ""))
        if not page:
            raise web.HTTPFound(flows.terraform_code(flow, username, grant), headers=_NO_STORE)
        return await signed_in(request, forge, username, grant, str(flow["page"]["next"]), str(flow["callback"]))
    except GitregError as e:  # LoginRefused, or the host unreachable (503)
        return _refused(e)


def _client_id(request: web.Request, form_client: str | None) -> str | None:
    """The client id: the form's, or (Terraform's oauth2 library tries this first) HTTP Basic's user."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return form_client
    try:
        user = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[0]
    except (binascii.Error, UnicodeDecodeError):
        return None
    return unquote(user)


@oauth_routes.post("/oauth/token", access=Access.OPEN, priority=Priority.BROWSE)
async def token(request: web.Request) -> web.Response:
    """Terraform redeems its one-time code (with its PKCE verifier) for a registry token."""
    flows = _flows(request)
    form = await request.post()
    client = form.get("client_id")
    try:
        issued, seconds = await flows.redeem(form, _client_id(request, client if isinstance(client, str) else None))
    except GitregError as e:
        return _refused(e)
    body = {"access_token": issued, "token_type": "bearer", "expires_in": int(seconds)}
    return web.json_response(body, headers=_NO_STORE)
