"""`gitreg check --probe`: what a module's `.gitreg.toml` on the default branch deprecates and revokes (#35)."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from gitreg.core.errors import GitregError
from gitreg.core.versions import TaggedVersion
from gitreg.git.remote import GitAdapter


def probe_declaration(
    adapter: GitAdapter, repository: str, head: str | None, path: str, versions: Sequence[TaggedVersion]
) -> bool:
    """Print what the module's .gitreg.toml (on the default branch) deprecates and revokes; False when malformed."""
    lines, ok = declaration_lines(adapter, repository, head, path, versions)
    if lines:
        print("\n".join(lines))
    return ok


def declaration_lines(
    adapter: GitAdapter, repository: str, head: str | None, path: str, versions: Sequence[TaggedVersion]
) -> tuple[list[str], bool]:
    """The probe's lines on the module's .gitreg.toml, and False when it is malformed."""
    from gitreg.git.mirror import MirrorGit
    from gitreg.registry.declared import file_in, read_now  # imports aiohttp: only --probe needs it

    if head is None:
        return [], True  # no default branch: nothing can be declared
    with tempfile.TemporaryDirectory(prefix="gitreg-probe-") as scratch:
        try:
            declared = read_now(MirrorGit(adapter), Path(scratch, "repo"), repository, head, path)
        except GitregError as e:
            return [f"  WARNING: could not read {file_in(path)} of the default branch: {e.message}"], True

    if declared.problem is not None:
        return [f"  ERROR: {declared.problem} (default branch, commit {head[:12]})"], False
    lines = []
    for tv in versions:
        revoked, deprecated = declared.revocation(tv), declared.deprecation(tv)
        if revoked is not None:
            lines.append(f"  revoked {tv.canonical}: {revoked.reason} (not listed; its download answers 410)")
        elif deprecated is not None:
            link = f" ({deprecated.link})" if deprecated.link else ""
            lines.append(f"  deprecated {tv.canonical}: {deprecated.reason}{link}")
    return lines, True
