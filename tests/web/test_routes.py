"""Every route declares its rules where it is defined (web/route_rules.py), and they hold:
who may call it (open, a registry credential, a signed URL, a page session) and the priority of
its git work (what `terraform init` asks for goes first)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from aiohttp import hdrs, web
from aiohttp.test_utils import make_mocked_request

from gitreg.config.model import Config
from gitreg.git.pool import Priority
from gitreg.identity.door import NO_TOKEN
from gitreg.web.route_rules import Access
from gitreg.web.routing import ROUTES
from tests.support.app import make_config
from tests.support.repos import GitRepo

TOKEN = "routes-registry-token-51c2e7a9"
AUTH = {"tokens": [TOKEN], "signing_key": "r" * 40}
# A value for each placeholder of a route template, valid for its grammar.
SEGMENTS = {
    "namespace": "acme",
    "name": "vpc",
    "system": "aws",
    "version": "1.0.0",
    "path": "diagram.png",
    "type": "widget",
    "os": "linux",
    "arch": "amd64",
    "hostname": "registry.example.test",
    "filename": "terraform-provider-widget_1.0.0_linux_amd64.zip",
    "file": "style.css",
    "forge": "github",
    "rest": "a/b/c/d/e",
}


def archive_rule(repo: GitRepo) -> dict[str, object]:
    return {"namespace": "acme", "name": "vpc", "system": "aws", "repository": repo.url, "download": "archive"}


def unindexed(repo: GitRepo, tmp_path: Path) -> Config:
    """`gitreg serve`'s config with the index off: the routes and their rules do not depend on it,
    and no assertion below reads what it lists."""
    return make_config([archive_rule(repo)], auth=AUTH, storage={"path": str(tmp_path / "s")}, index={"enabled": False})


def registered(app: web.Application) -> list[web.AbstractRoute]:
    """The app's routes, a HEAD beside its GET and the catch-all left out (same handler, same rule)."""
    return [r for r in app.router.routes() if r.method not in (hdrs.METH_HEAD, hdrs.METH_ANY)]


async def test_every_registered_route_declares_its_rules(serve_client, repo, tmp_path):
    client = await serve_client(unindexed(repo, tmp_path))
    app = client.app
    rules = app[ROUTES].rules
    undeclared = [f"{r.method} {r.resource and r.resource.canonical}" for r in app.router.routes() if r not in rules]
    assert not undeclared, f"routes registered without a declared rule: {undeclared}"
    assert {rule.priority for rule in rules.values()} <= {Priority.INSTALL, Priority.BROWSE}

    # A route that says nothing is refused where it is registered.
    table = web.RouteTableDef()

    @table.get("/undeclared")
    async def undeclared_handler(request: web.Request) -> web.Response:
        return web.Response()

    with pytest.raises(ValueError, match="must declare access"):
        app[ROUTES].add(table)


async def test_each_route_asks_for_what_it_declares(serve_client, repo, tmp_path):
    """Without any credential, with registry auth on: a CREDENTIAL or SIGNED route answers 401
    naming the token, a SESSION page sends the browser to /login, an OPEN route lets it through."""
    client = await serve_client(unindexed(repo, tmp_path))
    seen = set()
    for route in registered(client.app):
        rule = client.app[ROUTES].rules[route]
        assert route.resource is not None
        path = route.resource.canonical.format_map(SEGMENTS)
        resp = await client.request(route.method, path, allow_redirects=False)
        text = (await resp.read()).decode(errors="replace")  # the favicon is no text
        where = f"{route.method} {route.resource.canonical} ({rule.access})"
        if rule.access in (Access.CREDENTIAL, Access.SIGNED):
            assert resp.status == 401 and NO_TOKEN in text, where
        elif rule.access is Access.SESSION:
            assert resp.status == 302 and resp.headers["Location"].startswith("/login?next="), where
        else:
            assert NO_TOKEN not in text and not resp.headers.get("Location", "").startswith("/login"), where
        seen.add(rule.access)
    assert seen == set(Access)


async def test_what_terraform_init_asks_for_runs_at_install_priority(serve_client, repo, tmp_path):
    """The requests a CLI makes for `terraform init` (shared/protocol/CLIENTS.md: discovery, then
    `{modules.v1}<ns>/<name>/<system>/versions`, then `.../<version>/download`, then the location
    it names), followed as the CLI follows them: each is served by a route at INSTALL priority,
    so installs never queue behind browsing."""
    client = await serve_client(unindexed(repo, tmp_path))
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    asked = ["/.well-known/terraform.json"]
    resp = await client.get(asked[-1], headers=bearer)
    assert resp.status == 200
    modules_v1 = urljoin(asked[-1], (await resp.json())["modules.v1"])
    asked.append(urljoin(modules_v1, "acme/vpc/aws/versions"))
    resp = await client.get(asked[-1], headers=bearer)
    assert resp.status == 200
    version = (await resp.json())["modules"][0]["versions"][0]["version"]
    asked.append(urljoin(modules_v1, f"acme/vpc/aws/{version}/download"))
    resp = await client.get(asked[-1], headers=bearer)
    assert resp.status == 200
    location = urljoin(asked[-1], resp.headers["X-Terraform-Get"])
    asked.append(urlsplit(location).path)
    resp = await client.get(location[location.index(asked[-1]) :])  # the package fetch: no token
    assert resp.status == 200
    for path in asked:
        match = await client.app.router.resolve(make_mocked_request("GET", path, app=client.app))
        rule = client.app[ROUTES].rules[match.route]
        assert rule.priority is Priority.INSTALL, f"{path} ({match.route.resource}) is at {rule.priority.name}"


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    r = GitRepo(tmp_path / "repos", "vpc")
    r.commit({"main.tf": 'output "v" { value = "1.0.0" }\n'})
    r.tag("v1.0.0")
    return r
