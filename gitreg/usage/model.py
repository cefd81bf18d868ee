"""What "Used by" knows about a module's consumers: repositories whose `.tf` files call it, and CI installs.

Shared by the scan (usage/scan.py, store.py, view.py) and the observed installs (usage/installs.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Consumer:
    """One `module` block, on a repository's default branch, whose `source` is this registry's module."""

    repository: str  # the consuming repository's clone URL (what the identity door's check_read takes)
    file: str  # the .tf file's path in that repository, e.g. "envs/prod/main.tf"
    line: int  # the `module` block's first line in that file
    address: str  # the module's address as written, without the host: "acme/vpc/aws"
    constraint: str  # its `version` argument as written; "" when there is none


@dataclass(frozen=True)
class Install:
    """A `download` answered to a CI job that showed an OIDC token: who installed which version, when."""

    project: str  # the job's project or repository as its token names it ("acme/app")
    repository: str | None  # that project's clone URL when gitreg knows it (for check_read), else None
    address: str  # "acme/vpc/aws"
    version: str  # "1.4.2"
    at: float  # Unix time of the download
