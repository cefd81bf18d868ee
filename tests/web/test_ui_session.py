"""The pages' session edge: `next` stays on this site, signed-in pages are private, login behind a proxy."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.app import indexed_in_full, make_config
from tests.support.pages import TOKEN_ALL, login, origin, repos, rules


def auth_config(tmp_path: Path, index: bool = True, **server: object) -> object:
    """`index=False`: `gitreg serve`'s config with the index off, for the tests of signing in (its
    form, its redirect, its cookie), which read nothing the index lists."""
    return make_config(
        rules(repos(tmp_path)),
        storage={"path": str(tmp_path / "state")},
        auth={"tokens": [TOKEN_ALL], "signing_key": "s" * 40},
        index={"enabled": index},
        **({"server": server} if server else {}),
    )


@pytest.mark.parametrize(
    "target",
    ["/\t/evil.example", "/\n/evil.example", "//evil", "/\\evil", "https://evil", "/\x00x", "\t//evil.example"],
)
async def test_next_after_login_is_only_a_path_on_this_site(serve_client, tmp_path, target):
    client = await serve_client(auth_config(tmp_path, index=False))
    resp = await client.post(
        "/login", data={"token": TOKEN_ALL, "next": target}, headers=origin(client), allow_redirects=False
    )
    assert resp.status == 302 and resp.headers["Location"] == "/", repr(target)
    form = await (await client.get("/login", params={"next": target})).text()
    assert "evil" not in form


async def test_next_after_login_keeps_a_path_with_its_query(serve_client, tmp_path):
    client = await serve_client(auth_config(tmp_path, index=False))
    resp = await client.post(
        "/login",
        data={"token": TOKEN_ALL, "next": "/modules/acme/vpc/aws?x=1"},
        headers=origin(client),
        allow_redirects=False,
    )
    assert resp.headers["Location"] == "/modules/acme/vpc/aws?x=1"


@pytest.mark.slow
async def test_pages_shown_to_a_signed_in_person_are_private_and_vary_on_the_cookie(serve_client, tmp_path):
    client = await indexed_in_full(await serve_client(auth_config(tmp_path)))
    await login(client, TOKEN_ALL)
    for path in ("/", "/?q=vpc", "/modules/acme/vpc/aws", "/modules/acme/nope/aws"):
        resp = await client.get(path, allow_redirects=False)
        assert resp.status in (200, 404), path
        assert resp.headers["Cache-Control"] == "private, no-store", path
        assert "Cookie" in resp.headers.getall("Vary"), path


async def test_login_behind_a_tls_proxy_with_public_url(serve_client, tmp_path):
    client = await serve_client(auth_config(tmp_path, index=False, public_url="https://registry.example.com"))
    resp = await client.post(
        "/login",
        data={"token": TOKEN_ALL, "next": "/"},
        headers={"Origin": "https://registry.example.com"},
        allow_redirects=False,
    )
    assert resp.status == 302 and "gitreg_session=" in resp.headers["Set-Cookie"]
    resp = await client.post(
        "/login", data={"token": TOKEN_ALL}, headers={"Origin": "https://evil.example"}, allow_redirects=False
    )
    assert resp.status == 403


async def test_login_behind_a_trusted_proxy_honours_its_forwarded_headers(serve_client, tmp_path):
    client = await serve_client(auth_config(tmp_path, index=False, trusted_proxies=["127.0.0.0/8", "::1"]))
    forwarded = {
        "Origin": "https://registry.example.com",
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "registry.example.com",
    }
    resp = await client.post("/login", data={"token": TOKEN_ALL}, headers=forwarded, allow_redirects=False)
    assert resp.status == 302
    assert "Secure" in resp.headers["Set-Cookie"]  # the browser is on https


async def test_forwarded_headers_from_an_untrusted_address_are_ignored(serve_client, tmp_path):
    client = await serve_client(auth_config(tmp_path, index=False, trusted_proxies=["10.0.0.0/8"]))
    for headers in (
        {
            "Origin": "https://registry.example.com",
            "X-Forwarded-Proto": "https",
            "X-Forwarded-Host": "registry.example.com",
        },
        {"Origin": f"https://{client.server.host}:{client.server.port}", "X-Forwarded-Proto": "https"},
    ):
        resp = await client.post("/login", data={"token": TOKEN_ALL}, headers=headers, allow_redirects=False)
        assert resp.status == 403, headers
