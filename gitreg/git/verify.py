"""Signatures on tags and commits, verified by git itself (`verify-tag` / `verify-commit --raw`).

gitreg writes no crypto: git asks `ssh-keygen -Y verify` (SSH signatures, against
`gpg.ssh.allowedSignersFile`) or `gpg` (OpenPGP, against a keyring gitreg made from the armored
keys it was given, in a GNUPGHOME of its own) and gitreg reads their words for the principal and
the key's fingerprint. Every setting that matters reaches git by `-c` (which wins over any
repository's config) and the environment the runner builds: the repositories verified in are
gitreg's own mirrors or scratch fetches, and nothing a Git host sends can name the program git runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

from gitreg.core.errors import UpstreamTimeout, UpstreamUnavailable
from gitreg.git.mirror import MirrorGit
from gitreg.git.remote import SHA_RE

# What one verification may take (a few ms for ssh-keygen or gpg): beyond it, a transient failure.
VERIFY_SECONDS = 30.0
# ssh-keygen's words, as git passes them on with --raw.
_SSH_GOOD = re.compile(r'Good "git" signature for (?P<principal>.+?) with (?P<algo>\S+) key (?P<fp>SHA256:\S+)')
_SSH_NO_PRINCIPAL = re.compile(r'Good "git" signature with (?P<algo>\S+) key (?P<fp>SHA256:\S+)')
_PROGRAMS = [
    "-c", "gpg.program=gpg",
    "-c", "gpg.openpgp.program=gpg",
    "-c", "gpg.ssh.program=ssh-keygen",
    "-c", "gpg.x509.program=false",  # X.509 (gpgsm) signatures are not supported: never "signed"
    "-c", "gpg.minTrustLevel=undefined",  # the keyring holds only the keys gitreg was given
]  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """What git said of a version's signatures: `status` "signed", "unsigned", "unknown_key" or "bad"."""

    status: str
    signer: str = ""  # the allowed-signers principal, or the OpenPGP key's user id
    fingerprint: str = ""
    format: str = ""  # "ssh" or "openpgp"
    signed: str = ""  # what carries the good signature: "tag" or "commit"
    object: str = ""  # the object verified: the tag object of an annotated tag, else the commit
    reason: str = field(default="", compare=False)

    @property
    def ok(self) -> bool:
        """True when a trusted key signed the tag or its commit."""
        return self.status == "signed"


@dataclass(frozen=True)
class Keys:
    """Where the trusted keys are, as git and gpg read them."""

    allowed_signers: str  # os.devnull when no SSH key is trusted
    gnupghome: str  # gitreg's own GNUPGHOME (an empty keyring when no OpenPGP key is trusted)


class SignatureGit:
    """git's verification of tags and commits in gitreg's own repositories (blocking: run in the git pool)."""

    def __init__(self, mirror: MirrorGit) -> None:
        self.mirror = mirror
        self.runner = mirror.adapter.runner

    def fetch_tags(self, path: str, url: str, tags: list[str]) -> None:
        """Fetch `tags` of `url` (by name: the tag objects as the host has them now, and their commits,
        no trees) into gitreg's scratch repository at `path`."""
        refspecs = [f"+refs/tags/{tag}:refs/tags/{tag}" for tag in tags]
        options = ["--depth=1", "--filter=tree:0", "--no-tags", "--no-write-fetch-head"]
        fetch = ["git", "-c", "fetch.unpackLimit=1", "fetch", "--quiet", *options, "--end-of-options", url]
        self.mirror.adapter.call([*fetch, *refspecs], url, path)

    def tag_ref(self, path: str, tag: str) -> tuple[str, str, str] | None:
        """(object name, "tag" or "commit", commit) of `refs/tags/<tag>` in the repository at `path`, or None."""
        status, out = self._git(
            path, ["for-each-ref", "--format=%(objectname) %(objecttype) %(*objectname)", f"refs/tags/{tag}"]
        )
        if status != 0:
            raise UpstreamUnavailable(f"could not read tag {tag} in gitreg's repository (git exited with {status})")
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 2 and SHA_RE.fullmatch(parts[0]):
                return parts[0], parts[1], parts[2] if len(parts) > 2 else parts[0]
        return None

    def verify(self, path: str, tag: str, commit: str, keys: Keys) -> Verdict:
        """The verdict on tag `tag` at `commit`: its tag object's signature, else its commit's.

        UpstreamUnavailable (transient, never a verdict) when the tag is not there at that commit.
        """
        ref = self.tag_ref(path, tag)
        if ref is None or ref[2] != commit:
            raise UpstreamUnavailable(f"tag {tag} is not at commit {commit[:12]} in gitreg's repository now")
        obj, kind, _ = ref
        on_tag = self._verify(path, "verify-tag", obj, keys) if kind == "tag" else None
        if on_tag is not None and on_tag.ok:
            return _as(on_tag, "tag", obj)
        on_commit = self._verify(path, "verify-commit", commit, keys)
        if on_commit.ok:
            return _as(on_commit, "commit", obj)
        for status in ("bad", "unknown_key"):
            for found in (on_tag, on_commit):
                if found is not None and found.status == status:
                    return _as(found, "tag" if found is on_tag else "commit", obj)
        return Verdict("unsigned", object=obj, reason="neither the tag nor its commit is signed")

    def _verify(self, path: str, command: str, obj: str, keys: Keys) -> Verdict:
        if not SHA_RE.fullmatch(obj):
            raise ValueError("not an object name")
        settings = [*_PROGRAMS, "-c", f"gpg.ssh.allowedSignersFile={keys.allowed_signers}"]
        run, _ = self.runner.output(
            ["git", *settings, command, "--raw", obj],
            "",
            cwd=path,
            timeout=VERIFY_SECONDS,
            extra_env={"GNUPGHOME": keys.gnupghome},
        )
        if run.killed == "timeout":
            raise UpstreamTimeout(f"git {command} took longer than {VERIFY_SECONDS:.0f} s")
        if run.killed is not None:
            raise UpstreamUnavailable("gitreg is shutting down; try again")
        return read_verdict(run.proc.returncode, run.error_text)

    def _git(self, path: str, args: list[str]) -> tuple[int, str]:
        run, out = self.runner.output(["git", *args], "", cwd=path, timeout=VERIFY_SECONDS)
        if run.killed is not None:
            raise UpstreamTimeout(f"git {args[0]} on gitreg's repository did not finish")
        return run.proc.returncode, out.decode("utf-8", "replace")


def _as(found: Verdict, signed: str, obj: str) -> Verdict:
    return Verdict(found.status, found.signer, found.fingerprint, found.format, signed, obj, found.reason)


# long: one table of what ssh-keygen and gpg say, read top to bottom; split up it would hide which case wins
def read_verdict(status: int, text: str) -> Verdict:
    """A verdict from git's exit status and its `--raw` words (ssh-keygen's lines or gpg's status lines)."""
    if "[GNUPG:]" in text:
        words: dict[str, list[str]] = {}
        for line in text.splitlines():
            if line.startswith("[GNUPG:] "):
                name, _, rest = line[len("[GNUPG:] ") :].partition(" ")
                words.setdefault(name, rest.split(" "))
        valid = words.get("VALIDSIG", [])
        fingerprint = valid[-1] if len(valid) >= 10 else (valid[0] if valid else "")
        if status == 0 and "GOODSIG" in words:
            signer = " ".join(words["GOODSIG"][1:])
            return Verdict("signed", signer, fingerprint, "openpgp")
        if "BADSIG" in words:
            return Verdict(
                "bad", format="openpgp", reason="the OpenPGP signature does not match: the object was altered"
            )
        if "NO_PUBKEY" in words or "ERRSIG" in words:
            key = (words.get("NO_PUBKEY") or words.get("ERRSIG") or [""])[0]
            reason = f"it is signed by OpenPGP key {key}, which is not among [signing] openpgp_keys"
            return Verdict("unknown_key", fingerprint=key, format="openpgp", reason=reason)
        return Verdict(
            "unknown_key", format="openpgp", reason="the OpenPGP signature is not trusted (expired or revoked key?)"
        )
    good = _SSH_GOOD.search(text)
    if status == 0 and good:
        return Verdict("signed", good["principal"], good["fp"], "ssh")
    unknown = _SSH_NO_PRINCIPAL.search(text)
    if unknown or "No principal matched" in text:
        fp = unknown["fp"] if unknown else ""
        reason = f"it is signed by SSH key {fp}, which is not in [signing] allowed_signers".replace("key ,", "a key,")
        return Verdict("unknown_key", fingerprint=fp, format="ssh", reason=reason)
    if "incorrect signature" in text or "Signature verification failed" in text or "BAD" in text:
        return Verdict("bad", format="ssh", reason="the SSH signature does not match: the object was altered")
    if status != 0 and text.strip() and "no signature found" not in text:
        return Verdict(
            "unknown_key", reason=f"the signature could not be verified: {text.strip().splitlines()[-1][:200]}"
        )
    return Verdict("unsigned", reason="no signature")


def build_keyring(home: str, keys_file: str | None) -> None:
    """Make `home` a GNUPGHOME holding the armored public keys of `keys_file` (none: an empty keyring).

    Built beside it and renamed into place: a verification never sees half a keyring. Blocking.
    """
    parent = os.path.dirname(home)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="tmp-gnupg-", dir=parent)
    try:
        with open(os.path.join(tmp, "gpg.conf"), "w", encoding="utf-8") as f:
            f.write("no-autostart\n")  # verifying needs no agent: none is left running
        if keys_file:
            _import_keys(tmp, keys_file)
        if os.path.isdir(home):
            shutil.rmtree(home, ignore_errors=True)
        os.replace(tmp, home)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    for name in os.listdir(parent):  # keyrings of earlier keys
        if name.startswith("gnupg-") and os.path.join(parent, name) != home:
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def _import_keys(home: str, keys_file: str) -> None:
    """gpg --import the armored keys of `keys_file` into `home`; UpstreamUnavailable when it imports none."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "GNUPGHOME": home, "LC_ALL": "C"}
    gpg = ["gpg", "--homedir", home, "--batch", "--no-tty", "--no-autostart"]
    try:
        done = subprocess.run([*gpg, "--import", "--", keys_file], env=env, capture_output=True, timeout=VERIFY_SECONDS)
        listed = subprocess.run(
            [*gpg, "--with-colons", "--list-keys"], env=env, capture_output=True, timeout=VERIFY_SECONDS
        )
    except FileNotFoundError:
        raise UpstreamUnavailable("gpg is not installed (no `gpg` on PATH): OpenPGP keys cannot be read") from None
    except subprocess.TimeoutExpired:
        raise UpstreamUnavailable(f"gpg took longer than {VERIFY_SECONDS:.0f} s to import {keys_file}") from None
    if not any(line.startswith(b"pub:") for line in listed.stdout.splitlines()):
        said = [
            line
            for line in done.stderr.decode(errors="replace").splitlines()
            if not any(noise in line for noise in ("keybox", "trustdb", "Total number"))
        ]
        why = said[0][:300] if said else "no key in it"
        raise UpstreamUnavailable(f"gpg imports no public key from {keys_file}: {why}")


def keys_problem(keys_file: str) -> str | None:
    """Why gpg cannot import `keys_file` (`gitreg check` and `serve` at start), or None. Blocking."""
    with tempfile.TemporaryDirectory(prefix="gitreg-gnupg-check-") as home:
        try:
            _import_keys(home, keys_file)  # --no-autostart: no agent is left behind
        except UpstreamUnavailable as e:
            return e.message
    return None
