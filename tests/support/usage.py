""" "Used by" tests: an org whose repositories call one of its modules, over real git.

`consumer_org` builds, under `root`, the module repository `acme/terraform-aws-vpc` (tags v1.0.0,
v1.2.0, v1.4.2, v2.0.0) and consumer repositories that are not modules:

- `app-frontend`: `main.tf`, `~> 1.2`;
- `platform-live`: `envs/prod/main.tf` `>= 1.0, < 2.0`, and `envs/dev/network/main.tf` pinned to
  `1.4.2` with the host in capitals and a `//modules/sub` suffix (monorepo-ish, in subfolders);
- `secret-app`: private to people who are not granted it, `version = "2.0.0"`;
- `other-host`: a `source` on another registry host, and a local module (both ignored).

`add_to(forge)` lists them all on a fake GitHub or GitLab.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.forges import FakeForge
from tests.support.repos import GitRepo

HOST = "registry.example.com"
MODULE = "terraform-aws-vpc"
CONSUMERS = ("app-frontend", "platform-live", "secret-app", "other-host")


def block(name: str, source: str, version: str | None = None) -> str:
    """A `module` block as a consumer writes it."""
    line = f'  version = "{version}"\n' if version is not None else ""
    return f'module "{name}" {{\n  source = "{source}"\n{line}  cidr = "10.0.0.0/16"\n}}\n'


def consumer_org(root: Path) -> dict[str, GitRepo]:
    """The repositories (see the module docstring), by name."""
    repos = {MODULE: GitRepo(root, f"acme/{MODULE}")}
    for version in ("1.0.0", "1.2.0", "1.4.2", "2.0.0"):
        repos[MODULE].commit({"main.tf": f'output "version" {{ value = "{version}" }}\n'})
        repos[MODULE].tag(f"v{version}")
    files: dict[str, dict[str, str | None]] = {
        "app-frontend": {"main.tf": "terraform {\n}\n\n" + block("vpc", f"{HOST}/acme/vpc/aws", "~> 1.2")},
        "platform-live": {
            "envs/prod/main.tf": block("network", f"{HOST}/acme/vpc/aws", ">= 1.0, < 2.0"),
            "envs/dev/network/main.tf": "# dev\n\n"
            + block("vpc", "Registry.Example.COM/acme/vpc/aws//modules/sub", "1.4.2"),
            "README.md": f"uses {HOST}/acme/vpc/aws\n",
        },
        "secret-app": {"main.tf": block("vpc", f"{HOST}/acme/vpc/aws", "2.0.0")},
        "other-host": {
            "main.tf": block("vpc", "other.example.com/acme/vpc/aws", "~> 1.0")
            + block("local", "./modules/local")
            + f"# {HOST}\n",
        },
    }
    for name, content in files.items():
        repos[name] = GitRepo(root, f"acme/{name}")
        repos[name].commit(content)
    return repos


def add_to(forge: FakeForge) -> None:
    """List the module and every consumer repository on `forge`."""
    for name in (MODULE, *CONSUMERS):
        # Pushed an hour ago: past GitLab's throttle of `updated_at`, so the marker is trusted.
        forge.add(name, repo=f"acme/{name}", pushed=time.time() - 3600)
