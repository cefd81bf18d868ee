"""Fake GitHub and GitLab REST APIs: they cannot run here, so these small aiohttp apps stand in.

They answer the endpoints org mode uses with payloads shaped like the real ones (field names
from GitHub's "List organization repositories" and GitLab's "List a group's projects"), in
real pages (`Link` with `rel="next"`, GitLab's `X-Next-Page`, `X-Total`...), with real
rate-limit headers, and can answer "rate limited" or "down" on demand. Their clone URLs point
at real bare repositories served over real smart HTTP (tests/support/githttp.py). Every
request is recorded. A fake runs in the test's event loop (`await start()`) or in a thread of
its own (`with fake.in_thread():`) for a gitreg running as a subprocess.
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import unquote, urlencode

from aiohttp import web

from tests.support.githttp import GitHttpServer
from tests.support.releases import FakeStorage, ReleasesMixin

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_IDS = itertools.count(1296269)
_USER_IDS = itertools.count(583231)
# The person a request's token belongs to (None: the org's own token, or none).
_USER = web.RequestKey("fake_user", str)
GITHUB_DOCS = "https://docs.github.com/rest/repos/repos#list-organization-repositories"


@dataclass(frozen=True)
class ApiRequest:
    """One request the fake API saw."""

    method: str
    path: str  # as sent, percent-encoding kept
    query: str
    headers: dict[str, str]
    status: int


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class FakeServer:
    """A fake's aiohttp app on 127.0.0.1 (a free port): in the test's event loop (`await start()`) or
    in a thread with its own loop (`with fake.in_thread():`, for a gitreg subprocess)."""

    _runner: web.AppRunner | None = None
    base_url = ""
    # The host name in its URLs: "localhost" puts it on another site than a gitreg on 127.0.0.1
    # (SameSite compares sites: scheme and host, not ports). It listens on 127.0.0.1 either way.
    host_name = "127.0.0.1"

    def app(self) -> web.Application:
        """The fake's aiohttp application."""
        raise NotImplementedError

    async def start(self) -> Self:
        """Serve in the running event loop."""
        await self.serve()
        return self

    async def serve(self) -> str:
        """Listen on a free port of 127.0.0.1; the base URL."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://{self.host_name}:{self._runner.addresses[0][1]}"
        return self.base_url

    async def close(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @contextmanager
    def in_thread(self) -> Iterator[Self]:
        """Serve from a thread with its own event loop; stopped on leaving."""
        loop = asyncio.new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as e:  # noqa: BLE001 - reported to the starting thread
                failure.append(e)
                started.set()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self.close())
            loop.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        started.wait(10)
        if failure:
            raise failure[0]
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)


class FakeForge(ReleasesMixin, FakeServer):
    """A fake GitHub (`provider="github"`) or GitLab (`"gitlab"`) API for one org or group (and its
    repositories' releases: tests/support/releases.py)."""

    def __init__(
        self,
        provider: str,
        git: GitHttpServer,
        group: str,
        *,
        token: str | None = None,
        max_per_page: int = 100,
        user: bool = False,
        link_header: bool = True,
        api_path: str = "",
    ) -> None:
        assert provider in ("github", "gitlab")
        self.provider = provider
        self.git = git
        self.group = group
        self.token = token
        self.max_per_page = max_per_page  # real hosts honour per_page up to 100; smaller makes pages with few repos
        self.user = user  # GitHub: the group is a user account (/orgs/<it> answers 404)
        self.link_header = link_header  # GitLab: send Link besides X-Next-Page
        # GitHub: "/api/v3" is GitHub Enterprise Server's API, "" github.com's; GitLab: the path the whole
        # host is served under ("/gitlab": its API at /gitlab/api/v4, its projects' pages below /gitlab/).
        self.api_path = api_path
        self.mode = "ok"  # "ok", "down": every request answers 503, or "hang": no answer for 12 s
        self.delay = 0.0  # seconds a listing page takes to arrive (its content is taken when asked)
        # (method, path prefix) -> seconds any such request waits before it is answered (`stall`)
        self.stalls: dict[tuple[str, str], float] = {}
        self.hold_page: int | None = None  # listing pages from this one on are held back (hold, release)
        self._released = asyncio.Event()
        self.started = 0  # requests received so far, answered or not
        self.org_id = 9919
        # Hostile hosts: a `next` link to send instead of the real one, a rate-limit reset (epoch
        # seconds) to announce instead of the real one, and bytes of extra fields per repository
        # object (a real GitHub object carries ~6 KB of *_url fields; this makes pages of megabytes).
        self.next_link: str | None = None
        self.reset_at: int | None = None
        self.item_padding = 0
        self._rate_limited = 0  # how many of the next listing requests answer "rate limited"
        self._rate_seconds = 1
        self._remaining = 5000
        self._lock = threading.Lock()
        self._repos: dict[str, dict[str, Any]] = {}  # name -> API object
        # People (identity tests): their tokens, and which repositories (by this fake's key) each may see.
        self._users: dict[str, str] = {}  # token -> username
        self._sees: dict[str, set[str]] = {}  # username -> repository keys
        self._requests: list[ApiRequest] = []
        # The host's web pages beside its API (its OAuth, tests/support/oauth.py): no API token, no rate limit.
        self._web_pages: dict[tuple[str, str], Handler] = {}
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    # ---- the org's repositories ---------------------------------------------------------

    @property
    def api_url(self) -> str:
        """The `api_url` of an `[[orgs]]` entry for this fake."""
        return f"{self.base_url}{self.api_path}" if self.provider == "github" else f"{self.base_url}{self.gitlab_api}"

    def add(
        self,
        name: str,
        *,
        topics: tuple[str, ...] = (),
        archived: bool = False,
        description: str = "",
        subgroup: str = "",
        repo: str | None = None,
        pushed: float | None = None,
        key: str | None = None,
        rid: int | None = None,
    ) -> dict[str, Any]:
        """List repository `name`, cloned from the git server's `<repo or name>.git`; its API object.

        `key`: how this fake names it (default `name`: two subgroups may hold one name); `rid`:
        its id (default the next one: a repository transferred in from elsewhere is older).
        """
        now = time.time() if pushed is None else pushed
        clone = self.git.url(f"{repo or name}.git")
        rid = next(_IDS) if rid is None else rid
        with self._lock:
            if self.provider == "github":
                obj = self._github_object(rid, name, clone, topics, archived, description, now)
            else:
                obj = self._gitlab_object(rid, name, clone, topics, archived, description, now, subgroup)
            self._repos[key or name] = obj
            return json.loads(json.dumps(obj))

    def remove(self, name: str) -> dict[str, Any]:
        """Delete a repository; its last API object."""
        with self._lock:
            return self._repos.pop(name)

    def rename(self, old: str, new: str) -> dict[str, Any]:
        """Rename a repository (same git repository behind it); its new API object."""
        with self._lock:
            obj = self._repos.pop(old)
            if self.provider == "github":
                full = f"{self.group}/{new}"
                obj.update(
                    name=new,
                    full_name=full,
                    html_url=f"https://github.com/{full}",
                    ssh_url=f"git@github.com:{full}.git",
                )
            else:
                parent = obj["path_with_namespace"].rsplit("/", 1)[0]
                obj.update(
                    name=new,
                    path=new,
                    path_with_namespace=f"{parent}/{new}",
                    web_url=f"https://gitlab.example.com/{parent}/{new}",
                    ssh_url_to_repo=f"git@gitlab.example.com:{parent}/{new}.git",
                    updated_at=_iso(time.time()),
                )
            self._repos[new] = obj
            return json.loads(json.dumps(obj))

    def update(self, name: str, **fields: Any) -> dict[str, Any]:
        """Change fields of a repository's API object as the host would describe it (archived, a
        hostile clone_url...); its new API object."""
        with self._lock:
            self._repos[name].update(fields)
            return json.loads(json.dumps(self._repos[name]))

    def touch(self, name: str, when: float | None = None) -> None:
        """A push: move the repository's push marker (GitHub pushed_at; GitLab updated_at)."""
        with self._lock:
            key = "pushed_at" if self.provider == "github" else "updated_at"
            self._repos[name][key] = _iso(time.time() if when is None else when)

    def _github_object(
        self, rid: int, name: str, clone: str, topics: tuple[str, ...], archived: bool, description: str, now: float
    ) -> dict[str, Any]:
        full = f"{self.group}/{name}"
        owner_type = "User" if self.user else "Organization"
        return {
            "id": rid,
            "node_id": f"R_kgDO{rid}",
            "name": name,
            "full_name": full,
            "private": True,
            "owner": {
                "login": self.group,
                "id": self.org_id,
                "type": owner_type,
                "html_url": f"https://github.com/{self.group}",
            },
            "html_url": f"https://github.com/{full}",
            "description": description or None,
            "fork": False,
            "url": f"{self.base_url}/repos/{full}",
            "git_url": f"git://github.com/{full}.git",
            "ssh_url": f"git@github.com:{full}.git",
            "clone_url": clone,
            "svn_url": f"https://github.com/{full}",
            "homepage": None,
            "size": 108,
            "stargazers_count": 0,
            "watchers_count": 0,
            "language": "HCL",
            "default_branch": "main",
            "open_issues_count": 0,
            "is_template": False,
            "topics": list(topics),
            "has_issues": True,
            "archived": archived,
            "disabled": False,
            "visibility": "private",
            "pushed_at": _iso(now),
            "created_at": _iso(now - 86400),
            "updated_at": _iso(now),
            "permissions": {"admin": False, "push": False, "pull": True},
        }

    def _gitlab_object(
        self,
        rid: int,
        name: str,
        clone: str,
        topics: tuple[str, ...],
        archived: bool,
        description: str,
        now: float,
        subgroup: str,
    ) -> dict[str, Any]:
        namespace = f"{self.group}/{subgroup}".strip("/")
        full = f"{namespace}/{name}"
        return {
            "id": rid,
            "description": description or None,
            "name": name,
            "name_with_namespace": full.replace("/", " / "),
            "path": name,
            "path_with_namespace": full,
            "created_at": _iso(now - 86400),
            "default_branch": "main",
            "tag_list": list(topics),
            "topics": list(topics),
            "ssh_url_to_repo": f"git@gitlab.example.com:{full}.git",
            "http_url_to_repo": clone,
            "web_url": f"https://gitlab.example.com/{full}",
            "readme_url": f"https://gitlab.example.com/{full}/-/blob/main/README.md",
            "avatar_url": None,
            "forks_count": 0,
            "star_count": 0,
            "last_activity_at": _iso(now),
            "updated_at": _iso(now),
            "namespace": {
                "id": 58,
                "name": namespace.rsplit("/", 1)[-1],
                "path": namespace.rsplit("/", 1)[-1],
                "kind": "group",
                "full_path": namespace,
                "parent_id": None,
                "web_url": f"https://gitlab.example.com/groups/{namespace}",
            },
            "empty_repo": False,
            "archived": archived,
            "visibility": "private",
        }

    # ---- people: tokens and per-user visibility -----------------------------------------

    def add_user(self, username: str, token: str, sees: tuple[str, ...] = ()) -> None:
        """A person whose `token` (a PAT: `glpat-...`, `ghp_...`) the API accepts; they see `sees` only."""
        with self._lock:
            self._users[token] = username
            self._sees.setdefault(username, set()).update(sees)

    def grant(self, username: str, *keys: str) -> None:
        """Add the person to these repositories (by this fake's key)."""
        with self._lock:
            self._sees.setdefault(username, set()).update(keys)

    def serve_page(self, method: str, path: str, handler: Handler) -> None:
        """Serve one of the host's web pages (not its API) at `path`: before start()."""
        self._web_pages[(method, path)] = handler

    def revoke(self, username: str, *keys: str) -> None:
        """Remove the person from these repositories: the API answers 404 for them from now on."""
        with self._lock:
            self._sees[username].difference_update(keys)

    def revoke_token(self, token: str) -> None:
        """The person revoked their token: 401 from now on."""
        with self._lock:
            self._users.pop(token, None)

    def _user_of(self, request: web.Request) -> str | None:
        return request.get(_USER)

    def _visible(self, request: web.Request, key: str) -> bool:
        user = self._user_of(request)
        with self._lock:
            return user is None or key in self._sees.get(user, set())

    async def _user(self, request: web.Request) -> web.Response:
        # GitLab "Get the current user" / GitHub "Get the authenticated user".
        user = self._user_of(request)
        if user is None:
            body = {"message": "Bad credentials"} if self.provider == "github" else {"message": "401 Unauthorized"}
            return web.json_response(body, status=401)
        if self._installation(request):  # an App installation token has no user behind it
            return web.json_response(
                {
                    "message": "Resource not accessible by integration",
                    "documentation_url": "https://docs.github.com/rest/users/users#get-the-authenticated-user",
                    "status": "403",
                },
                status=403,
            )
        uid = next(_USER_IDS)
        if self.provider == "github":
            return web.json_response(
                {
                    "login": user,
                    "id": uid,
                    "node_id": f"U_kgDO{uid}",
                    "type": "User",
                    "site_admin": False,
                    "name": user.title(),
                    "html_url": f"https://github.com/{user}",
                }
            )
        return web.json_response(
            {
                "id": uid,
                "username": user,
                "name": user.title(),
                "state": "active",
                "locked": False,
                "web_url": f"https://gitlab.example.com/{user}",
                "bot": False,
            }
        )

    def _installation(self, request: web.Request) -> bool:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        return self.provider == "github" and token.startswith("ghs_")

    async def _installation_repos(self, request: web.Request) -> web.Response:
        # "List repositories accessible to the app installation": an object holding the page's list.
        if self._user_of(request) is None or not self._installation(request):
            return web.json_response({"message": "Bad credentials"}, status=401)
        found = self._sorted(request)
        return web.json_response({"total_count": len(found), "repository_selection": "selected", "repositories": found})

    async def _member_repos(self, request: web.Request) -> web.Response:
        # GitLab `GET /projects?membership=true`, GitHub `GET /user/repos`: what the person is a member of.
        if self._user_of(request) is None:
            return web.json_response({"message": "401 Unauthorized"}, status=401)
        return await self._page(request, self._sorted(request))

    # ---- webhook payloads (the shapes GitHub and GitLab send) ---------------------------

    def github_repository_event(self, action: str, name: str, **changes: Any) -> dict[str, Any]:
        """A GitHub organization webhook `repository` event for repository `name` (as listed now, or just removed)."""
        with self._lock:
            repo = json.loads(json.dumps(self._repos.get(name) or {}))
        payload: dict[str, Any] = {
            "action": action,
            "repository": repo,
            "organization": {"login": self.group, "id": self.org_id, "url": f"{self.base_url}/orgs/{self.group}"},
            "sender": {"login": "octocat", "id": 1, "type": "User"},
        }
        if changes:
            payload["changes"] = changes
        return payload

    def gitlab_system_hook(
        self,
        event_name: str,
        name: str,
        old_path_with_namespace: str | None = None,
        project: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A GitLab system hook about project `name` (as listed now, or `project` when it is gone)."""
        with self._lock:
            obj = project or self._repos[name]
            payload = {
                "created_at": obj["created_at"],
                "updated_at": obj["updated_at"],
                "event_name": event_name,
                "name": obj["name"],
                "owner_email": "johnsmith@example.com",
                "owner_name": "John Smith",
                "owners": [{"name": "John", "email": "user1@example.com"}],
                "path": obj["path"],
                "path_with_namespace": obj["path_with_namespace"],
                "project_id": obj["id"],
                "project_visibility": "private",
            }
        if old_path_with_namespace is not None:
            payload["old_path_with_namespace"] = old_path_with_namespace
        return payload

    # ---- behaviour ----------------------------------------------------------------------

    def hold(self, page: int) -> None:
        """Hold listing pages from `page` on back until release() (a host slow to page through an org)."""
        self._released = asyncio.Event()
        self.hold_page = page

    def release(self) -> None:
        """Answer the held pages."""
        self.hold_page = None
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._released.set)

    def stall(self, method: str, path_prefix: str, seconds: float) -> None:
        """Answer every `method` request whose path starts with `path_prefix` only after `seconds` (a host
        slow on one endpoint: its token endpoint, can-read, a listing); 0 answers them at once again."""
        with self._lock:
            if seconds > 0:
                self.stalls[(method, path_prefix)] = seconds
            else:
                self.stalls.pop((method, path_prefix), None)

    def rate_limit_next(self, count: int = 1, seconds: int = 1) -> None:
        """Answer the next `count` listing requests "rate limited", resetting in `seconds`."""
        with self._lock:
            self._rate_limited = count
            self._rate_seconds = seconds

    def requests(self, path_contains: str = "") -> list[ApiRequest]:
        """The requests seen so far (whose path contains `path_contains`)."""
        with self._lock:
            return [r for r in self._requests if path_contains in r.path]

    def reset_counters(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self._requests.clear()

    def _record(self, request: web.Request, status: int) -> None:
        with self._lock:
            self._requests.append(
                ApiRequest(
                    request.method,
                    request.raw_path.partition("?")[0],
                    request.query_string,
                    dict(request.headers),
                    status,
                )
            )

    def _authorized(self, request: web.Request) -> bool:
        presented = request.headers.get("PRIVATE-TOKEN") or request.headers.get("Authorization", "").removeprefix(
            "Bearer "
        )
        with self._lock:
            user = self._users.get(presented)
        if user is not None:
            request[_USER] = user
            return True
        if self.token is None:
            return True
        if self.provider == "github":
            return request.headers.get("Authorization") == f"Bearer {self.token}"
        return (
            request.headers.get("PRIVATE-TOKEN") == self.token
            or request.headers.get("Authorization") == f"Bearer {self.token}"
        )

    def _rate_headers(self, remaining: int) -> dict[str, str]:
        reset = self.reset_at if self.reset_at is not None else int(time.time()) + self._rate_seconds
        if self.provider == "github":
            return {
                "X-RateLimit-Limit": "5000",
                "X-RateLimit-Remaining": str(remaining),
                "X-RateLimit-Reset": str(reset),
                "X-RateLimit-Used": str(5000 - remaining),
                "X-RateLimit-Resource": "core",
            }
        return {
            "RateLimit-Name": "throttle_authenticated_api",
            "RateLimit-Limit": "2000",
            "RateLimit-Observed": str(2000 - remaining),
            "RateLimit-Remaining": str(remaining),
            "RateLimit-Reset": str(reset),
            "RateLimit-ResetTime": email.utils.formatdate(reset, usegmt=True),
        }

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        with self._lock:
            self.started += 1
        if self.mode == "hang":  # accepted, then nothing: a host stuck behind its load balancer
            await asyncio.sleep(12)  # longer than gitreg waits for one answer (8 s), short for teardown
        with self._lock:
            stalled = [s for (m, p), s in self.stalls.items() if m == request.method and request.path.startswith(p)]
        if stalled:
            await asyncio.sleep(max(stalled))
        if self.mode == "down":
            response: web.StreamResponse = web.Response(
                status=503, text="<html><body>503 Service Unavailable</body></html>", content_type="text/html"
            )
        elif (request.method, request.path) in self._web_pages:
            response = await handler(request)
        elif not self._authorized(request):
            body = (
                {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}
                if self.provider == "github"
                else {"message": "401 Unauthorized"}
            )
            response = web.json_response(body, status=401)
        else:
            with self._lock:
                limited = self._rate_limited > 0
                if limited:
                    self._rate_limited -= 1
                else:
                    self._remaining = max(1, self._remaining - 1)
                remaining = self._remaining
            if limited:
                headers = self._rate_headers(0)
                if self.provider == "github":
                    # The primary limit: 403 with x-ratelimit-remaining 0 and the reset time.
                    response = web.json_response(
                        {
                            "message": "API rate limit exceeded for installation ID 1.",
                            "documentation_url": "https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting",
                        },
                        status=403,
                        headers=headers,
                    )
                else:
                    headers["Retry-After"] = str(self._rate_seconds)
                    response = web.Response(status=429, text="Retry later\n", headers=headers)
            else:
                response = await handler(request)
                response.headers.update(self._rate_headers(remaining))
        self._record(request, response.status)
        return response

    async def _page(self, request: web.Request, items: list[dict[str, Any]]) -> web.Response:
        per_page = min(int(request.query.get("per_page", "30")), self.max_per_page)
        page = max(1, int(request.query.get("page", "1")))
        pages = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        if self.item_padding:
            chunk = [{**item, "custom_properties": {"padding": "x" * self.item_padding}} for item in chunk]
        headers: dict[str, str] = {}
        if self.provider == "github":
            # GitHub's links name the org by id, not by the login the client asked for.
            base = (
                f"{self.api_url}/organizations/{self.org_id}/repos"
                if not self.user
                else f"{self.api_url}/user/{self.org_id}/repos"
            )
            query = {k: v for k, v in request.query.items() if k != "page"}
            links = []
            if page < pages:
                links += [
                    f'<{base}?{urlencode({**query, "page": page + 1})}>; rel="next"',
                    f'<{base}?{urlencode({**query, "page": pages})}>; rel="last"',
                ]
            if page > 1:
                links += [
                    f'<{base}?{urlencode({**query, "page": page - 1})}>; rel="prev"',
                    f'<{base}?{urlencode({**query, "page": 1})}>; rel="first"',
                ]
            if links:
                headers["Link"] = ", ".join(links)
            if self.next_link is not None and page < pages:
                headers["Link"] = f'<{self.next_link}>; rel="next"'
        else:
            query = {k: v for k, v in request.query.items() if k != "page"}
            url = f"{self.base_url}{request.raw_path.partition('?')[0]}"
            headers.update(
                {
                    "X-Page": str(page),
                    "X-Per-Page": str(per_page),
                    "X-Total": str(len(items)),
                    "X-Total-Pages": str(pages),
                    "X-Next-Page": str(page + 1) if page < pages else "",
                    "X-Prev-Page": str(page - 1) if page > 1 else "",
                }
            )
            if self.link_header:
                links = []
                if page < pages:
                    links.append(f'<{url}?{urlencode({**query, "page": page + 1})}>; rel="next"')
                links += [
                    f'<{url}?{urlencode({**query, "page": 1})}>; rel="first"',
                    f'<{url}?{urlencode({**query, "page": pages})}>; rel="last"',
                ]
                headers["Link"] = ", ".join(links)
            if self.next_link is not None and page < pages:
                headers["Link"] = f'<{self.next_link}>; rel="next"'
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.hold_page is not None and page >= self.hold_page:
            await self._released.wait()
        return web.json_response(chunk, headers=headers)

    def _sorted(self, request: web.Request | None = None) -> list[dict[str, Any]]:
        """Every repository by id; for a person's token, only those they see."""
        user = self._user_of(request) if request is not None else None
        with self._lock:
            sees = self._sees.get(user, set()) if user is not None else None
            found = [obj for key, obj in self._repos.items() if sees is None or key in sees]
            return json.loads(json.dumps(sorted(found, key=lambda r: r["id"])))

    async def _github_org_repos(self, request: web.Request) -> web.Response:
        org = request.match_info["org"]
        if self.user or org.lower() != self.group.lower():
            return web.json_response({"message": "Not Found", "documentation_url": GITHUB_DOCS}, status=404)
        return await self._page(request, self._sorted(request))

    async def _github_org_repos_by_id(self, request: web.Request) -> web.Response:
        if request.match_info["id"] != str(self.org_id):
            return web.json_response({"message": "Not Found"}, status=404)
        return await self._page(request, self._sorted(request))

    async def _github_user_repos(self, request: web.Request) -> web.Response:
        if not self.user or request.match_info["user"].lower() != self.group.lower():
            return web.json_response({"message": "Not Found", "documentation_url": GITHUB_DOCS}, status=404)
        return await self._page(request, self._sorted(request))

    async def _github_repository(self, request: web.Request) -> web.Response:
        # "Get a repository": GET /repos/{owner}/{repo}, 404 when it does not exist (or is not visible).
        full = f"{request.match_info['owner']}/{request.match_info['repo']}".lower()
        with self._lock:
            found = [(key, obj) for key, obj in self._repos.items() if obj["full_name"].lower() == full]
        for key, obj in found:
            if self._visible(request, key):
                return web.json_response(obj)
        return web.json_response({"message": "Not Found", "documentation_url": GITHUB_DOCS}, status=404)

    async def _gitlab_group_projects(self, request: web.Request) -> web.Response:
        # The group's full path arrives URL-encoded (`platform%2Fterraform`): read it raw.
        raw = request.raw_path.partition("?")[0].removeprefix(f"{self.gitlab_api}/groups/").removesuffix("/projects")
        group = unquote(raw)
        if "/" in raw or group.lower() != self.group.lower():
            return web.json_response({"message": "404 Group Not Found"}, status=404)
        items = self._sorted(request)
        if request.query.get("include_subgroups") != "true":
            items = [p for p in items if p["namespace"]["full_path"] == self.group]
        return await self._page(request, items)

    async def _gitlab_project(self, request: web.Request) -> web.Response:
        raw = request.raw_path.partition("?")[0].removeprefix(f"{self.gitlab_api}/projects/")
        key = unquote(raw)
        with self._lock:
            found = [(k, o) for k, o in self._repos.items() if key in (str(o["id"]), o["path_with_namespace"])]
        for name, obj in found:
            if self._visible(request, name):
                return web.json_response(obj)
        return web.json_response({"message": "404 Project Not Found"}, status=404)

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(middlewares=[self._middleware])
        self.add_release_routes(app)
        if self.provider == "github":
            api = self.api_path
            app.router.add_get(f"{api}/orgs/{{org}}/repos", self._github_org_repos)
            app.router.add_get(f"{api}/organizations/{{id}}/repos", self._github_org_repos_by_id)
            app.router.add_get(f"{api}/users/{{user}}/repos", self._github_user_repos)
            app.router.add_get(f"{api}/user/{{id}}/repos", self._github_org_repos_by_id_user)
            app.router.add_get(f"{api}/repos/{{owner}}/{{repo}}", self._github_repository)
            app.router.add_get(f"{api}/user", self._user)
            app.router.add_get(f"{api}/user/repos", self._member_repos)
            app.router.add_get(f"{api}/installation/repositories", self._installation_repos)
        else:
            api = self.gitlab_api
            app.router.add_get(f"{api}/groups/{{group:.+}}/projects", self._gitlab_group_projects)
            app.router.add_get(f"{api}/projects/{{project:.+}}", self._gitlab_project)
            app.router.add_get(f"{api}/user", self._user)
            app.router.add_get(f"{api}/projects", self._member_repos)
        for (method, path), page in self._web_pages.items():
            app.router.add_route(method, path, page)
        # Another service on the API's host, outside its path (where a hostile `next` link may point).
        app.router.add_get("/elsewhere/{tail:.*}", self._elsewhere)
        return app

    async def _elsewhere(self, request: web.Request) -> web.Response:
        return web.json_response([])

    async def _github_org_repos_by_id_user(self, request: web.Request) -> web.Response:
        if not self.user or request.match_info["id"] != str(self.org_id):
            return web.json_response({"message": "Not Found"}, status=404)
        return await self._page(request, self._sorted(request))

    # ---- running ------------------------------------------------------------------------

    async def start(self) -> FakeForge:
        """Serve on 127.0.0.1 (a free port) in the running event loop."""
        self._loop = asyncio.get_running_loop()
        await self.serve()
        return self


@asynccontextmanager
async def releasing_github(git: GitHttpServer, token: str) -> AsyncIterator[FakeForge]:
    """A fake GitHub for the org "acme" whose release assets are on a fake storage host (its asset
    API redirects there, as GitHub's does); both stopped at the end."""
    fake = await FakeForge("github", git, "acme", token=token).start()
    fake.storage = await FakeStorage().start()
    try:
        yield fake
    finally:
        await fake.storage.close()
        await fake.close()
