"""The module page's "Used by" tab: who sees which consumers and installs (names only where the Git host
says the reader can read the repository, counts for the rest).

A fake GitLab (its OAuth, API and repositories: alice reads acme/hello, bob acme/hello and acme/secret),
a fake CI issuer whose jobs install the module, the app real.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.app import indexed, make_config
from tests.support.oauth import CLIENT_ID, CLIENT_SECRET, FakeOAuthHost, git_host
from tests.support.oidc import AUDIENCE, FakeIssuer
from tests.support.pages import login
from tests.support.used_by import sign_in

STATIC = "static-token-for-automation-5b7c0e2a91"
PAGE = "/modules/demo/hello/null"


@pytest.fixture
def gitlab(tmp_path: Path) -> Iterator[FakeOAuthHost]:
    with git_host("gitlab", tmp_path / "gitlab") as fake:
        yield fake


@pytest.fixture
async def issuer() -> AsyncIterator[FakeIssuer]:
    fake = await FakeIssuer().start()
    yield fake
    await fake.close()


def used_by_config(tmp_path: Path, gitlab: FakeOAuthHost, issuer: FakeIssuer, download: str = "archive") -> Any:
    forge = {
        "provider": "gitlab",
        "url": gitlab.base_url,
        "api_url": gitlab.api_url,
        "oauth_client_id": CLIENT_ID,
        "oauth_client_secret": CLIENT_SECRET,
    }
    return make_config(
        [{**rule, "download": download} for rule in gitlab.rules()],
        storage={"path": str(tmp_path / "state")},
        auth={
            "tokens": [STATIC],
            "signing_key": "k" * 40,
            "forges": [forge],
            # The CI issuer is the Git host's own (GitLab CI): its jobs' projects are repositories there.
            "oidc": [{"issuer": issuer.issuer, "audience": AUDIENCE}],
        },
    )


async def ci_installs(client, issuer: FakeIssuer, *projects: str) -> None:
    for project in projects:
        token = issuer.sign(issuer.claims(project_path=project))
        resp = await client.get(
            "/v1/modules/demo/hello/null/1.0.0/download", headers={"Authorization": f"Bearer {token}"}
        )
        assert resp.status == 200, await resp.text()
    await indexed(client)


@pytest.mark.parametrize("download", ["git", "archive"])
async def test_a_signed_in_person_sees_the_installs_of_projects_they_can_read_and_counts_for_the_rest(
    make_client, tmp_path, gitlab, issuer, download
):
    client = await make_client(used_by_config(tmp_path, gitlab, issuer, download))
    await ci_installs(client, issuer, "acme/hello", "acme/secret")

    await sign_in(client, gitlab, "alice")
    page = await (await client.get(PAGE)).text()
    assert f'<a href="{gitlab.base_url}/acme/hello" rel="nofollow noopener noreferrer">acme/hello</a> installed' in page
    assert "<code>1.0.0</code>" in page
    assert "acme/secret" not in page
    assert "And 1 install by a project you cannot read." in page
    assert 'Observed installs <span class="n">(2)</span>' in page

    client.session.cookie_jar.clear()
    await sign_in(client, gitlab, "bob")
    page = await (await client.get(PAGE)).text()
    assert ">acme/hello</a> installed" in page and ">acme/secret</a> installed" in page
    assert "you cannot read" not in page


async def test_a_static_tokens_session_sees_counts_only(make_client, tmp_path, gitlab, issuer):
    client = await make_client(used_by_config(tmp_path, gitlab, issuer))
    await ci_installs(client, issuer, "acme/hello", "acme/secret")
    await login(client, STATIC)
    page = await (await client.get(PAGE)).text()
    assert 'href="#used-by"' in page
    assert "acme/hello</a>" not in page and "acme/secret" not in page
    assert "2 installs by projects you cannot read." in page
