"""The index's tests: module repositories, their rules, JSON answers."""

from __future__ import annotations

from pathlib import Path

from tests.support.app import GIT_PASSWORD, GIT_USER
from tests.support.app import make_config as _make_config
from tests.support.repos import GitRepo

README = """# Virtual network

Creates a virtual network with **peering** and flow logs.

## Usage

Attach a bastion host or a NAT gateway; subnets are spread across zones.
"""


def make_config(modules: list[dict], git_http=None, **sections: object):
    """With the test Git server's credentials when one is used."""
    if git_http is not None:
        sections["credentials"] = [{"url": git_http.base_url + "/", "username": GIT_USER, "password": GIT_PASSWORD}]
    return _make_config(modules, **sections)


def module_repo(tmp_path: Path, name: str, readme: str = README) -> GitRepo:
    repo = GitRepo(tmp_path / "repos", name)
    repo.commit({"README.md": readme, "main.tf": 'variable "cidr" {\n  type = string\n}\n'})
    repo.tag("v1.0.0")
    return repo


def rules(git_http, names: list[str]) -> list[dict]:
    """Rules for `public-<name>.git`, in git mode: the index tests count the details read's git
    requests and mirrors, which archive mode (the default) reads from its mirror instead."""
    return [
        {
            "namespace": "acme",
            "name": n,
            "system": "aws",
            "repository": git_http.url(f"public-{n}.git"),
            "download": "git",
        }
        for n in names
    ]


async def get_json(client, url: str) -> dict:
    resp = await client.get(url)
    assert resp.status == 200, await resp.text()
    return await resp.json()


def names(body: dict) -> list[str]:
    return [m["name"] for m in body["modules"]]
