"""Real release signatures: SSH keys made by `ssh-keygen`, OpenPGP keys by `gpg`, tags and commits signed by git."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.repos import GitRepo


def ssh_key(directory: Path, name: str) -> Path:
    """A new ed25519 key pair `directory/name` (+ `.pub`), no passphrase: the private key's path."""
    directory.mkdir(parents=True, exist_ok=True)
    key = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key


def allowed_signers(path: Path, signers: dict[str, Path]) -> Path:
    """Write git's allowed-signers file: each principal with its key's public half."""
    lines = [f"{principal} {Path(str(key) + '.pub').read_text().strip()}" for principal, key in signers.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _ssh(key: Path) -> list[str]:
    return ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"]


def ssh_signed_tag(repo: GitRepo, name: str, key: Path, message: str | None = None) -> str:
    """An annotated tag `name` at HEAD signed with SSH `key` (`git tag -s`), pushed; its commit."""
    repo.git(*_ssh(key), "tag", "--force", "-s", "-m", message or f"release {name}", name)
    repo.git("push", "--quiet", "--force", "origin", f"refs/tags/{name}")
    return repo.git("rev-parse", f"{name}^{{commit}}")


def ssh_signed_commit(repo: GitRepo, files: dict[str, str], key: Path) -> str:
    """A commit of `files` signed with SSH `key` (`git commit -S`), pushed; its SHA."""
    for rel, content in files.items():
        (repo.work / rel).write_text(content)
    repo.git("add", "-A")
    repo.git(*_ssh(key), "commit", "--quiet", "-S", "-m", "signed change")
    repo.git("push", "--quiet", "origin", "main")
    return repo.head()


def tampered_tag(repo: GitRepo, signed: str, name: str) -> str:
    """Tag `name`: a copy of signed tag `signed` with its message rewritten, the signature kept; pushed."""
    text = repo.git("cat-file", "tag", signed)
    forged = text.replace(f"tag {signed}\n", f"tag {name}\n").replace("release", "forged release", 1)
    obj = subprocess.run(
        ["git", "hash-object", "-t", "tag", "-w", "--stdin"],
        cwd=repo.work,
        input=forged + "\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    repo.git("update-ref", f"refs/tags/{name}", obj)
    repo.git("push", "--quiet", "--force", "origin", f"refs/tags/{name}")
    return obj


class OpenPgpKey:
    """A real OpenPGP key made by `gpg --batch` in a GNUPGHOME of its own; its armored public half."""

    def __init__(self, home: Path, uid: str) -> None:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.home = home
        self.uid = uid
        self.env = {**os.environ, "GNUPGHOME": str(home)}
        subprocess.run(
            ["gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"],
            env=self.env,
            check=True,
            capture_output=True,
        )
        listing = subprocess.run(
            ["gpg", "--with-colons", "--list-keys", uid], env=self.env, check=True, capture_output=True, text=True
        ).stdout
        self.fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))

    def export(self, path: Path) -> Path:
        """Write the armored public key to `path`."""
        armored = subprocess.run(
            ["gpg", "--armor", "--export", self.fingerprint], env=self.env, check=True, capture_output=True
        ).stdout
        path.write_bytes(armored)
        return path

    def signed_tag(self, repo: GitRepo, name: str) -> str:
        """An annotated tag `name` at HEAD signed with this key (`git tag -s`), pushed; its commit."""
        repo.git("-c", "gpg.program=gpg", "-c", f"user.signingkey={self.fingerprint}", "tag", "-s", "-m", name, name,
                 env={"GNUPGHOME": str(self.home)})  # fmt: skip
        repo.git("push", "--quiet", "origin", f"refs/tags/{name}")
        return repo.git("rev-parse", f"{name}^{{commit}}")

    def kill_agent(self) -> None:
        """Stop the gpg-agent key generation started."""
        subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "all"], check=False, capture_output=True)


@contextmanager
def openpgp_key(home: Path, uid: str) -> Iterator[OpenPgpKey]:
    """An OpenPGP key for the block; its gpg-agent killed after it."""
    key = OpenPgpKey(home, uid)
    try:
        yield key
    finally:
        key.kill_agent()
