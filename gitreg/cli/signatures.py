"""`gitreg check --probe` for [signing]: which versions of a module are signed by whom, and which are refused and why.

Verified as `serve` would (git's verify-tag / verify-commit against the configured keys), in a
scratch directory of the probe's own: nothing is written to `[storage] path`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from gitreg.config.model import Config
from gitreg.core.loop import run_main
from gitreg.core.versions import ModuleVersions
from gitreg.git.mirror import MirrorGit
from gitreg.git.pool import GitPool
from gitreg.git.remote import GitAdapter
from gitreg.git.verify import SignatureGit, Verdict
from gitreg.registry.signatures import Signatures, refusal, signature_required
from gitreg.replicas.memory import MemoryShared

# A probe waits for every verdict (no client is waiting on it).
PROBE_WAIT = 300.0


def signature_lines(
    config: Config, adapter: GitAdapter, repository: str, require_signed: bool | None, found: ModuleVersions
) -> tuple[list[str], bool]:
    """Each version's signature, as lines to print; False when signatures are required and none is served."""
    verdicts = run_main(_verdicts(config, adapter, repository, found))
    required = signature_required(config, require_signed)
    lines = [f"  signatures ({'required' if required else 'not required'}):"]
    served = 0
    for tv in found.versions:
        verdict = verdicts.get(tv.tag)
        if verdict is not None and verdict.ok:
            served += 1
            key = f"{'SSH' if verdict.format == 'ssh' else 'OpenPGP'} key {verdict.fingerprint}"
            lines.append(f"    {tv.canonical}: signed by {verdict.signer} ({key}, on the {verdict.signed})")
        elif required:
            lines.append(f"    {tv.canonical}: REFUSED: {refusal(verdict, tv.canonical)}")
        else:
            lines.append(f"    {tv.canonical}: not signed ({_why(verdict)}); served: signatures are not required")
    return lines, served > 0 or not required


def _why(verdict: Verdict | None) -> str:
    if verdict is None:
        return "could not be verified now"
    return verdict.reason or verdict.status


async def _verdicts(config: Config, adapter: GitAdapter, repository: str, found: ModuleVersions) -> dict[str, Verdict]:
    git = config.git
    pool = GitPool(git.max_concurrency, git.max_queue, git.max_per_host)
    with tempfile.TemporaryDirectory(prefix="gitreg-signatures-") as root:
        signatures = Signatures(
            config, Path(root), SignatureGit(MirrorGit(adapter)), pool, adapter.tag_objects, MemoryShared()
        )
        try:
            await signatures.start()
            verdicts = await signatures.verdicts(repository, found.versions, PROBE_WAIT)
        finally:
            await signatures.close()
            pool.shutdown()
    return {tag: verdict for tag, verdict in verdicts.items() if verdict is not None}
