"""Module details read from a real tagged tree: inputs, outputs, calls, providers, resources."""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from gitreg.core.names import ModuleAddress
from gitreg.index.declarations import MAX_DESCRIPTION, MAX_README_BYTES, MAX_TF_BYTES, description_from_readme, hcl_text
from tests.support.app import assert_error, indexed, make_config, served_app, version_details
from tests.support.details import README, realistic_module
from tests.support.index_process import index_services
from tests.support.repos import GitRepo

VPC = ModuleAddress("acme", "vpc", "aws")


def vpc_rule(url: str, **extra) -> dict:
    return {"namespace": "acme", "name": "vpc", "system": "aws", "repository": url, **extra}


@pytest.fixture
def vpc(tmp_path: Path) -> GitRepo:
    return realistic_module(tmp_path / "repos")


@pytest.fixture(scope="module")
def shared_vpc(tmp_path_factory: pytest.TempPathFactory) -> GitRepo:
    """The repository of the details the tests below only read (module-scoped, with them)."""
    return realistic_module(tmp_path_factory.mktemp("details") / "repos")


def broken_repo(base: Path) -> GitRepo:
    """A root module none of whose files parses."""
    repo = GitRepo(base, "broken")
    repo.commit(
        {
            "main.tf": 'resource "x" "y" {\n  a = "unterminated\n}\n',
            "deep.tf": "locals { a = " + "[" * 5000 + "]" * 5000 + " }\n",
        }
    )
    repo.tag("v0.1.0")
    return repo


def mono_repo(base: Path) -> GitRepo:
    """A monorepo whose modules/network is tagged network/v1.4.0."""
    mono = GitRepo(base, "infra")
    mono.commit(
        {
            "modules/network/main.tf": 'variable "cidr" { type = string }\n',
            "modules/network/modules/peering/main.tf": 'variable "peer" {}\n',
            "modules/compute/main.tf": 'variable "size" {}\n',
        }
    )
    mono.tag("network/v1.4.0")
    return mono


# The app the tests below ask is what `gitreg serve` builds (its index process too), built once for
# the module and run on the module's event loop: they only read, each a module of its own.
module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(shared_vpc: GitRepo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TestClient]:
    repos = tmp_path_factory.mktemp("details-more") / "repos"
    rules = [
        vpc_rule(shared_vpc.url),
        {"namespace": "acme", "name": "broken", "system": "aws", "repository": broken_repo(repos).url},
        {
            "namespace": "acme",
            "name": "network",
            "system": "aws",
            "repository": mono_repo(repos).url,
            "path": "modules/network",
            "tag_prefix": "network/",
        },
        {
            "namespace": "acme",
            "name": "renamed",
            "system": "aws",
            "repository": shared_vpc.url,
            "path": "modules/renamed",
        },
    ]
    config = make_config(rules, storage={"path": str(tmp_path_factory.mktemp("details-state"))})
    async with TestClient(TestServer(served_app(config))) as client:
        yield await indexed(client)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def details(served: TestClient) -> dict:
    """Version 1.0.0's details as `gitreg serve` answers them (its index process read them), read once
    for the module: the tests that take them only read them."""
    resp = await served.get("/v1/modules/acme/vpc/aws/1.0.0")
    assert resp.status == 200, await resp.text()
    return await resp.json()


def by_name(items: list[dict]) -> dict[str, dict]:
    return {item["name"]: item for item in items}


async def test_inputs_show_every_kind_of_type_and_default(details):
    inputs = by_name(details["root"]["inputs"])
    assert [i["name"] for i in details["root"]["inputs"]] == [
        "name",
        "az_count",
        "scale",
        "enable_nat",
        "cidrs",
        "tags",
        "flow_logs",
        "extra",
        "untyped",
        "db_password",
    ]  # declaration order
    assert inputs["name"] | {"description": ""} == {
        "name": "name",
        "type": "string",
        "description": "",
        "default": "",
        "required": True,
        "sensitive": False,
    }
    assert inputs["name"]["description"] == "Name prefix of every resource."
    assert (inputs["az_count"]["type"], inputs["az_count"]["default"], inputs["az_count"]["required"]) == (
        "number",
        "3",
        False,
    )
    assert json.loads(inputs["scale"]["default"]) == -1500.0
    assert (inputs["enable_nat"]["type"], inputs["enable_nat"]["default"]) == ("bool", "false")
    assert inputs["cidrs"]["type"] == "list(string)"
    assert json.loads(inputs["cidrs"]["default"]) == ["10.0.0.0/24", "10.0.1.0/24"]
    assert inputs["tags"]["type"] == "map(string)"
    assert json.loads(inputs["tags"]["default"]) == {"Team": "net", "cost-center": "42"}
    assert (
        inputs["flow_logs"]["type"]
        == "object({enabled = bool, retention = optional(number, 30), bucket = optional(string)})"
    )
    assert (inputs["flow_logs"]["default"], inputs["flow_logs"]["required"]) == (
        "null",
        False,
    )  # null default: optional
    assert (inputs["extra"]["type"], inputs["extra"]["default"]) == ("any", "{}")
    assert inputs["untyped"] == {
        "name": "untyped",
        "type": "any",
        "description": "",
        "default": "",
        "required": True,
        "sensitive": False,
    }
    assert (inputs["db_password"]["sensitive"], inputs["db_password"]["default"]) == (True, '""')


async def test_heredoc_description_is_dedented_text(details):
    tags = by_name(details["root"]["inputs"])["tags"]
    assert tags["description"] == "Tags for every resource.\nMerged with the provider's default tags."


async def test_outputs_say_which_are_sensitive(details):
    assert details["root"]["outputs"] == [
        {"name": "vpc_id", "description": "The ID of the VPC.", "sensitive": False},
        {"name": "db_password", "description": "Echoed for the demo.", "sensitive": True},
    ]


async def test_module_calls_resources_and_required_providers_are_listed(details):
    root = details["root"]
    assert root["dependencies"] == [
        {"name": "labels", "source": "acme/labels/null", "version": "~> 1.2"},
        {"name": "network", "source": "./modules/network", "version": ""},
    ]
    # Managed resources only: the data source is not something the module creates.
    assert root["resources"] == [{"name": "this", "type": "aws_vpc"}, {"name": "private", "type": "aws_subnet"}]
    assert root["providers"] == [
        {"name": "aws", "namespace": "hashicorp", "source": "hashicorp/aws", "version": ">= 5.0"},
        {"name": "cloudinit", "namespace": "acme-corp", "source": "acme-corp/cloudinit", "version": ""},
        {"name": "random", "namespace": "hashicorp", "source": "hashicorp/random", "version": ">= 3.1"},
    ]
    assert root["path"] == "" and root["empty"] is False and root["notes"] == []


async def test_readme_is_shown_and_its_first_paragraph_is_the_description(details):
    assert details["root"]["readme"] == README
    assert details["description"] == ("Creates a VPC with public and private subnets, NAT gateways and flow logs.")


async def test_submodules_are_the_modules_directories_and_a_broken_file_only_adds_a_note(details):
    subs = {s["path"]: s for s in details["submodules"]}
    assert list(subs) == ["modules/docs-only", "modules/flaky", "modules/network"]  # not examples/
    network = subs["modules/network"]
    assert network["readme"].startswith("# Network")
    assert [i["name"] for i in network["inputs"]] == ["name"]
    assert network["resources"] == [{"name": "private", "type": "aws_route_table"}]
    assert network["outputs"] == [{"name": "route_table_id", "description": "", "sensitive": False}]
    flaky = subs["modules/flaky"]
    assert [i["name"] for i in flaky["inputs"]] == ["ok"]  # the good file still counts
    assert len(flaky["notes"]) == 1
    assert "modules/flaky/broken.tf" in flaky["notes"][0] and "line 2" in flaky["notes"][0]
    docs = subs["modules/docs-only"]
    assert docs["empty"] is True and docs["inputs"] == [] and docs["readme"] == "# Nothing to deploy here\n"


@module_loop
async def test_a_root_module_that_does_not_parse_at_all_still_answers_200(served):
    resp = await served.get("/v1/modules/acme/broken/aws")
    assert resp.status == 200, await resp.text()
    root = (await resp.json())["root"]
    assert root["empty"] is False and root["inputs"] == [] and root["resources"] == []
    assert sorted(n.split(":")[0] for n in root["notes"]) == ["deep.tf", "main.tf"]


@pytest.mark.slow
async def test_each_version_shows_the_details_of_its_own_tag(serve_client, vpc, tmp_path):
    vpc.commit({"variables.tf": 'variable "renamed" { type = string }\n'})
    vpc.tag("v2.0.0")
    client = await indexed(
        await serve_client(make_config([vpc_rule(vpc.url)], storage={"path": str(tmp_path / "state")}))
    )
    # An older version is read when first asked for, in the background: no git inside the request.
    first = await client.get("/v1/modules/acme/vpc/aws/1.0.0")
    await assert_error(first, 503, "being read")
    old = await (await version_details(client, "/v1/modules/acme/vpc/aws/1.0.0")).json()
    new = await (await client.get("/v1/modules/acme/vpc/aws")).json()
    assert "az_count" in by_name(old["root"]["inputs"]) and "renamed" not in by_name(old["root"]["inputs"])
    assert new["version"] == "2.0.0" and [i["name"] for i in new["root"]["inputs"]] == ["renamed"]
    assert new["versions"] == ["2.0.0", "1.0.0"]


async def test_details_are_cached_by_commit_and_read_with_one_fetch_that_leaves_no_mirror(vpc, tmp_path):
    # The index builder itself: what the index process builds (the serving process reads no details).
    config = make_config([vpc_rule(vpc.url, download="git")], storage={"path": str(tmp_path / "state")})
    async with index_services(config) as indexer:
        await indexer.settled()  # the latest version's details, read
        entry = indexer.entry(VPC)
        version = entry.find("1.0.0")
        assert version is not None
        for _ in range(3):  # asked for again, as the serving process passes asks on
            indexer.want(VPC, "1.0.0")
            await indexer.settled()
            assert (await indexer.services.index.read.stored_details(entry, version)).root
        assert (await indexer.services.index.read.stored_details(entry, entry.latest)).root  # the same commit
        assert indexer.services.details.builds == 1
        assert indexer.services.mirrors.fetches == 1
    # Served with git, the module needs no mirror: the tag was fetched, read, and removed again.
    assert list((tmp_path / "state" / "mirrors").iterdir()) == []


@pytest.mark.slow
async def test_details_need_only_the_tags_files_not_the_repositorys_history(serve_client, tmp_path):
    # 3 MiB of history (blobs deleted before the tag) in a repository, [storage] max_bytes 1 MiB:
    # a mirror of it does not fit, the tagged tree does.
    repo = GitRepo(tmp_path / "repos", "big-history")
    rng = random.Random(7)
    for n in range(3):
        repo.commit({f"data{n}.txt": rng.randbytes(1_000_000).hex()})
    repo.commit({f"data{n}.txt": None for n in range(3)} | {"variables.tf": 'variable "zone" { type = string }\n'})
    repo.tag("v1.0.0", annotated=True, message="first release")
    config = make_config(
        [vpc_rule(repo.url, download="git")], storage={"path": str(tmp_path / "state"), "max_bytes": 1024 * 1024}
    )
    client = await indexed(await serve_client(config))
    resp = await client.get("/v1/modules/acme/vpc/aws/1.0.0")
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert [i["name"] for i in body["root"]["inputs"]] == ["zone"]
    tagged = datetime.fromisoformat(repo.git("for-each-ref", "--format=%(creatordate:iso-strict)", "refs/tags/v1.0.0"))
    assert body["published_at"] == tagged.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@module_loop
async def test_monorepo_module_details_are_read_from_its_path(served):
    body = await (await served.get("/v1/modules/acme/network/aws")).json()
    assert [i["name"] for i in body["root"]["inputs"]] == ["cidr"]
    assert [s["path"] for s in body["submodules"]] == ["modules/peering"]


async def test_published_at_is_the_tag_date_in_utc(details, shared_vpc):
    created = shared_vpc.git("for-each-ref", "--format=%(creatordate:iso-strict)", "refs/tags/v1.0.0")
    tagged = datetime.fromisoformat(created)
    assert details["published_at"] == tagged.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@module_loop
async def test_a_rule_path_missing_at_a_tag_gives_an_empty_module_with_a_note(served):
    resp = await served.get("/v1/modules/acme/renamed/aws/1.0.0")
    assert resp.status == 200, await resp.text()
    root = (await resp.json())["root"]
    assert root["empty"] is True and "'modules/renamed' does not exist" in root["notes"][0]


@module_loop
async def test_details_of_an_unknown_or_malformed_version_are_404_and_400(served):
    await assert_error(await served.get("/v1/modules/acme/vpc/aws/9.9.9"), 404, "no version 9.9.9")
    await assert_error(await served.get("/v1/modules/acme/vpc/aws/1.0"), 400, "SemVer")


def test_description_skips_headings_badges_html_and_code():
    readme = "<p align=center><img src=x></p>\n# Title\n```\ncode here\n```\n\nFirst *real* `words`\nwrap.\n\nSecond.\n"
    assert description_from_readme(readme) == "First real words wrap."
    assert description_from_readme("") == ""
    assert description_from_readme("x" * 1000).endswith("...")


@pytest.mark.parametrize(
    ("readme", "description"),
    [
        # Underscores inside words are not emphasis (the old regex made this "Creates an awss3bucket").
        (
            "Creates an aws_s3_bucket with `aws_s3_bucket_policy` attached.\n",
            "Creates an aws_s3_bucket with aws_s3_bucket_policy attached.",
        ),
        ("terraform-aws-vpc\n=================\n\nA VPC for every team.\n", "A VPC for every team."),  # setext heading
        ("Overview\n--------\n\nSubnets and routes.\n", "Subnets and routes."),
        (
            "# Title\n\n    terraform init\n    terraform apply\n\nRun it once per account.\n",
            "Run it once per account.",
        ),
        (
            "[![CI](https://ci.example.com/b.svg)](https://ci.example.com) ![cov](cov.svg)\n\nThe module.\n",
            "The module.",
        ),
        # Reference-style badges and links, defined at the bottom (and far below the top).
        (
            "[![Build][build-badge]][build]\n\nSee [the docs][docs] and [CI].\n\n"
            + "## More\n\nText.\n\n" * 2000
            + "[build-badge]: https://ci.example.com/b.svg\n[build]: https://ci.example.com\n[docs]: https://docs.example.com\n"
            "[ci]: https://ci.example.com\n",
            "See the docs and CI.",
        ),
        (
            '<div align="center">\n  <img src="logo.png" alt="logo">\n  <h1>vpc</h1>\n</div>\n\nA VPC module.\n',
            "A VPC module.",
        ),
        (
            "Made with <b>care</b>.<br>Really &amp; truly \\*not emphasis\\*.\n",
            "Made with care. Really & truly *not emphasis*.",
        ),
        (
            "**Bold**, _italic_, ~~struck~~ and [a link](https://example.com 'title').\n",
            "Bold, italic, struck and a link.",
        ),
        (
            "> **Warning**: deprecated, use vpc2.\n\n- one\n- two\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nThe prose.\n",
            "The prose.",
        ),
        ("First line\nsecond line  \nthird line.\n\nSecond paragraph.\n", "First line second line third line."),
        (
            '<!-- a comment -->\n```hcl\nmodule "x" {}\n```\n\n~~~\nmore code\n~~~\n\nAfter the code.\n',
            "After the code.",
        ),
        ("[x]: https://example.com\n", ""),
        ("# Only a title\n", ""),
    ],
)
def test_description_is_the_first_paragraph_as_markdown_reads_it(readme, description):
    assert description_from_readme(readme) == description


def test_a_long_description_is_cut_with_an_ellipsis():
    text = description_from_readme("word " * 200)
    assert len(text) <= MAX_DESCRIPTION + 3 and text.endswith("...") and text.startswith("word word")


HOSTILE_READMES = {
    "brackets": "[" * MAX_README_BYTES,
    "images": "![" * (MAX_README_BYTES // 2),
    "nested links": "[[a](" * (MAX_README_BYTES // 5),
    "emphasis": "*_a" * (MAX_README_BYTES // 3),
    "one-column table": "a|b\n-|-\n" + "x\n" * (MAX_README_BYTES // 2),
    "nested lists": "- a\n  - b\n" * (MAX_README_BYTES // 10),
    "reference definitions": "[x]: /u\n" * (MAX_README_BYTES // 8),
    "setext headings": "a\n=\n" * (MAX_README_BYTES // 4),
    "one long paragraph": "a\n" * (MAX_README_BYTES // 2),
}


@pytest.mark.parametrize("name", HOSTILE_READMES)
def test_the_description_of_a_hostile_readme_at_the_size_cap_takes_well_under_a_second(name):
    # The old regex took 26 s on 80 KB of `[` (quadratic); these are 256 KB. Generous bound:
    # the parse runs in a worker with a budget anyway, this is about not wasting it.
    started = time.perf_counter()
    description_from_readme(HOSTILE_READMES[name])
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("<<EOT\nhello\n  world\nEOT", "hello\n  world"),
        ("<<-EOT\n    hello\n      world\n    EOT", "hello\n  world"),
        ("<<EOT\nEOT", ""),
        ("<<EOT\r\nwindows\r\nlines\r\nEOT", "windows\nlines"),
        ("<<EOT\nEOTX\nEOT", "EOTX"),
        ("<<EOT\nnot closed", "<<EOT\nnot closed"),
        ("<<EOT", "<<EOT"),
        ("plain", "plain"),
        ("${var.x}", "var.x"),
    ],
)
def test_heredocs_become_their_text(value, text):
    assert hcl_text(value) == text


def test_a_heredoc_near_miss_at_the_size_cap_is_read_in_linear_time():
    # `_HEREDOC_RE` backtracked over every position of a long run of spaces: 12 s for 60 KB.
    started = time.perf_counter()
    assert hcl_text("<<EOT\n" + " " * MAX_TF_BYTES + "x\nEOT") == " " * MAX_TF_BYTES + "x"
    assert hcl_text("<<-EOT\n" + "EOT \n" * (MAX_TF_BYTES // 5) + "EOT").startswith("EOT")
    assert time.perf_counter() - started < 1.0
