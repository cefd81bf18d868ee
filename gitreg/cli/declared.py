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
    from gitreg.git.mirror import MirrorGit
    from gitreg.registry.declared import file_in, read_now  # imports aiohttp: only --probe needs it

    if head is None:
        return True  # no default branch: nothing can be declared
    with tempfile.TemporaryDirectory(prefix="gitreg-probe-") as scratch:
        try:
            declared = read_now(MirrorGit(adapter), Path(scratch, "repo"), repository, head, path)
        except GitregError as e:
            print(f"  WARNING: could not read {file_in(path)} of the default branch: {e.message}")
            return True

    if declared.problem is not None:
        print(f"  ERROR: {declared.problem} (default branch, commit {head[:12]})")
        return False
    for tv in versions:
        revoked, deprecated = declared.revocation(tv), declared.deprecation(tv)
        if revoked is not None:
            print(f"  revoked {tv.canonical}: {revoked.reason} (not listed; its download answers 410)")
        elif deprecated is not None:
            print(
                f"  deprecated {tv.canonical}: {deprecated.reason}"
                + (f" ({deprecated.link})" if deprecated.link else "")
            )
    return True
