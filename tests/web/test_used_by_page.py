"""The module page's "Used by" tab: who sees which consumers and installs (names only where the Git host
says the reader can read the repository, counts for the rest).

A fake GitLab (its API, its OAuth for the page sign-in) lists the org of tests/support/usage.py: the
module acme/vpc/aws and repositories calling it (alice reads app-frontend and platform-live, bob every
one); a fake CI issuer's jobs install the module; real git, the usage scan in its parse worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gitreg.web.keys import USAGE
from tests.support.app import indexed_in_full, make_config
from tests.support.forges import FakeForge
from tests.support.githttp import GitHttpServer
from tests.support.oauth import CLIENT_ID, CLIENT_SECRET, FakeOAuthHost
from tests.support.oidc import AUDIENCE, FakeIssuer
from tests.support.orgs import until
from tests.support.pages import login
from tests.support.usage import HOST, MODULE, add_to, consumer_org
from tests.support.used_by import sign_in

pytestmark = pytest.mark.slow  # several real repositories, fetched and parsed in a worker process

STATIC = "static-token-for-automation-5b7c0e2a91"
PAGE = "/modules/acme/vpc/aws"


@dataclass
class Org:
    host: FakeOAuthHost
    issuer: FakeIssuer


@pytest.fixture
async def org(tmp_path: Path) -> AsyncIterator[Org]:
    consumer_org(tmp_path / "repos")
    with GitHttpServer(tmp_path / "repos") as git:
        forge = FakeForge("gitlab", git, "acme")
        host = FakeOAuthHost(forge)  # (its pages are served by the forge: made before it starts)
        await forge.start()
        add_to(forge)
        forge.grant("alice", MODULE, "app-frontend", "platform-live")
        forge.grant("bob", MODULE, "app-frontend", "platform-live", "secret-app")
        issuer = await FakeIssuer().start()
        yield Org(host, issuer)
        await issuer.close()
        await forge.close()


def used_by_config(tmp_path: Path, org: Org, download: str = "archive", auth: bool = True) -> Any:
    sections: dict[str, Any] = {
        "server": {"public_url": f"https://{HOST}"},
        "storage": {"path": str(tmp_path / "state")},
        "usage": {"scan": True},
        "orgs": [
            {
                "provider": "gitlab",
                "api_url": org.host.api_url,
                "group": "acme",
                "namespace": "acme",
                "download": download,
            }
        ],
    }
    if auth:
        forge = {
            "provider": "gitlab",
            "url": org.host.base_url,
            "api_url": org.host.api_url,
            "oauth_client_id": CLIENT_ID,
            "oauth_client_secret": CLIENT_SECRET,
        }
        # The CI issuer is on the Git host's host (GitLab CI): its jobs' projects are repositories there.
        oidc = [{"issuer": org.issuer.issuer, "audience": AUDIENCE}]
        sections["auth"] = {"tokens": [STATIC], "signing_key": "k" * 40, "forges": [forge], "oidc": oidc}
    return make_config([], **sections)


async def scanned(client) -> None:
    usage = client.app[USAGE]
    await until(lambda: usage.passes >= 1 and usage.consumers("acme/vpc/aws"), timeout=60)
    await indexed_in_full(client)


async def ci_installs(client, issuer: FakeIssuer, *projects: str) -> None:
    for project in projects:
        token = issuer.sign(issuer.claims(project_path=project))
        headers = {"Authorization": f"Bearer {token}"}
        resp = await client.get("/v1/modules/acme/vpc/aws/1.4.2/download", headers=headers)
        assert resp.status == 200, await resp.text()


@pytest.mark.parametrize("download", ["git", "archive"])
async def test_a_signed_in_person_sees_the_consumers_and_installs_they_can_read_and_counts_for_the_rest(
    serve_client, tmp_path, org, download
):
    client = await serve_client(used_by_config(tmp_path, org, download))
    await scanned(client)
    await ci_installs(client, org.issuer, "acme/app-frontend", "acme/secret-app")

    await sign_in(client, org.host, "alice")
    page = await (await client.get(PAGE)).text()
    assert 'Used by <span class="n">(3)</span>' in page  # app-frontend, platform-live, secret-app
    frontend = page[page.index('href="https://gitlab.example.com/acme/app-frontend"') :]
    frontend = frontend[: frontend.index("</li>")]
    assert '>acme/app-frontend</a> <code class="muted">main.tf:4</code>' in frontend
    assert "<code>~&gt; 1.2</code>" in frontend and "<code>1.4.2</code>" in frontend
    assert "not on the latest major (2.x)" in frontend
    assert ">acme/platform-live</a>" in page and "secret-app" not in page
    assert "And 1 repository you cannot read calls this module." in page
    job = f'<a href="{org.host.base_url}/acme/app-frontend" rel="nofollow noopener noreferrer">acme/app-frontend</a>'
    assert f"{job} installed <code>1.4.2</code>" in page
    assert "And 1 install by a project you cannot read." in page

    client.session.cookie_jar.clear()
    await sign_in(client, org.host, "bob")
    page = await (await client.get(PAGE)).text()
    assert '>acme/secret-app</a> <code class="muted">main.tf:1</code>' in page
    assert ">acme/secret-app</a> installed <code>1.4.2</code>" in page
    assert "you cannot read" not in page


async def test_a_static_tokens_session_sees_counts_only(serve_client, tmp_path, org):
    client = await serve_client(used_by_config(tmp_path, org))
    await scanned(client)
    await ci_installs(client, org.issuer, "acme/app-frontend", "acme/secret-app")
    await login(client, STATIC)
    page = await (await client.get(PAGE)).text()
    assert 'Used by <span class="n">(3)</span>' in page
    assert "app-frontend" not in page and "secret-app" not in page and "platform-live" not in page
    assert "3 repositories you cannot read call this module (sign in with your Git host" in page
    assert "2 installs by projects you cannot read." in page


async def test_an_open_registrys_visitor_sees_counts_only(serve_client, tmp_path, org):
    client = await serve_client(used_by_config(tmp_path, org, auth=False))
    await scanned(client)
    page = await (await client.get(PAGE)).text()
    assert 'Used by <span class="n">(3)</span>' in page and "app-frontend" not in page
    assert "3 repositories you cannot read call this module" in page
    assert 'Observed installs <span class="n">(0)</span>' in page


async def test_the_consumers_api_names_the_installs_its_caller_can_read_and_counts_the_rest(
    serve_client, tmp_path, org
):
    carol = "glpat-carol-7Hq2Lm9Xv4Rz"
    org.host.forge.add_user("carol", carol, sees=(MODULE, "app-frontend"))
    client = await serve_client(used_by_config(tmp_path, org))
    await scanned(client)
    await ci_installs(client, org.issuer, "acme/app-frontend", "acme/secret-app")
    url = "/v1/modules/acme/vpc/aws/consumers"
    resp = await client.get(url, headers={"Authorization": f"Bearer {carol}"})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    [install] = body["installs"]
    assert install["project"] == "acme/app-frontend" and install["version"] == "1.4.2"
    assert install["url"] == f"{org.host.base_url}/acme/app-frontend" and install["at"].endswith("Z")
    assert body["installs_hidden"] == 1
    body = await (await client.get(url, headers={"Authorization": f"Bearer {STATIC}"})).json()
    assert body["installs"] == [] and body["installs_hidden"] == 2
