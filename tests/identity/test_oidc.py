"""CI without stored secrets: a CI job's OIDC ID token (a JWT) is the registry token.

The issuer is a fake (tests/support/oidc.py: discovery and a JWKS of real RSA and EC keys, as
GitLab and GitHub Actions publish them); the verification is PyJWT's, the registry app real.
Every attack on the token is refused with the JSON error shape and a 401.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from gitreg.config.model import OidcConfig
from gitreg.config.parse import parse_config
from gitreg.core.errors import Unauthorized
from gitreg.identity.oidc import OidcIssuers
from gitreg.web.app import create_app
from tests.support.app import assert_error
from tests.support.githttp import GitHttpServer
from tests.support.oidc import AUDIENCE, FakeIssuer
from tests.support.repos import GitRepo


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def issuer() -> AsyncIterator[FakeIssuer]:
    fake = await FakeIssuer().start()
    yield fake
    await fake.close()


@pytest.fixture
def git(tmp_path: Path):
    root = tmp_path / "repos"
    for name in ("acme-vpc", "other-db"):
        repo = GitRepo(root, name)
        repo.commit({"main.tf": f"# {name}\n"})
        repo.tag("v1.0.0")
    with GitHttpServer(root) as server:
        yield server


def oidc_config(issuer: FakeIssuer, git: GitHttpServer, tmp_path: Path, **entry: Any) -> Any:
    return parse_config(
        {
            "git": {"protocols": ["http"]},
            "storage": {"path": str(tmp_path / "state")},
            "auth": {
                "oidc": [
                    {
                        "issuer": issuer.issuer,
                        "audience": AUDIENCE,
                        "namespaces": ["acme"],
                        "claims": {"namespace_path": "acme", "ref_protected": "true"},
                        **entry,
                    }
                ]
            },
            "modules": [
                {"namespace": "acme", "name": "vpc", "system": "aws", "repository": git.url("acme-vpc.git")},
                {"namespace": "other", "name": "db", "system": "aws", "repository": git.url("other-db.git")},
            ],
        }
    )


@pytest.fixture
async def client(issuer, git, tmp_path, aiohttp_client):
    return await aiohttp_client(create_app(oidc_config(issuer, git, tmp_path)))


VPC = "/v1/modules/acme/vpc/aws/versions"


@pytest.mark.parametrize("key", ["rsa", "ec"])
async def test_a_ci_jobs_id_token_opens_the_configured_namespaces(client, issuer, key):
    token = issuer.sign(issuer.claims(), key=key)
    resp = await client.get(VPC, headers=bearer(token))
    assert resp.status == 200, await resp.text()
    await assert_error(await client.get("/v1/modules/other/db/aws/versions", headers=bearer(token)), 403, "other")
    resp = await client.get("/v1/modules", headers=bearer(token))
    assert [m["id"].rsplit("/", 1)[0] for m in (await resp.json())["modules"]] in ([], ["acme/vpc/aws"])


def _attacks(issuer: FakeIssuer) -> dict[str, tuple[str, str]]:
    now = int(time.time())
    good = issuer.claims()
    return {
        "expired": (issuer.sign(issuer.claims(exp=now - 120, iat=now - 600, nbf=now - 600)), "expired"),
        "not yet valid": (issuer.sign(issuer.claims(nbf=now + 600)), "not valid yet"),
        "wrong aud": (issuer.sign(issuer.claims(aud="https://other.example")), "aud"),
        "no aud": (issuer.sign(issuer.claims(aud=None)), "aud"),
        "no exp": (issuer.sign(issuer.claims(exp=None)), "exp"),
        "other key": (issuer.sign(good, key="other"), "signature"),
        "unknown kid": (issuer.sign(good, key="other", kid="made-up"), "not signed by a key"),
        "alg none": (issuer.unsigned(good), "algorithm"),
        "HS256 with the public key": (issuer.hs256_with_public_key(good), "algorithm"),
        "RS256 header on the EC key": (issuer.sign(good, key="rsa", kid="ec-1"), "algorithm"),
        "claim mismatch": (issuer.sign(issuer.claims(namespace_path="evil")), "namespace_path"),
        "claim of the wrong type": (issuer.sign(issuer.claims(ref_protected=True)), "ref_protected"),
        "claim missing": (issuer.sign(issuer.claims(namespace_path=None)), "namespace_path"),
        "tampered payload": (_tampered(issuer), "signature"),
        "exp as a numeric string": (issuer.sign(issuer.claims(exp=str(now + 300))), "exp claim must be a number"),
        "nbf as a numeric string": (issuer.sign(issuer.claims(nbf=str(now - 5))), "nbf claim must be a number"),
        "iat as a numeric string": (issuer.sign(issuer.claims(iat=str(now))), "iat claim must be a number"),
    }


def _tampered(issuer: FakeIssuer) -> str:
    header, _, signature = issuer.sign(issuer.claims(namespace_path="evil")).split(".")
    payload = issuer.sign(issuer.claims()).split(".")[1]
    return f"{header}.{payload}.{signature}"  # a signature over other claims


async def test_every_attack_on_the_id_token_is_a_401_with_the_json_shape(client, issuer):
    for name, (token, fragment) in _attacks(issuer).items():
        resp = await client.get(VPC, headers=bearer(token))
        text = await assert_error(resp, 401)
        assert fragment in text, (name, text)
        assert resp.headers["WWW-Authenticate"].startswith("Bearer"), name
        assert token not in text


async def test_a_token_claiming_another_issuer_is_not_looked_at_as_oidc(client, issuer):
    token = issuer.sign(issuer.claims(iss="https://evil.example"))
    await assert_error(await client.get(VPC, headers=bearer(token)), 401, "issuer (iss) this registry does not trust")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_the_keys_are_fetched_once_and_an_unknown_kid_fetches_again_at_most_once_a_minute(
    issuer, git, tmp_path, aiohttp_client
):
    clock = Clock()
    client = await aiohttp_client(create_app(oidc_config(issuer, git, tmp_path), clock=clock))
    for _ in range(3):
        assert (await client.get(VPC, headers=bearer(issuer.sign(issuer.claims())))).status == 200
    assert issuer.counts == {"/.well-known/openid-configuration": 1, "/oauth/discovery/keys": 1}
    made_up = [issuer.sign(issuer.claims(), key="other", kid=f"new-{i}") for i in range(3)]
    for token in made_up:
        await assert_error(await client.get(VPC, headers=bearer(token)), 401)
    assert issuer.counts["/oauth/discovery/keys"] == 1  # within the minute of the last fetch: none
    clock.now += 61
    for token in made_up:
        await assert_error(await client.get(VPC, headers=bearer(token)), 401)
    # Made-up kids cost one refetch a minute, not one each.
    assert issuer.counts["/oauth/discovery/keys"] == 2
    # A key the issuer rotated in is found by that refetch.
    issuer.kids["other"] = "rotated-1"
    issuer.published.append("other")
    clock.now += 61
    assert (await client.get(VPC, headers=bearer(issuer.sign(issuer.claims(), key="other")))).status == 200


async def test_the_issuer_down_is_a_503_naming_it_asked_once_a_minute(issuer, git, tmp_path, aiohttp_client):
    clock = Clock()
    client = await aiohttp_client(create_app(oidc_config(issuer, git, tmp_path), clock=clock))
    issuer.mode = "down"
    for _ in range(20):  # anonymous JWTs, no keys yet: one discovery request, not one (or three) each
        resp = await client.get(VPC, headers=bearer(issuer.sign(issuer.claims(), kid=secrets.token_hex(4))))
        await assert_error(resp, 503, "CI issuer 127.0.0.1")
        assert 0 < int(resp.headers["Retry-After"]) <= 61
    assert issuer.counts == {"/.well-known/openid-configuration": 1}
    issuer.mode = "ok"
    clock.now += 61
    assert (await client.get(VPC, headers=bearer(issuer.sign(issuer.claims())))).status == 200


@pytest.mark.slow  # over a second (tests/ --durations)
async def test_a_rotated_key_is_fetched_within_the_minute_of_the_first_token_naming_it(issuer):
    entry = OidcConfig(issuer=issuer.issuer, audience=AUDIENCE)
    async with aiohttp.ClientSession() as http:
        issuers = OidcIssuers((entry,), lambda: http, refresh_seconds=1.0)  # a short "minute"
        try:
            assert (await issuers.principal(issuer.sign(issuer.claims()), entry)).kind == "oidc"
            with pytest.raises(Unauthorized):  # a made-up kid: refused, and spends nothing more
                await issuers.principal(issuer.sign(issuer.claims(), key="other", kid="made-up"), entry)
            issuer.kids["other"] = "rotated-1"
            issuer.published.append("other")
            rotated = issuer.sign(issuer.claims(), key="other")
            with pytest.raises(Unauthorized):  # within the "minute": not fetched at once...
                await issuers.principal(rotated, entry)
            assert issuer.counts["/oauth/discovery/keys"] == 1
            await asyncio.sleep(1.5)  # ...but at its end, with no token needed to ask again
            assert issuer.counts["/oauth/discovery/keys"] == 2
            assert (await issuers.principal(rotated, entry)).kind == "oidc"
        finally:
            issuers.close()


@pytest.mark.slow
async def test_a_jwks_uri_on_another_port_or_an_rsa_key_over_4096_bits_is_refused(
    issuer, git, tmp_path, aiohttp_client
):
    port = int(issuer.issuer.rsplit(":", 1)[1])
    issuer.jwks_host = f"http://127.0.0.1:{port + 1}"
    client = await aiohttp_client(create_app(oidc_config(issuer, git, tmp_path)))
    resp = await client.get(VPC, headers=bearer(issuer.sign(issuer.claims())))
    await assert_error(resp, 503, "CI issuer")
    assert issuer.counts.get("/oauth/discovery/keys") is None
    issuer.jwks_host = ""
    issuer.keys["other"] = rsa.generate_private_key(public_exponent=65537, key_size=4104)
    issuer.kids["other"] = "huge-1"
    issuer.published = ["other"]
    client = await aiohttp_client(create_app(oidc_config(issuer, git, tmp_path / "2")))
    resp = await client.get(VPC, headers=bearer(issuer.sign(issuer.claims(), key="other")))
    await assert_error(resp, 401, "not signed by a key")


async def test_a_jwks_uri_off_the_issuers_host_is_never_fetched(issuer, git, tmp_path, aiohttp_client):
    issuer.jwks_host = "http://localhost:9"
    client = await aiohttp_client(create_app(oidc_config(issuer, git, tmp_path)))
    resp = await client.get(VPC, headers=bearer(issuer.sign(issuer.claims())))
    assert resp.status in (401, 503)
    assert issuer.counts.get("/oauth/discovery/keys") is None


async def test_github_actions_tokens_match_their_claims_and_are_named_by_repository(
    issuer, git, tmp_path, aiohttp_client
):
    config = oidc_config(
        issuer, git, tmp_path, claims={"repository_owner": "acme", "job_workflow_ref": "acme/*@refs/heads/main"}
    )
    client = await aiohttp_client(create_app(config))
    claims = issuer.claims(
        namespace_path=None,
        project_path=None,
        repository="acme/infra",
        repository_owner="acme",
        job_workflow_ref="acme/infra/.github/workflows/plan.yml@refs/heads/main",
        sub="repo:acme/infra:ref:refs/heads/main",
    )
    assert (await client.get(VPC, headers=bearer(issuer.sign(claims)))).status == 200
    claims["job_workflow_ref"] = "acme/infra/.github/workflows/plan.yml@refs/heads/feature"
    await assert_error(await client.get(VPC, headers=bearer(issuer.sign(claims))), 401, "job_workflow_ref")


WORKFLOW = "acme/infra/.github/workflows/plan.yml"


async def test_a_main_only_workflow_glob_accepts_main_and_no_other_ref(issuer, git, tmp_path, aiohttp_client):
    # The README's GitHub example: `job_workflow_ref = "acme/*@refs/heads/main"`, "main only".
    claims = {"job_workflow_ref": "acme/*@refs/heads/main"}
    client = await aiohttp_client(create_app(oidc_config(issuer, git, tmp_path, claims=claims)))
    main = issuer.sign(issuer.claims(job_workflow_ref=f"{WORKFLOW}@refs/heads/main"))
    assert (await client.get(VPC, headers=bearer(main))).status == 200
    # git allows a branch named `feature@refs/heads/main`; a pull request's merge ref, likewise.
    for ref in ("refs/heads/feature@refs/heads/main", "refs/pull/7/merge@refs/heads/main"):
        other = issuer.sign(issuer.claims(job_workflow_ref=f"{WORKFLOW}@{ref}"))
        await assert_error(await client.get(VPC, headers=bearer(other)), 401, "job_workflow_ref")


async def test_a_claim_can_be_matched_exactly(issuer, git, tmp_path, aiohttp_client):
    claims = {"project_path": {"exact": "acme/*"}, "ref": "ma?n"}
    client = await aiohttp_client(create_app(oidc_config(issuer, git, tmp_path, claims=claims)))
    literal = issuer.sign(issuer.claims(project_path="acme/*"))
    assert (await client.get(VPC, headers=bearer(literal))).status == 200
    globbed = issuer.sign(issuer.claims(project_path="acme/infra"))  # what the glob `acme/*` would take
    await assert_error(await client.get(VPC, headers=bearer(globbed)), 401, "project_path")


@pytest.mark.slow  # waits out the 8 s the issuer is given
async def test_a_slow_issuer_is_a_503_before_terraform_gives_up(client, issuer):
    issuer.mode = "slow"
    started = time.monotonic()
    resp = await client.get(VPC, headers=bearer(issuer.sign(issuer.claims())))
    await assert_error(resp, 503, "CI issuer 127.0.0.1", "no answer within 8 s")
    assert time.monotonic() - started < 10
