"""Module repositories with a `.gitreg.toml` (#35), shared by the registry, page and end-to-end tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.repos import GitRepo

# 1.4.1 deprecated (with a link), 1.4.2 revoked, 2.0.0 neither.
DECLARED = """
[[deprecated]]
versions = "< 2.0.0"
reason   = "2.x moves to the new VPC layout"
link     = "https://wiki.example.com/vpc-2"
[[revoked]]
versions = "= 1.4.2"
reason   = "leaks the KMS key ARN in an output"
"""
DEPRECATION = {"reason": "2.x moves to the new VPC layout", "link": "https://wiki.example.com/vpc-2"}
REVOKED_REASON = "leaks the KMS key ARN in an output"


def module_repo(
    base: Path,
    name: str = "public",
    declared: str | None = DECLARED,
    versions: tuple[str, ...] = ("1.4.1", "1.4.2", "2.0.0"),
) -> GitRepo:
    """A module tagged v<version> for each of `versions` (its main.tf outputs it), then `declared` as
    `.gitreg.toml` committed on main after the tags (None: no file)."""
    repo = GitRepo(base, name)
    for version in versions:
        repo.commit({"main.tf": f'output "version" {{ value = "{version}" }}\n'})
        repo.tag(f"v{version}")
    if declared is not None:
        repo.commit({".gitreg.toml": declared}, "retire versions")
    return repo


def rule(url: str, download: str, **extra: Any) -> dict[str, Any]:
    """A `[[modules]]` rule for demo/hello/null, its `download` mode written out."""
    return {"namespace": "demo", "name": "hello", "system": "null", "repository": url, "download": download, **extra}
