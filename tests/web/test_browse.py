"""Listing, search, latest versions and pagination, against real repositories."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from gitreg.web.api.browse import DEFAULT_LIMIT, MAX_LIMIT
from gitreg.web.keys import CATALOG
from tests.support.app import assert_error, indexed_in_full, make_config, reindexed, served_app, version_details
from tests.support.repos import GitRepo

GOLDEN = Path(__file__).parent.parent / "golden"
READ_ACME = "registry-token-acme-only-4b1f"
READ_ALL = "registry-token-everything-9c2e"

# address -> (directory in the monorepo, README's first paragraph)
MODULES = {
    "acme/network/aws": ("network", "Core network."),
    "acme/network/google": ("network", "Core network."),
    "acme/network-firewall/aws": ("network-firewall", "Firewall rules."),
    "acme/core-network/google": ("core-network", "Shared VPC."),
    "acme/vpc/aws": ("vpc", "Creates a network for your apps."),
    "acme/dns/aws": ("dns", "Zones and records."),
    "other/network/azurerm": ("azure-network", "Azure networking."),
}
SORTED = sorted(MODULES, key=lambda a: tuple(p.casefold() for p in a.split("/")))

VPC_TF = """
variable "cidr" {
  type        = string
  description = "The VPC's CIDR block."
  default     = "10.0.0.0/16"
}
output "vpc_id" { value = aws_vpc.this.id }
resource "aws_vpc" "this" { cidr_block = var.cidr }
"""
SUBNETS_TF = """
variable "vpc_id" { type = string }
output "subnet_ids" { value = aws_subnet.this[*].id }
resource "aws_subnet" "this" { vpc_id = var.vpc_id }
"""


@pytest.fixture(scope="module")
def mono(tmp_path_factory: pytest.TempPathFactory) -> GitRepo:
    """One repository holding every module of MODULES in its own directory, tagged v1.0.0 (the tests only read it)."""
    repo = GitRepo(tmp_path_factory.mktemp("browse") / "repos", "modules")
    files: dict[str, str | None] = {}
    for directory, description in MODULES.values():
        files[f"{directory}/README.md"] = f"# {directory}\n\n{description}\n"
        files[f"{directory}/main.tf"] = 'variable "x" {}\n'
    files["vpc/main.tf"] = VPC_TF
    files["vpc/modules/subnets/main.tf"] = SUBNETS_TF
    repo.commit(files)
    repo.tag("v1.0.0")
    return repo


def rules_for(url: str) -> list[dict]:
    rules = []
    for address, (directory, _) in MODULES.items():
        namespace, name, system = address.split("/")
        rules.append(
            {
                "namespace": namespace,
                "name": name,
                "system": system,
                "repository": url,
                "path": directory,
                "clone_url": f"https://bot@git.example.com/{namespace}/modules.git",
                "verified": namespace == "other" or name == "vpc",
            }
        )
    return rules


# The app the tests taking `client` ask is what `gitreg serve` builds (its index process too), built
# once for the module and run on the module's event loop: those tests only read what it lists.
module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(mono: GitRepo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TestClient]:
    config = make_config(rules_for(mono.url), storage={"path": str(tmp_path_factory.mktemp("browse-state"))})
    async with TestClient(TestServer(served_app(config))) as client:
        yield await indexed_in_full(client)


async def get_json(client, url: str, status: int = 200, **kwargs) -> dict:
    resp = await client.get(url, **kwargs)
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    return await resp.json()


def ids(body: dict) -> list[str]:
    return ["/".join(m["id"].split("/")[:3]) for m in body["modules"]]


# --- one module -------------------------------------------------------------------------


@pytest.mark.slow
async def test_latest_and_download_skip_prereleases(serve_client, repo, tmp_path):
    rule = {"namespace": "demo", "name": "hello", "system": "null", "repository": repo.url, "download": "git"}
    client = await indexed_in_full(await serve_client(make_config([rule])))
    body = await get_json(client, "/v1/modules/demo/hello/null")
    assert body["version"] == "1.1.0" and body["versions"] == ["2.0.0-rc.1", "1.1.0", "1.0.0"]
    assert body["providers"] == ["null"]
    resp = await client.get("/v1/modules/demo/hello/null/download", allow_redirects=False)
    assert resp.status == 302
    assert resp.headers["Location"] == "/v1/modules/demo/hello/null/1.1.0/download"
    followed = await get_json(client, "/v1/modules/demo/hello/null/download")  # the redirect works
    assert followed == {"location": f"git::{repo.url}?ref=v1.1.0"}
    # The protocol's own endpoints keep their handlers next to the new ones.
    versions = await get_json(client, "/v1/modules/demo/hello/null/versions")
    assert versions["modules"][0]["source"] == "demo/hello/null"
    rc = await version_details(client, "/v1/modules/demo/hello/null/2.0.0-rc.1")
    assert rc.status == 200 and (await rc.json())["version"] == "2.0.0-rc.1"


@pytest.mark.slow
async def test_a_module_with_only_prereleases_has_its_highest_prerelease_as_latest(serve_client, tmp_path):
    beta = GitRepo(tmp_path / "repos", "beta")
    beta.commit({"main.tf": "# beta\n"})
    beta.tag("v0.1.0-alpha.1")
    beta.tag("v0.1.0-beta.2")
    beta.tag("not-semver")
    client = await indexed_in_full(
        await serve_client(
            make_config([{"namespace": "demo", "name": "beta", "system": "null", "repository": beta.url}])
        )
    )
    assert (await get_json(client, "/v1/modules/demo/beta/null"))["version"] == "0.1.0-beta.2"
    empty = GitRepo(tmp_path / "repos", "empty")
    empty.commit({"main.tf": "# no versions\n"})
    client = await indexed_in_full(
        await serve_client(
            make_config([{"namespace": "demo", "name": "empty", "system": "null", "repository": empty.url}])
        )
    )
    await assert_error(await client.get("/v1/modules/demo/empty/null"), 404, "no SemVer tag yet")
    await assert_error(
        await client.get("/v1/modules/demo/empty/null/download", allow_redirects=False), 404, "no versions"
    )
    assert ids(await get_json(client, "/v1/modules")) == []  # nothing to show for it


# --- what is listed, and what is remembered -------------------------------------------------


@pytest.mark.slow
async def test_modules_served_by_a_wildcard_rule_are_listed_across_restarts(serve_client, tmp_path):
    for name in ("vpc", "dns"):
        repo = GitRepo(tmp_path / "repos", f"terraform-aws-{name}")
        repo.commit({"README.md": f"# {name}\n\nThe {name} module.\n"})
        repo.tag("v0.1.0")
    base = (tmp_path / "repos").as_uri()
    config = make_config(
        [{"namespace": "acme", "repository": base + "/terraform-{system}-{name}.git"}],
        storage={"path": str(tmp_path / "state")},
    )
    client = await indexed_in_full(await serve_client(config))
    assert ids(await get_json(client, "/v1/modules")) == []  # a wildcard cannot be enumerated
    # Browsing never runs git: a module a wildcard could serve is not listed before it was served.
    await assert_error(await client.get("/v1/modules/acme/dns/aws"), 404, "not listed")
    await get_json(client, "/v1/modules/acme/vpc/aws/versions")  # what `terraform init` asks first
    await get_json(client, "/v1/modules/acme/dns/aws/0.1.0/download")
    await assert_error(await client.get("/v1/modules/acme/missing/aws/versions"), 404)
    await indexed_in_full(client)
    assert ids(await get_json(client, "/v1/modules")) == ["acme/dns/aws", "acme/vpc/aws"]
    assert (await get_json(client, "/v1/modules/acme/dns/aws"))["description"] == "The dns module."
    await client.close()  # shutdown writes the catalog

    saved = json.loads((tmp_path / "state" / "catalog.json").read_text())
    assert saved["modules"] == ["acme/dns/aws", "acme/vpc/aws"]
    assert not [p for p in (tmp_path / "state").iterdir() if p.name.endswith(".tmp")]  # written atomically
    (tmp_path / "repos" / "terraform-aws-dns.git").rename(tmp_path / "repos" / "gone.git")
    restarted = await reindexed(await serve_client(config))
    assert ids(await get_json(restarted, "/v1/modules")) == ["acme/vpc/aws"]  # a deleted repository drops out


@pytest.mark.slow
async def test_downloads_are_counted_in_batches_and_kept_across_restarts(serve_client, mono, tmp_path):
    config = make_config(rules_for(mono.url), storage={"path": str(tmp_path / "state")})
    client = await indexed_in_full(await serve_client(config))
    for _ in range(25):
        resp = await client.get("/v1/modules/acme/vpc/aws/1.0.0/download")
        assert resp.status == 200
    await client.get("/v1/modules/acme/vpc/aws/9.9.9/download")  # a failed download does not count
    assert (await get_json(client, "/v1/modules/acme/vpc/aws"))["downloads"] == 25
    assert client.app[CATALOG].writes <= 1  # not one write per request
    await client.close()
    restarted = await indexed_in_full(await serve_client(config))
    listed = {
        m["name"] + "/" + m["provider"]: m["downloads"] for m in (await get_json(restarted, "/v1/modules"))["modules"]
    }
    assert listed["vpc/aws"] == 25 and listed["dns/aws"] == 0
    # Popular modules come first among equally good search matches.
    for _ in range(3):
        await restarted.get("/v1/modules/acme/network/google/1.0.0/download")
    assert ids(await get_json(restarted, "/v1/modules/search?q=network"))[:2] == [
        "acme/network/google",
        "acme/network/aws",
    ]


@pytest.mark.slow
async def test_a_damaged_catalog_file_is_set_aside_not_fatal(serve_client, mono, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "catalog.json").write_text("{not json")
    client = await indexed_in_full(await serve_client(make_config(rules_for(mono.url), storage={"path": str(state)})))
    assert ids(await get_json(client, "/v1/modules")) == SORTED
    assert (state / "catalog.json.damaged").exists()


# --- scopes ---------------------------------------------------------------------------------


@pytest.mark.slow
async def test_scoped_tokens_never_list_or_find_other_namespaces(serve_client, mono, tmp_path):
    tokens = [{"token": READ_ACME, "namespaces": ["acme"]}, READ_ALL]
    client = await indexed_in_full(
        await serve_client(
            make_config(rules_for(mono.url), auth={"tokens": tokens}, storage={"path": str(tmp_path / "state")})
        )
    )
    acme = {"Authorization": f"Bearer {READ_ACME}"}
    everything = {"Authorization": f"Bearer {READ_ALL}"}
    assert ids(await get_json(client, "/v1/modules", headers=acme)) == [a for a in SORTED if a.startswith("acme/")]
    assert "other/network/azurerm" not in ids(await get_json(client, "/v1/modules/search?q=network", headers=acme))
    assert ids(await get_json(client, "/v1/modules/search?q=network&namespace=other", headers=acme)) == []
    await assert_error(await client.get("/v1/modules/other", headers=acme), 403, "other")
    await assert_error(await client.get("/v1/modules/other/network/azurerm", headers=acme), 403)
    assert ids(await get_json(client, "/v1/modules", headers=everything)) == SORTED
    await assert_error(await client.get("/v1/modules"), 401)


async def test_a_wildcard_rule_module_source_is_its_filled_in_web_page(serve_client, repo, tmp_path):
    config = make_config(
        [
            {
                "namespace": "demo",
                "repository": repo.url,
                "clone_url": "git@git.example.com:demo/terraform-{system}-{name}.git",
            }
        ],
        index={"enabled": False},  # the versions answer: not the index's
    )
    client = await serve_client(config)
    versions = await get_json(client, "/v1/modules/demo/hello/null/versions")
    assert versions["modules"][0]["source"] == "https://git.example.com/demo/terraform-null-hello"


# --- listing, filters, search, one module, golden files (field names and JSON types as in the
# spec's samples): the tests of the app built once for the module, last, as its event loop runs
# only while they do (paused longer than SILENCE_SECONDS, the serving process kills its index process)


def assert_same_shape(spec, ours, where: str = "$") -> None:
    """Every field of the spec's sample is in ours, with the same JSON type (extra fields allowed)."""
    if isinstance(spec, dict):
        assert isinstance(ours, dict), f"{where}: expected an object, got {ours!r}"
        missing = sorted(set(spec) - set(ours))
        assert not missing, f"{where}: missing {missing}"
        for key, value in spec.items():
            assert_same_shape(value, ours[key], f"{where}.{key}")
    elif isinstance(spec, list):
        assert isinstance(ours, list), f"{where}: expected an array, got {ours!r}"
        if spec:
            assert ours, f"{where}: the sample has items, ours is empty (the test must produce some)"
            for i, item in enumerate(ours):
                assert_same_shape(spec[0], item, f"{where}[{i}]")
    else:
        assert type(ours) is type(spec), f"{where}: {type(spec).__name__} in the spec, {type(ours).__name__} here"


@module_loop
@pytest.mark.slow
async def test_list_shows_every_explicit_rule_sorted_with_its_latest_version(client):
    body = await get_json(client, "/v1/modules")
    assert ids(body) == SORTED
    assert body["meta"] == {"limit": DEFAULT_LIMIT, "current_offset": 0}
    vpc = next(m for m in body["modules"] if m["name"] == "vpc")
    assert vpc == {
        "id": "acme/vpc/aws/1.0.0",
        "owner": "",
        "namespace": "acme",
        "name": "vpc",
        "version": "1.0.0",
        "provider": "aws",
        "description": "Creates a network for your apps.",
        "source": "https://git.example.com/acme/modules",  # web URL: no credentials, no .git
        "published_at": vpc["published_at"],
        "downloads": 0,
        "verified": True,
    }
    assert vpc["published_at"].endswith("Z")


@module_loop
@pytest.mark.slow
async def test_following_next_url_walks_every_module_once(client):
    seen, url, pages = [], "/v1/modules?limit=2", 0
    while url:
        body = await get_json(client, url)
        meta = body["meta"]
        assert meta["limit"] == 2 and meta["current_offset"] == 2 * pages
        assert ("prev_offset" in meta) == (pages > 0)  # only when not at offset 0
        if pages:
            assert meta["prev_offset"] == 2 * (pages - 1)
        seen += ids(body)
        pages += 1
        url = meta.get("next_url")
        assert ("next_offset" in meta) == (url is not None)
    assert seen == SORTED and pages == 4


@module_loop
@pytest.mark.slow
async def test_offset_past_the_end_is_an_empty_page_that_points_back(client):
    body = await get_json(client, "/v1/modules?offset=50&limit=4")
    assert body == {"meta": {"limit": 4, "current_offset": 50, "prev_offset": len(MODULES) - 4}, "modules": []}


@module_loop
@pytest.mark.slow
async def test_limit_zero_means_the_default_and_too_large_is_clamped_to_the_maximum(client):
    assert (await get_json(client, "/v1/modules?limit=0"))["meta"]["limit"] == DEFAULT_LIMIT
    body = await get_json(client, "/v1/modules?limit=100000")
    assert body["meta"]["limit"] == MAX_LIMIT and len(body["modules"]) == len(MODULES)


@module_loop
@pytest.mark.parametrize(
    "query", ["limit=abc", "offset=-1", "limit=1.5", "offset=", "limit=1e3", "offset=9999999999999", "limit=%EF%BC%91"]
)
async def test_non_numeric_offset_or_limit_is_400(client, query):
    await assert_error(await client.get(f"/v1/modules?{query}"), 400, "non-negative integer")
    await assert_error(await client.get(f"/v1/modules/search?q=network&{query}"), 400, "non-negative integer")


@module_loop
async def test_next_url_keeps_the_filters_and_the_applied_limit(client):
    body = await get_json(client, "/v1/modules?limit=1&provider=aws&verified=false&junk=1")
    assert body["meta"]["next_url"] == "/v1/modules?limit=1&offset=1&provider=aws&verified=false"
    body = await get_json(client, "/v1/modules/search?q=network&limit=500&offset=0")
    assert "next_url" not in body["meta"] and body["meta"]["limit"] == MAX_LIMIT


@module_loop
async def test_provider_verified_and_namespace_filters_combine(client):
    assert ids(await get_json(client, "/v1/modules?provider=aws")) == [a for a in SORTED if a.endswith("/aws")]
    assert ids(await get_json(client, "/v1/modules?verified=true")) == ["acme/vpc/aws", "other/network/azurerm"]
    assert ids(await get_json(client, "/v1/modules?verified=true&provider=aws")) == ["acme/vpc/aws"]
    # The spec: any value but "true" lists everything, verified or not.
    assert ids(await get_json(client, "/v1/modules?verified=yes")) == SORTED
    assert ids(await get_json(client, "/v1/modules/other")) == ["other/network/azurerm"]
    assert ids(await get_json(client, "/v1/modules/acme?provider=google")) == [
        "acme/core-network/google",
        "acme/network/google",
    ]
    assert ids(await get_json(client, "/v1/modules/nobody")) == []
    body = await get_json(client, "/v1/modules/search?q=network&namespace=acme&provider=aws&verified=true")
    assert ids(body) == ["acme/vpc/aws"]


@module_loop
async def test_filters_outside_the_grammar_are_400(client):
    await assert_error(await client.get("/v1/modules?provider=AWS"), 400, "provider")
    await assert_error(await client.get("/v1/modules/search?q=x&namespace=-bad-"), 400, "namespace")
    await assert_error(await client.get("/v1/modules/bad.ns"), 400, "namespace")


@module_loop
async def test_search_ranks_exact_name_then_prefix_then_substring_then_description(client):
    body = await get_json(client, "/v1/modules/search?q=Network")
    assert ids(body) == [
        "acme/network/aws",
        "acme/network/google",
        "other/network/azurerm",  # the name is the query
        "acme/network-firewall/aws",  # starts with it
        "acme/core-network/google",  # contains it
        "acme/vpc/aws",  # only the description says it
    ]


@module_loop
async def test_search_matches_namespace_system_and_every_word(client):
    assert ids(await get_json(client, "/v1/modules/search?q=azurerm")) == ["other/network/azurerm"]
    assert ids(await get_json(client, "/v1/modules/search?q=zones%20dns")) == ["acme/dns/aws"]
    assert ids(await get_json(client, "/v1/modules/search?q=no-such-thing")) == []


@module_loop
async def test_search_needs_a_query(client):
    await assert_error(await client.get("/v1/modules/search"), 400, "q=")
    await assert_error(await client.get("/v1/modules/search?q=%20%20"), 400, "q=")
    await assert_error(await client.get("/v1/modules/search?q=" + "x" * 201), 400, "longer than")


@module_loop
async def test_search_pages_keep_the_ranking(client):
    first = await get_json(client, "/v1/modules/search?q=network&limit=4")
    assert first["meta"]["next_url"] == "/v1/modules/search?limit=4&offset=4&q=network"
    second = await get_json(client, first["meta"]["next_url"])
    assert ids(first) + ids(second) == ids(await get_json(client, "/v1/modules/search?q=network"))


@module_loop
async def test_module_name_lists_the_latest_version_for_every_system(client):
    body = await get_json(client, "/v1/modules/acme/network")
    assert ids(body) == ["acme/network/aws", "acme/network/google"]
    assert body["meta"] == {"limit": DEFAULT_LIMIT, "current_offset": 0}
    await assert_error(await client.get("/v1/modules/acme/nothing"), 404, "acme/nothing")


@module_loop
@pytest.mark.parametrize(
    ("golden", "url", "status"),
    [
        ("list-modules", "/v1/modules?limit=2&verified=false", 200),
        ("search-modules", "/v1/modules/search?q=network&limit=2", 200),
        ("latest-for-all-providers", "/v1/modules/acme/network", 200),
        ("latest-for-provider", "/v1/modules/acme/vpc/aws", 200),
        ("module-version", "/v1/modules/acme/vpc/aws/1.0.0", 200),
        ("errors", "/v1/modules?limit=ten", 400),
    ],
)
async def test_responses_have_the_fields_and_types_of_the_spec_samples(client, golden, url, status):
    spec = json.loads((GOLDEN / f"{golden}.json").read_text())
    ours = await get_json(client, url, status=status)
    assert_same_shape(spec, ours)
    if "meta" in spec:  # present exactly when it applies: not in every sample
        assert ("next_offset" in ours["meta"]) == ("next_offset" in spec["meta"])


@module_loop
async def test_the_versions_answer_names_the_repository_web_page_as_its_source(client):
    # Renovate links a module's changes from `source` when it is an http(s) URL; the CLIs ignore it.
    versions = await get_json(client, "/v1/modules/acme/vpc/aws/versions")
    assert versions["modules"][0]["source"] == "https://git.example.com/acme/modules"  # no user, no .git
    assert versions["modules"][0]["versions"] == [{"version": "1.0.0"}]
    summary = await get_json(client, "/v1/modules/acme/vpc/aws")
    assert summary["source"] == versions["modules"][0]["source"]  # one answer, whichever endpoint
