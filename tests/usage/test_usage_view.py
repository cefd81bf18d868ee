""" "Used by" without git: which sources are this registry's, and what a reader is shown of each consumer."""

from __future__ import annotations

from typing import Any

import pytest

from gitreg.usage.model import Consumer
from gitreg.usage.parse import consumers_in, registry_address
from gitreg.usage.store import RepoScan
from gitreg.usage.view import consumers_view

HOST = "registry.example.com"
VERSIONS = ["1.0.0", "1.2.0", "1.4.2", "1.5.0", "2.0.0", "2.1.0-rc.1"]


@pytest.mark.parametrize(
    ("source", "address"),
    [
        (f"{HOST}/acme/vpc/aws", "acme/vpc/aws"),
        ("REGISTRY.example.com/acme/vpc/aws//modules/x", "acme/vpc/aws"),
        ("registry.example.com/acme/vpc/aws?ref=v1", "acme/vpc/aws"),
        ("other.example.com/acme/vpc/aws", None),
        ("acme/vpc/aws", None),
        ("git::https://registry.example.com/acme/vpc/aws", None),
        ("https://registry.example.com/acme/vpc/aws", None),
        ("registry.example.com/acme/vpc", None),
        ("registry.example.com/acme/vpc/aws/extra", None),
        ("./modules/local", None),
        (["not", "a", "string"], None),
    ],
)
def test_only_sources_on_the_configured_hosts_are_this_registrys_modules(source: Any, address: str | None) -> None:
    assert registry_address(source, frozenset({HOST})) == address


def test_module_blocks_are_found_with_their_line_and_a_broken_file_is_noted_not_fatal() -> None:
    good = f'# x\nmodule "a" {{\n  source  = "{HOST}/acme/vpc/aws"\n  version = "~> 1.2"\n}}\n'.encode()
    answer = consumers_in(
        {
            "hosts": [HOST],
            "files": [
                ["main.tf", good],
                ["broken.tf", f'module "b" {{ source = "{HOST}/acme/vpc/aws"'.encode()],
                ["unrelated.tf", b'resource "x" "y" {}\n'],
            ],
        }
    )
    assert answer["consumers"] == [{"file": "main.tf", "line": 2, "address": "acme/vpc/aws", "constraint": "~> 1.2"}]
    assert [n.split(":")[0] for n in answer["notes"]] == ["broken.tf"]


def _scan(name: str) -> RepoScan:
    return RepoScan(f"https://git.example.com/acme/{name}.git", f"acme/{name}", "", "acme", "m", "c")


def test_each_consumer_shows_the_newest_version_it_allows_and_its_flags() -> None:
    app, locked = _scan("app"), _scan("locked")
    found = [
        (app, Consumer(app.repository, "main.tf", 1, "acme/vpc/aws", "~> 1.2")),
        (app, Consumer(app.repository, "old.tf", 1, "acme/vpc/aws", "= 1.4.2")),
        (app, Consumer(app.repository, "new.tf", 1, "acme/vpc/aws", "")),
        (locked, Consumer(locked.repository, "main.tf", 1, "acme/vpc/aws", ">= 2.0")),
    ]
    view = consumers_view(
        "acme/vpc/aws",
        found,
        VERSIONS,
        lambda scan: scan.full_name == "acme/app",
        deprecated=lambda v: v.startswith("1."),
        revoked=lambda v: v == "1.4.2",
    )
    rows = {row.file: row for row in view.shown}
    assert (view.hidden, view.repositories, view.latest) == (1, 2, "2.0.0")
    assert rows["main.tf"].newest_allowed == "1.5.0"  # 1.4.2 is revoked: never an answer
    assert (rows["main.tf"].not_latest_major, rows["main.tf"].allows_deprecated) == (True, True)
    assert (rows["old.tf"].newest_allowed, rows["old.tf"].pinned_revoked) == (None, True)
    assert (rows["new.tf"].newest_allowed, rows["new.tf"].not_latest_major) == ("2.0.0", False)
    assert not rows["new.tf"].allows_deprecated and not rows["main.tf"].pinned_revoked
