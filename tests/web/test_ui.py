"""The module browser's HTTP behaviour: headers, errors, sessions, CSRF, no git while rendering."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from gitreg.config.model import Config
from tests.support.app import GIT_PASSWORD, GIT_USER, assert_error, indexed_in_full, make_config, served_app
from tests.support.pages import TOKEN_ALL, login, origin, repos, rules
from tests.support.repos import GitRepo

TOKEN_ACME = "ui-token-acme-only-0123456789"


def open_config(tmp_path: Path) -> Config:
    return make_config(
        rules(repos(tmp_path)), storage={"path": str(tmp_path / "state")}, ui={"title": "Acme <modules>"}
    )


# The tests taking `open_client` only read what `gitreg serve` builds (its index process too): one
# app for the module, run on the module's event loop (`module_loop`).
module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def open_client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(served_app(open_config(tmp_path_factory.mktemp("ui"))))) as client:
        yield await indexed_in_full(client)


def auth_config(tmp_path: Path, index: bool = True) -> Config:
    """`index=False`: `gitreg serve`'s config with the index off, for the tests of signing in and out
    (the form, the redirects, the cookie), which read nothing the index lists."""
    return make_config(
        rules(repos(tmp_path)),
        storage={"path": str(tmp_path / "state")},
        auth={"tokens": [{"token": TOKEN_ACME, "namespaces": ["acme"]}, TOKEN_ALL], "signing_key": "s" * 40},
        index={"enabled": index},
    )


@pytest.fixture
async def auth_client(serve_client, tmp_path):
    return await indexed_in_full(await serve_client(auth_config(tmp_path)))


@pytest.fixture
async def unindexed_auth_client(serve_client, tmp_path):
    return await serve_client(auth_config(tmp_path, index=False))


@pytest.mark.slow
async def test_a_wildcard_rules_empty_browser_and_module_page_say_modules_appear_after_their_first_install(
    serve_client, tmp_path
):
    found = repos(tmp_path)
    template = found["vpc"].url.replace("/vpc.git", "/{name}.git")
    rule = {"namespace": "acme", "system": "aws", "repository": template}
    client = await indexed_in_full(await serve_client(make_config([rule], storage={"path": str(tmp_path / "state")})))
    text = html.unescape(await (await client.get("/")).text())
    assert "No modules." in text
    assert "Modules that a rule with wildcards (acme/*/aws) serves appear here after their first install" in text
    page = await client.get("/modules/acme/vpc/aws")
    said = html.unescape(await page.text())
    assert page.status == 404 and page.content_type == "text/html"
    assert "Module acme/vpc/aws is not listed yet: the rule acme/*/aws serves it" in said
    assert f'source = "{client.server.host}:{client.server.port}/acme/vpc/aws" installs it' in said
    # No rule serves it: the plain 404.
    other = html.unescape(await (await client.get("/modules/other/net/azurerm")).text())
    assert "No module other/net/azurerm is listed by this registry." in other
    # After its first install it is listed, and the note is gone.
    assert (await client.get("/v1/modules/acme/vpc/aws/versions")).status == 200
    await indexed_in_full(client)
    text = await (await client.get("/")).text()
    assert "acme/vpc/aws" in text and 'id="wildcard-note"' not in text


@pytest.mark.slow
async def test_no_page_starts_git(serve_client, tmp_path):
    open_client = await indexed_in_full(await serve_client(open_config(tmp_path)))
    (tmp_path / "repos" / "vpc.git").rename(tmp_path / "repos" / "moved.git")  # any git call would now fail
    for path in ("/", "/?q=net", "/?namespace=acme", "/modules/acme/vpc/aws", "/modules/acme/vpc/aws/1.0.0"):
        resp = await open_client.get(path)
        assert resp.status == 200, path


async def test_with_the_ui_disabled_the_root_is_404_and_the_api_works(serve_client, tmp_path):
    # The index off as well: the pages are not there, and the versions answer is not the index's.
    config = make_config(
        rules(repos(tmp_path)),
        storage={"path": str(tmp_path / "state")},
        ui={"enabled": False},
        index={"enabled": False},
    )
    client = await serve_client(config)
    await assert_error(await client.get("/"), 404)
    await assert_error(await client.get("/modules/acme/vpc/aws"), 404)
    assert (await client.get("/v1/modules/acme/vpc/aws/versions")).status == 200


async def test_pages_need_a_session_when_tokens_are_configured(unindexed_auth_client):
    client = unindexed_auth_client
    resp = await client.get("/modules/acme/vpc/aws", allow_redirects=False)
    assert resp.status == 302 and resp.headers["Location"] == "/login?next=/modules/acme/vpc/aws"
    # A registry token in the Authorization header is not a page session (pages are for browsers).
    resp = await client.get("/", headers={"Authorization": f"Bearer {TOKEN_ALL}"}, allow_redirects=False)
    assert resp.status == 302
    assert (await client.get("/login")).status == 200


async def test_a_session_cookie_is_signed_http_only_strict_and_shows_only_the_tokens_namespaces(auth_client):
    resp = await auth_client.post(
        "/login", data={"token": TOKEN_ACME, "next": "/"}, headers=origin(auth_client), allow_redirects=False
    )
    assert resp.status == 302 and resp.headers["Location"] == "/"
    cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Max-Age=" in cookie and "Path=/" in cookie
    assert TOKEN_ACME not in cookie
    text = await (await auth_client.get("/")).text()
    assert "acme/vpc/aws" in text and "other/net/azurerm" not in text
    assert (await auth_client.get("/modules/other/net/azurerm")).status == 404
    # A tampered cookie is no session.
    value = re.search(r"gitreg_session=([^;]+)", cookie).group(1)
    auth_client.session.cookie_jar.clear()
    auth_client.session.cookie_jar.update_cookies({"gitreg_session": value[:-2] + "xx"})
    assert (await auth_client.get("/", allow_redirects=False)).status == 302


async def test_login_and_logout_refuse_cross_site_posts(unindexed_auth_client):
    client = unindexed_auth_client
    for headers in ({}, {"Origin": "https://evil.example"}, {"Origin": "null"}, {"Referer": "https://evil.example/x"}):
        resp = await client.post("/login", data={"token": TOKEN_ALL}, headers=headers, allow_redirects=False)
        assert resp.status == 403 and "Set-Cookie" not in resp.headers, headers
    await login(client, TOKEN_ALL)
    resp = await client.post("/logout", headers={"Origin": "https://evil.example"}, allow_redirects=False)
    assert resp.status == 403
    assert (await client.get("/", allow_redirects=False)).status == 200  # still logged in
    resp = await client.post("/logout", headers=origin(client), allow_redirects=False)
    assert resp.status == 302
    assert (await client.get("/", allow_redirects=False)).status == 302


async def test_a_wrong_token_is_401_and_next_never_leaves_the_site(unindexed_auth_client):
    client = unindexed_auth_client
    resp = await client.post("/login", data={"token": "wrong-token-0000000000"}, headers=origin(client))
    assert resp.status == 401 and "not valid" in await resp.text()
    for target in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        resp = await client.post(
            "/login", data={"token": TOKEN_ALL, "next": target}, headers=origin(client), allow_redirects=False
        )
        assert resp.headers["Location"] == "/", target


@pytest.mark.slow
async def test_relative_readme_links_point_into_the_repository(serve_client, tmp_path):
    found = repos(tmp_path)
    config = make_config(
        [{**rules(found)[0], "clone_url": "git@gitlab.example.com:acme/terraform-aws-vpc.git"}],
        storage={"path": str(tmp_path / "state")},
    )
    client = await indexed_in_full(await serve_client(config))
    text = await (await client.get("/modules/acme/vpc/aws")).text()
    assert 'href="https://gitlab.example.com/acme/terraform-aws-vpc/-/blob/v1.0.0/docs/guide.md"' in text
    assert GIT_USER not in text and GIT_PASSWORD not in text


# --- The index's sort and page numbers; every path under the pages is a page -------------------


def dated_repos(tmp_path: Path) -> list[dict]:
    """Three modules whose name order, date order and download order all differ."""
    found = []
    for name, date in (
        ("alpha", "2024-03-01T00:00:00Z"),
        ("bravo", "2025-06-01T00:00:00Z"),
        ("charlie", "2023-01-01T00:00:00Z"),
    ):
        repo = GitRepo(tmp_path / "repos", name)
        repo.commit({"README.md": f"# {name}\n\nThe {name} module.\n", "main.tf": "# m\n"}, date=date)
        repo.tag("v1.0.0")
        found.append({"namespace": "acme", "name": name, "system": "aws", "repository": repo.url})
    return found


def listed_names(text: str) -> list[str]:
    return re.findall(r'<h2><a href="/modules/acme/([a-z0-9-]+)/aws">', text)


@pytest.mark.slow
async def test_the_index_sorts_by_newest_name_and_downloads(serve_client, tmp_path):
    config = make_config(dated_repos(tmp_path), storage={"path": str(tmp_path / "s")})
    client = await indexed_in_full(await serve_client(config))
    for _ in range(2):
        assert (await client.get("/v1/modules/acme/charlie/aws/1.0.0/download")).status == 200
    assert (await client.get("/v1/modules/acme/alpha/aws/1.0.0/download")).status == 200
    assert listed_names(await (await client.get("/")).text()) == ["bravo", "alpha", "charlie"]  # newest first
    assert listed_names(await (await client.get("/?sort=newest")).text()) == ["bravo", "alpha", "charlie"]
    assert listed_names(await (await client.get("/?sort=name")).text()) == ["alpha", "bravo", "charlie"]
    assert listed_names(await (await client.get("/?sort=downloads")).text()) == ["charlie", "alpha", "bravo"]
    # A search is best match first unless asked otherwise; an unknown sort is the default order.
    assert listed_names(await (await client.get("/?q=module&sort=name")).text()) == ["alpha", "bravo", "charlie"]
    text = await (await client.get("/?sort=<script>")).text()
    assert listed_names(text) == ["bravo", "alpha", "charlie"] and "<script>" not in text
    assert '<option value="downloads" selected>' in await (await client.get("/?sort=downloads")).text()


@pytest.mark.slow
async def test_the_index_has_page_numbers_that_keep_the_query(serve_client, tmp_path):
    repo = GitRepo(tmp_path / "repos", "many")
    repo.commit({"README.md": "# many\n\nOne of many.\n", "main.tf": "# m\n"})
    repo.tag("v1.0.0")
    rules = [{"namespace": "acme", "name": f"m{i:02d}", "system": "aws", "repository": repo.url} for i in range(95)]
    client = await indexed_in_full(await serve_client(make_config(rules, storage={"path": str(tmp_path / "s")})))
    text = await (await client.get("/?sort=name&offset=40")).text()
    assert listed_names(text)[0] == "m40" and "41\u201360 of 95 modules" in text
    numbers = re.findall(r'<a href="([^"]+)"(?: aria-current="page"| aria-label="Page \d+")>(\d+)</a>', text)
    assert [n for _, n in numbers] == ["1", "2", "3", "4", "5"]
    assert {n: url for url, n in numbers}["5"] == "/?sort=name&amp;offset=80"
    assert '<a href="/?sort=name&amp;offset=40" aria-current="page">3</a>' in text
    far = await (await client.get("/?sort=name&offset=0")).text()
    assert re.findall(r">(\d+|…)</(?:a|span)>\s*</li>", far) == ["1", "2", "3", "…", "5"]
    assert listed_names(await (await client.get("/?sort=name&offset=80")).text())[-1] == "m94"


def _host_note(text: str) -> str:
    found = re.search(r'<p class="note" id="source-host">(.*?)</p>', text, re.DOTALL)
    return html.unescape(found.group(1)) if found else ""


@pytest.mark.parametrize(
    ("server", "host", "says"),
    [
        ({}, "", "set [server] public_url"),
        ({"public_url": "https://registry.example.com"}, "registry.example.com", "([server] public_url)"),
        ({"registry_host": "tf.example.test"}, "tf.example.test", "([server] registry_host;"),
    ],
)
@pytest.mark.slow
async def test_a_page_reached_at_a_plain_http_address_says_which_host_to_install_from(
    serve_client, tmp_path, server, host, says
):
    # Terraform finds a registry over HTTPS only: a block naming this plain-HTTP address fails
    # as pasted ("server gave HTTP response to HTTPS client"), so the page says what to use.
    config = make_config(rules(repos(tmp_path)), storage={"path": str(tmp_path / "state")}, server=server)
    client = await indexed_in_full(await serve_client(config))
    reached = f"http://{client.server.host}:{client.server.port}"
    host = host or reached.removeprefix("http://")
    text = await (await client.get("/modules/acme/vpc/aws")).text()
    assert f"source  = &#34;{host}/acme/vpc/aws&#34;" in text
    note = _host_note(text)
    assert says in note and "HTTPS" in note, note
    assert (reached in note) == bool(server), note  # "not <this address>" once another host is named


@pytest.mark.slow
async def test_a_page_reached_at_public_url_says_nothing_of_hosts(serve_client, tmp_path):
    server = {"public_url": "http://registry.example.com"}
    config = make_config(rules(repos(tmp_path)), storage={"path": str(tmp_path / "state")}, server=server)
    client = await indexed_in_full(await serve_client(config))
    text = await (await client.get("/modules/acme/vpc/aws", headers={"Host": "registry.example.com"})).text()
    assert "source  = &#34;registry.example.com/acme/vpc/aws&#34;" in text and _host_note(text) == ""


@pytest.mark.slow
async def test_sources_are_copy_ready_with_the_public_host_and_served_dependencies_link(serve_client, tmp_path):
    from tests.support.realistic import labels_module, write_vpc_module

    vpc = GitRepo(tmp_path / "repos", "terraform-aws-vpc")
    write_vpc_module(vpc, "registry.example.com")
    vpc.tag("v5.4.0")
    labels = labels_module(tmp_path / "repos")
    rules = [
        {"namespace": "acme", "name": "vpc", "system": "aws", "repository": vpc.url},
        {"namespace": "acme", "name": "labels", "system": "null", "repository": labels.url},
    ]
    config = make_config(
        rules, storage={"path": str(tmp_path / "s")}, server={"public_url": "https://registry.example.com"}
    )
    client = await indexed_in_full(await serve_client(config))
    text = await (await client.get("/modules/acme/vpc/aws")).text()
    for source in ("acme/vpc/aws", "acme/vpc/aws//modules/flow-log", "acme/vpc/aws//examples/complete"):
        assert f"source  = &#34;registry.example.com/{source}&#34;\n  version = &#34;~&gt; 5.4&#34;" in text, source
    assert text.count('class="copy" data-copy=') == 1 + 2 + 2  # the module, two submodules, two examples
    assert '<a href="/modules/acme/labels/null">registry.example.com/acme/labels/null</a>' in text
    assert "terraform-aws-modules/vpc/aws//modules/vpc-endpoints</code>" in text  # not served here: no link
    # Required inputs first, then optional, with counts; a long default folds.
    assert text.index("Required inputs") < text.index("Optional inputs")
    assert (
        'Required inputs <span class="n">(3)</span>' in text and 'Optional inputs <span class="n">(27)</span>' in text
    )
    assert '<details class="value"><summary><code>[{&#34;self&#34;: true' in text


@pytest.mark.slow
async def test_the_version_picker_dates_each_version_from_gitregs_mirror(serve_client, tmp_path):
    """In archive mode gitreg keeps a mirror holding every tag: one read of it dates every version."""
    repo = GitRepo(tmp_path / "repos", "vpc")
    for version, day in (("1.0.0", "2025-01-02"), ("1.1.0", "2025-03-04"), ("2.0.0", "2025-05-06")):
        repo.commit({"main.tf": f"# {version}\n"}, date=f"{day}T10:00:00+00:00")
        repo.tag(f"v{version}")
    rule = {"namespace": "acme", "name": "vpc", "system": "aws", "repository": repo.url, "download": "archive"}
    client = await indexed_in_full(await serve_client(make_config([rule], storage={"path": str(tmp_path / "state")})))
    location = (await (await client.get("/v1/modules/acme/vpc/aws/1.0.0/download")).json())["location"]
    parts = urlsplit(location)
    assert (await client.get(f"{parts.path}?{parts.query}")).status == 200  # the archive is built from the mirror
    for shown in ("", "/1.1.0"):
        page = await (await client.get(f"/modules/acme/vpc/aws{shown}")).text()
        picker = page.split('<ul class="versions"', 1)[1].split("</ul>", 1)[0]
        dates = re.findall(r'<time datetime="([^"]+)">', picker)
        assert dates == ["2025-05-06T10:00:00Z", "2025-03-04T10:00:00Z", "2025-01-02T10:00:00Z"], shown


# --- the tests of the app built once for the module, last, as its event loop runs only while they
# do (paused longer than SILENCE_SECONDS, the serving process kills its index process) ---------------


@module_loop
async def test_every_page_carries_the_security_headers(open_client):
    for path in (
        "/",
        "/?q=vpc",
        "/modules/acme/vpc/aws",
        "/modules/acme/vpc/aws/1.0.0",
        "/modules/acme/nope/aws",
        "/static/style.css",
    ):
        resp = await open_client.get(path)
        csp = resp.headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "'unsafe-inline'" not in csp, path
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert resp.headers["Referrer-Policy"] == "same-origin"


@module_loop
async def test_the_title_is_configurable_and_escaped(open_client):
    text = await (await open_client.get("/")).text()
    assert "Acme &lt;modules&gt;" in text and "Acme <modules>" not in text


@module_loop
async def test_unknown_modules_and_versions_are_html_404_while_the_api_keeps_json(open_client):
    for path in (
        "/modules/acme/nope/aws",
        "/modules/acme/vpc/aws/9.9.9",
        "/modules/acme/vpc/aws/not-a-version",
        "/modules/Bad!/x/y",
    ):
        resp = await open_client.get(path)
        assert resp.status == 404 and resp.content_type == "text/html", path
    await assert_error(await open_client.get("/v1/modules/acme/nope/aws"), 404)


@module_loop
async def test_a_browser_asking_for_a_path_outside_modules_gets_the_html_404_and_api_clients_json(open_client):
    browser = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
    for path in ("/nothing-here", "/v1/nope", "/modules-x"):
        resp = await open_client.get(path, headers=browser)
        assert resp.status == 404 and resp.content_type == "text/html", path
        assert "There is no page at this address." in await resp.text()
        assert "default-src 'self'" in resp.headers["Content-Security-Policy"]
        await assert_error(await open_client.get(path), 404)  # curl, Terraform: the JSON shape
        await assert_error(await open_client.get(path, headers={"Accept": "application/json"}), 404)
    resp = await open_client.post("/healthz", headers=browser)  # another method: still 405
    assert resp.status == 405


@module_loop
async def test_every_path_under_the_pages_is_html(open_client):
    resp = await open_client.get("/modules/acme/vpc")  # a namespace/name: its systems
    text = await resp.text()
    assert resp.status == 200 and resp.content_type == "text/html"
    assert '<a href="/modules/acme/vpc/aws">acme/vpc/aws</a>' in text
    for path in ("/modules/acme/nope", "/modules/acme/vpc/aws/1.0.0/nothing/here", "/modules/Bad!/x"):
        resp = await open_client.get(path)
        assert resp.status == 404 and resp.content_type == "text/html", path
        assert "Content-Security-Policy" in resp.headers, path
    for path, target in (("/modules", "/"), ("/modules/", "/"), ("/modules/acme", "/?namespace=acme")):
        resp = await open_client.get(path, allow_redirects=False)
        assert resp.status == 302 and resp.headers["Location"] == target, path
    resp = await open_client.get("/favicon.ico")
    assert resp.status == 200 and resp.content_type == "image/vnd.microsoft.icon"
    assert (await resp.read())[:4] == b"\x00\x00\x01\x00"  # an ICO file
    text = await (await open_client.get("/")).text()
    assert '<link rel="icon" href="/static/favicon.svg"' in text
    svg = await open_client.get("/static/favicon.svg")
    assert svg.status == 200 and svg.content_type == "image/svg+xml"
