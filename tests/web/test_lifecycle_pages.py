"""`.gitreg.toml` (#35) in a version's details (API) and on its page: deprecated, revoked, malformed."""

from __future__ import annotations

import html

import pytest

from gitreg.core.names import ModuleAddress
from gitreg.registry.lifecycle import NOTHING
from gitreg.web.keys import REGISTRY
from tests.support.app import indexed_in_full, make_config, version_details
from tests.support.lifecycle import DEPRECATION, REVOKED_REASON, module_repo, rule
from tests.support.orgs import until

pytestmark = pytest.mark.slow  # real git over HTTP, the index
HELLO = ModuleAddress("demo", "hello", "null")


async def ready(client):
    """Indexed, and the module's .gitreg.toml read (in the background, after its tag list). With the
    index process `gitreg serve` runs, the serving process has no tag list of a module no one asked
    to install: a page's or details' first view fetches it in the background (RegistryService.
    declared_for), and the fetch reads the file; until then they say nothing of it."""
    await indexed_in_full(client)
    registry = client.app[REGISTRY]
    await until(lambda: registry.declared_for(HELLO) is not NOTHING, timeout=30)
    await registry.declarations.settled()
    return client


async def details(client, version: str) -> dict:
    resp = await version_details(client, f"/v1/modules/demo/hello/null/{version}")
    assert resp.status == 200, await resp.text()
    return await resp.json()


@pytest.mark.parametrize("download", ["git", "archive"])
async def test_version_details_say_deprecated_and_revoked_with_the_reason(serve_client, git_http, tmp_path, download):
    module_repo(tmp_path / "repos")
    client = await ready(await serve_client(make_config([rule(git_http.url("public.git"), download)])))
    deprecated = await details(client, "1.4.1")
    assert deprecated["deprecation"] == DEPRECATION and deprecated["revoked"] is None
    revoked = await details(client, "1.4.2")
    assert revoked["revoked"] == {"reason": REVOKED_REASON}
    current = await details(client, "2.0.0")
    assert current["deprecation"] is None and current["revoked"] is None and current["declaration_problem"] is None


async def page(client, version: str) -> str:
    resp = await client.get(f"/modules/demo/hello/null/{version}")
    text = await resp.text()
    assert resp.status == 200, text
    return html.unescape(text)


async def test_the_page_shows_a_banner_a_picker_badge_and_the_revoked_reason(serve_client, git_http, tmp_path):
    module_repo(tmp_path / "repos")
    client = await ready(await serve_client(make_config([rule(git_http.url("public.git"), "archive")])))
    text = await page(client, "1.4.1")
    assert 'id="deprecated-banner"' in text and DEPRECATION["reason"] in text
    assert f'href="{DEPRECATION["link"]}"' in text
    picker = text[text.index('<ul class="versions"') : text.index("</ul>", text.index('<ul class="versions"'))]
    assert '<span class="badge badge-deprecated">deprecated</span>' in picker
    assert '<span class="badge badge-revoked">revoked</span>' in picker
    text = await page(client, "1.4.2")
    assert 'id="revoked-banner"' in text and REVOKED_REASON in text and "is revoked" in text
    text = await page(client, "2.0.0")
    assert "banner" not in text.split("<article", 1)[1].split('<nav class="tabs"')[0]


async def test_a_malformed_file_is_said_on_the_page_and_in_the_details_never_a_500(serve_client, git_http, tmp_path):
    module_repo(tmp_path / "repos", declared='[[revoked]]\nversions = "= 1.4.2"\nreason = 42\n')
    client = await ready(await serve_client(make_config([rule(git_http.url("public.git"), "git")])))
    found = await details(client, "1.4.2")
    assert found["revoked"] is None
    assert "malformed and declares nothing" in found["declaration_problem"]
    assert "revoked[0].reason" in found["declaration_problem"]
    text = await page(client, "1.4.2")
    assert 'id="declaration-problem"' in text and "malformed and declares nothing" in text
