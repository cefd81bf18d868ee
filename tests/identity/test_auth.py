"""Registry authentication and scopes, end to end: which token opens what, and what a scoped token never sees.

The repositories sit behind a real smart-HTTP git server whose request log shows whether a
refused request reached git; the last tests run the real Terraform CLI over TLS with
`TF_TOKEN_<host>` and a `credentials` block.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from gitreg.config.parse import parse_config
from gitreg.core.errors import ConfigError
from tests.support.app import assert_error, indexed, make_config, served_app
from tests.support.githttp import GitHttpServer
from tests.support.process import GitregProcess
from tests.support.repos import GitRepo
from tests.support.terraform import clean_env, cli_config
from tests.support.tls import write_tls_files

ADMIN = "admin-registry-token-5e8c1b7a"  # a plain string: every namespace
CI = "ci-registry-token-0d94f2c6e1"  # from ${CI_TOKEN}, scoped to acme and platform
AUDIT = "audit-registry-token-a7730be4"  # stored hashed, scoped to other
NOBODY = "empty-scope-token-61c0f9d2"  # `namespaces = []`: no namespace at all
METRICS_TOKEN = "metrics-scrape-token-9b2d44e0"
ENV = {"CI_TOKEN": CI}
# address -> repository name on the git server
MODULES = {"acme/vpc/aws": "acme-vpc", "acme/network/aws": "acme-network", "other/secret/aws": "other-secret"}
WILDCARD_REPO = "platform-db"  # served by the wildcard rule `platform/*` as platform/db/aws


def sha256(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


TOKENS: list[Any] = [
    ADMIN,
    {"token": "${CI_TOKEN}", "namespaces": ["acme", "platform"]},
    {"token": sha256(AUDIT), "namespaces": ["other"]},
    {"token": NOBODY, "namespaces": []},
]


@pytest.fixture(scope="module")
def git_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitHttpServer]:
    root = tmp_path_factory.mktemp("auth") / "repos"
    for repo_name in [*MODULES.values(), WILDCARD_REPO]:
        repo = GitRepo(root, repo_name)
        repo.commit({"main.tf": f"# {repo_name}\n", "README.md": f"# {repo_name}\n\nThe {repo_name} module.\n"})
        repo.tag("v1.0.0")
    with GitHttpServer(root) as server:
        yield server


def rules(git_host: GitHttpServer) -> list[dict[str, Any]]:
    explicit = [
        dict(
            zip(("namespace", "name", "system"), address.split("/"), strict=True),
            repository=git_host.url(f"{repo}.git"),
        )
        for address, repo in MODULES.items()
    ]
    return [*explicit, {"namespace": "platform", "repository": git_host.base_url + "/platform-{name}.git"}]


# The app these tests ask is what `gitreg serve` builds (its index process too), built once for the
# module and run on the module's event loop: the tests that use it only read, and each starts from
# its index settled and the git server's counters reset, as with an app of its own.
module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_client(git_host: GitHttpServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TestClient]:
    config = parse_config(
        {
            "git": {"protocols": ["http"], "timeout_seconds": 10},
            "storage": {"path": str(tmp_path_factory.mktemp("auth-state"))},
            "auth": {"tokens": TOKENS, "metrics_token": METRICS_TOKEN},
            "webhooks": {"github_secret": "github-webhook-secret-0001"},
            "modules": rules(git_host),
        },
        ENV,
    )
    async with TestClient(TestServer(served_app(config))) as client:
        yield client


@pytest_asyncio.fixture(loop_scope="module")
async def client(shared_client: TestClient, git_host: GitHttpServer) -> TestClient:
    await indexed(shared_client)
    git_host.reset_counters()  # what the background index asked is not what these requests cause
    return shared_client


def git_calls_for(git_host: GitHttpServer, repo: str) -> int:
    return sum(1 for r in git_host.requests() if r.path.startswith(f"/{repo}.git/"))


async def ids(client, url: str, token: str) -> list[str]:
    resp = await client.get(url, headers=bearer(token))
    assert resp.status == 200, await resp.text()
    return [m["id"].rsplit("/", 1)[0] for m in (await resp.json())["modules"]]


# --- which paths need which token --------------------------------------------------------------

API = [
    "/v1/modules",
    "/v1/modules/",
    "/v1/modules/search?q=vpc",
    "/v1/modules/acme",
    "/v1/modules/acme/vpc",
    "/v1/modules/acme/vpc/aws",
    "/v1/modules/acme/vpc/aws/versions",
    "/v1/modules/acme/vpc/aws/download",
    "/v1/modules/acme/vpc/aws/1.0.0",
    "/v1/modules/acme/vpc/aws/1.0.0/download",
    "/v1/modules/nobody/x/aws/versions",  # unknown modules are no different: 401, not 404
]


@pytest.mark.slow
@module_loop
async def test_every_api_request_without_a_valid_registry_token_is_401_with_a_bearer_challenge(client, git_host):
    for path, headers in (
        (p, h)
        for p in API
        for h in (
            {},
            bearer("wrong-token-but-long-enough"),
            bearer(METRICS_TOKEN),
            {"Authorization": f"Basic {ADMIN}"},
            {"Authorization": ADMIN},
            bearer(sha256(AUDIT)),
            bearer(ADMIN[:-1]),
            bearer(ADMIN + "0"),
            bearer(ADMIN.upper()),
        )
    ):
        for method in ("GET", "HEAD"):
            resp = await client.request(method, path, headers=headers, allow_redirects=False)
            assert resp.status == 401, (method, path, headers)
            assert resp.headers["WWW-Authenticate"].startswith("Bearer")
            if method == "GET":
                await assert_error(resp, 401)
    assert git_host.requests() == []  # no refused request reached git


@module_loop
@pytest.mark.slow
async def test_a_path_that_is_no_endpoint_is_404_with_or_without_a_token(client, git_host):
    # Only the API's endpoints need the token: a typo'd URL says "no such endpoint", not "401".
    # (`/` is the module browser's page: with tokens it sends a browser to /login, see test_ui.py.)
    for path in ("/nope", "/v1/nothing-here", "/v1/modules/acme/vpc/aws/1.0.0/download/extra"):
        for headers in ({}, bearer("wrong-token-but-long-enough"), bearer(ADMIN)):
            resp = await client.get(path, headers=headers)
            await assert_error(resp, 404, "no such endpoint")
            assert "WWW-Authenticate" not in resp.headers
    # A method an endpoint does not take is the router's answer too, and reads nothing.
    await assert_error(await client.post("/v1/modules/acme/vpc/aws/versions"), 405)
    assert git_host.requests() == []


@module_loop
async def test_discovery_and_health_stay_open(client):
    for path in ("/.well-known/terraform.json", "/healthz", "/readyz"):
        assert (await client.get(path)).status == 200, path


@module_loop
async def test_metrics_take_their_own_token_and_only_it(client):
    for headers in ({}, bearer(ADMIN), bearer(CI), bearer(METRICS_TOKEN + "x")):
        resp = await client.get("/metrics", headers=headers)
        await assert_error(resp, 401, "metrics_token")
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    resp = await client.get("/metrics", headers=bearer(METRICS_TOKEN))
    assert resp.status == 200 and "gitreg_http_requests_total" in await resp.text()


@module_loop
async def test_webhooks_answer_their_own_secret_not_a_registry_token(client, git_host):
    resp = await client.post("/webhooks/github", data=b"{}", headers={**bearer(ADMIN), "X-GitHub-Event": "push"})
    await assert_error(resp, 401, "X-Hub-Signature-256")
    assert "WWW-Authenticate" not in resp.headers  # a bad signature is no Bearer challenge


# --- what a valid token looks like --------------------------------------------------------------


@module_loop
async def test_a_configured_token_opens_the_api_however_the_scheme_is_spelled(client):
    for authorization in (
        f"Bearer {ADMIN}",
        f"bearer {ADMIN}",
        f"BEARER {ADMIN}",
        f"Bearer   {ADMIN}",
        f"Bearer {ADMIN}   ",
        f"Bearer {CI}",  # expanded from ${CI_TOKEN}
        f"Bearer {AUDIT}",  # configured only as its sha256
    ):
        resp = await client.get("/v1/modules", headers={"Authorization": authorization})
        assert resp.status == 200, (authorization, await resp.text())


@pytest.mark.slow  # a thousand requests
@module_loop
async def test_a_token_keeps_its_scope_and_keeps_working_however_often_and_however_written(client):
    # The warm path remembers a header that named a token (identity/static.py): asked again, the
    # same header still reads only the token's namespaces, and past the bound of remembered
    # spellings the token still works (looked up by its digest, as the first time).
    from gitreg.identity.static import MAX_HEADERS

    for _ in range(3):
        assert (await client.get("/v1/modules/acme/vpc/aws/versions", headers=bearer(CI))).status == 200
        await assert_error(await client.get("/v1/modules/other/secret/aws/versions", headers=bearer(CI)), 403)
    for spaces in range(1, MAX_HEADERS + 20):
        resp = await client.get("/v1/modules", headers={"Authorization": "Bearer" + " " * spaces + ADMIN})
        assert resp.status == 200, spaces
    await assert_error(await client.get("/v1/modules", headers=bearer(ADMIN + "x")), 401, "not valid")


@module_loop
async def test_a_stored_hash_is_not_itself_a_token(client):
    # Someone who reads the config file learns sha256:..., which must not open anything.
    for presented in (
        sha256(AUDIT),
        sha256(AUDIT).removeprefix("sha256:"),
        hashlib.sha256(AUDIT.encode()).hexdigest().upper(),
    ):
        await assert_error(await client.get("/v1/modules", headers=bearer(presented)), 401, "not valid")


@pytest.mark.slow
@module_loop
async def test_a_token_with_bytes_that_are_not_utf8_is_refused_not_a_500(client):
    for raw in ("Bearer \udcff\udcfe" + ADMIN, "Bearer " + ADMIN + "\udc80"):
        resp = await client.get(
            "/v1/modules", headers={"Authorization": raw.encode("utf-8", "surrogateescape").decode("latin-1")}
        )
        await assert_error(resp, 401)


@module_loop
async def test_scoping_a_request_records_no_untyped_request_key(client, recwarn):
    resp = await client.get("/v1/modules/acme/vpc/aws/versions", headers=bearer(CI))
    assert resp.status == 200
    assert not [w for w in recwarn if "RequestKey" in str(w.message) or type(w.message).__name__ == "NotAppKeyWarning"]


# --- scopes ---------------------------------------------------------------------------------------

OTHER_PATHS = [
    "/v1/modules/other",
    "/v1/modules/other/secret",
    "/v1/modules/other/secret/aws",
    "/v1/modules/other/secret/aws/versions",
    "/v1/modules/other/secret/aws/download",
    "/v1/modules/other/secret/aws/1.0.0",
    "/v1/modules/other/secret/aws/1.0.0/download",
]


@module_loop
async def test_a_scoped_token_gets_403_for_another_namespace_before_any_git_call(client, git_host):
    for path in OTHER_PATHS:
        for token in (CI, NOBODY):
            resp = await client.get(path, headers=bearer(token), allow_redirects=False)
            await assert_error(resp, 403, "other")
            assert CI not in await resp.text()
    assert git_calls_for(git_host, "other-secret") == 0
    # ...while the tokens allowed there get in (from the index and the tag cache it warmed).
    for path in OTHER_PATHS:
        for token in (ADMIN, AUDIT):
            resp = await client.get(path, headers=bearer(token), allow_redirects=False)
            assert resp.status in (200, 302), (path, resp.status, await resp.text())


@module_loop
async def test_a_scoped_token_reads_its_own_namespaces_including_wildcard_modules(client):
    resp = await client.get("/v1/modules/acme/vpc/aws/1.0.0/download", headers=bearer(CI))
    assert resp.status == 200
    resp = await client.get("/v1/modules/platform/db/aws/versions", headers=bearer(CI))
    assert resp.status == 200 and (await resp.json())["modules"][0]["versions"] == [{"version": "1.0.0"}]
    await assert_error(await client.get("/v1/modules/platform/db/aws/versions", headers=bearer(AUDIT)), 403)


async def walk(client, url: str, token: str) -> list[str]:
    """Every page of a list, following next_url; asserts the pages' meta is consistent."""
    seen: list[str] = []
    while url:
        resp = await client.get(url, headers=bearer(token))
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        seen += [m["id"].rsplit("/", 1)[0] for m in body["modules"]]
        url = body["meta"].get("next_url")
    return seen


@module_loop
async def test_lists_and_search_never_show_a_scoped_token_another_namespace(client):
    # The wildcard module becomes listed once served (by anyone).
    assert (await client.get("/v1/modules/platform/db/aws/versions", headers=bearer(ADMIN))).status == 200
    await indexed(client)
    everything = ["acme/network/aws", "acme/vpc/aws", "other/secret/aws", "platform/db/aws"]
    assert await walk(client, "/v1/modules?limit=1", ADMIN) == everything
    # Page by page, the meta never counts what the token may not see (no next page past its last module).
    assert await walk(client, "/v1/modules?limit=1", CI) == ["acme/network/aws", "acme/vpc/aws", "platform/db/aws"]
    assert await walk(client, "/v1/modules?limit=1", AUDIT) == ["other/secret/aws"]
    assert await walk(client, "/v1/modules?limit=1", NOBODY) == []
    for url in (
        "/v1/modules/search?q=secret",
        "/v1/modules/search?q=other",
        "/v1/modules/search?q=aws&namespace=other",
        "/v1/modules?provider=aws&namespace=other",
        "/v1/modules/search?q=secret%20module",
    ):
        assert "other/secret/aws" not in await ids(client, url, CI), url
    assert await ids(client, "/v1/modules/search?q=aws", CI) != []
    assert await ids(client, "/v1/modules/search?q=secret", AUDIT) == ["other/secret/aws"]
    assert await ids(client, "/v1/modules/search?q=aws", NOBODY) == []


@pytest.mark.slow
async def test_plain_string_tokens_alone_still_work(serve_client, git_host, tmp_path):
    config = make_config(rules(git_host), auth={"tokens": [ADMIN, CI]}, storage={"path": str(tmp_path / "state")})
    client = await indexed(await serve_client(config))
    for token in (ADMIN, CI):
        assert await ids(client, "/v1/modules", token) == ["acme/network/aws", "acme/vpc/aws", "other/secret/aws"]
    await assert_error(await client.get("/v1/modules"), 401)


# --- configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "env", "problem"),
    [
        (["${MISSING_TOKEN}"], {}, "auth.tokens[0]: environment variable MISSING_TOKEN is not set"),
        ([{"token": "${MISSING_TOKEN}"}], {}, "auth.tokens[0].token: environment variable MISSING_TOKEN is not set"),
        (["sha256:abc"], {}, "auth.tokens[0]: a hashed token must be sha256: followed by 64 lowercase hex digits"),
        ([sha256(ADMIN).upper().replace("SHA256", "sha256")], {}, "auth.tokens[0]: a hashed token must be sha256:"),
        (
            [{"token": ADMIN, "namespaces": ["ok", "not ok"]}],
            {},
            "auth.tokens[0].namespaces[1]: 'not ok' is not a valid namespace",
        ),
        ([{"token": ADMIN, "scopes": ["acme"]}], {}, "auth.tokens[0].scopes: unknown key"),
        ([{"namespaces": ["acme"]}], {}, "auth.tokens[0].token: missing"),
        (["${SHORT}"], {"SHORT": "short"}, "auth.tokens[0]: is shorter than 16 characters"),
        ([42], {}, "auth.tokens[0]: must be a string or a table"),
    ],
)
def test_token_configuration_mistakes_are_named_by_key(tokens, env, problem):
    with pytest.raises(ConfigError) as e:
        parse_config({"auth": {"tokens": tokens}}, env)
    assert any(p.startswith(problem) for p in e.value.problems), e.value.problems
    assert "short" not in " ".join(e.value.problems).replace("shorter", "")  # a secret value is never echoed


# --- the real Terraform CLI over TLS -------------------------------------------------------------------


def module_dir(base: Path, name: str, source: str) -> Path:
    work = base / name
    work.mkdir(parents=True)
    (work / "main.tf").write_text(f'module "m" {{\n  source  = "{source}"\n  version = "~> 1.0"\n}}\n')
    return work


def installed(work: Path) -> dict[str, str]:
    manifest = json.loads((work / ".terraform/modules/modules.json").read_text())
    return {m["Key"]: m.get("Version", "") for m in manifest["Modules"] if m["Key"]}


@pytest.mark.slow
def test_terraform_over_tls_with_scoped_env_and_hashed_tokens(terraform_client, tmp_path):
    terraform = terraform_client
    repos = tmp_path / "repos"
    for name in ("acme-vpc", "other-secret"):
        repo = GitRepo(repos, name)
        repo.commit({"main.tf": f'output "name" {{ value = "{name}" }}\n'})
        repo.tag("v1.0.0")
    write_tls_files(tmp_path)
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[server]\ntls_cert = "{tmp_path / "cert.pem"}"\ntls_key = "{tmp_path / "key.pem"}"\n'
        '[auth]\ntokens = [{ token = "${CI_TOKEN}", namespaces = ["acme"] },'
        f' {{ token = "{sha256(AUDIT)}", namespaces = ["other"] }}]\n'
        f'[storage]\npath = "{tmp_path / "state"}"\n'
        '[[modules]]\nnamespace = "acme"\nname = "vpc"\nsystem = "aws"\n'
        f'repository = "{(repos / "acme-vpc.git").as_uri()}"\n'
        '[[modules]]\nnamespace = "other"\nname = "secret"\nsystem = "aws"\n'
        f'repository = "{(repos / "other-secret.git").as_uri()}"\n'
    )
    with GitregProcess("--config", str(config), env=ENV) as server:
        host = server.url.removeprefix("https://")
        # TF_TOKEN_<host> cannot name a port: a CLI `host` block maps a plain name to the TLS endpoint.
        cli_config(tmp_path / "cli.tfrc", server.url, f'credentials "{host}" {{\n  token = "{AUDIT}"\n}}\n')
        env = clean_env(
            tmp_path / "home",
            TF_CLI_CONFIG_FILE=str(tmp_path / "cli.tfrc"),
            SSL_CERT_FILE=str(tmp_path / "ca.pem"),
            TF_TOKEN_registry_example_test=CI,
        )
        allowed = module_dir(tmp_path, "allowed", "registry.example.test/acme/vpc/aws")
        ok = terraform.run(["init", "-input=false", "-no-color"], cwd=allowed, env=env)
        forbidden = module_dir(tmp_path, "forbidden", "registry.example.test/other/secret/aws")
        refused = terraform.run(["init", "-input=false", "-no-color"], cwd=forbidden, env=env)
        # Real discovery over TLS; the token from the CLI config's credentials block, stored hashed in gitreg.
        hashed = module_dir(tmp_path, "hashed", f"{host}/other/secret/aws")
        via_hash = terraform.run(["init", "-input=false", "-no-color"], cwd=hashed, env=env)
    log = "".join(server.log)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert installed(allowed) == {"m": "1.0.0"}
    assert refused.returncode != 0
    assert "403" in refused.stdout + refused.stderr or "Forbidden" in refused.stdout + refused.stderr
    assert not (forbidden / ".terraform/modules/m").exists()
    assert via_hash.returncode == 0, via_hash.stdout + via_hash.stderr
    assert installed(hashed) == {"m": "1.0.0"}
    assert " 403 " in log and " 200 " in log  # gitreg's access log saw both answers...
    assert CI not in log and AUDIT not in log  # ...and never a token
