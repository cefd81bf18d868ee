"""`terraform init` of 20 modules with realistic history, by every way of getting them (issue 25).

    python bench/init_modes.py [--modules 20] [--commits 300] [--rounds 7] [--quick]

One run, the same 20 repositories (each `--commits` commits, a tag every 30, served over smart
HTTP by `git http-backend`), one root module per way of sourcing them, `terraform init` from an
empty `.terraform` each time, the ways interleaved round by round (one warm-up round first,
not counted: gitreg's tag cache and archives are then warm, as in steady use):

- `local`: `source = "./modules/mN"`, the floor (Terraform copies nothing);
- `archive`: gitreg, `download = "archive"` (an HTTP GET of a built .tar.gz);
- `git-shallow`: gitreg in git mode, `ref = "tag"`, `shallow = true`: `git::...?ref=v1.9.0&depth=1`;
- `git-full`: gitreg in git mode, `ref = "commit"`: `git::...?ref=<sha>` (a full clone);
- `direct`: no registry, `source = "git::http://.../mN.git?ref=v1.9.0"` (a full clone).
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import time
from pathlib import Path

from _common import GIT_ENV, GitHttpChild, copy_repo, machine, median, start_gitreg, workdir, write_config
from tests.support.terraform import REGISTRY_HOST, clean_env, cli_config, require_clients

WAYS = ("local", "archive", "git-shallow", "git-full", "direct")
FILES = ("main.tf", "variables.tf", "outputs.tf", "locals.tf", "README.md", "docs/usage.md", "examples/basic.tf")


def _blob(rng: random.Random, name: str, i: int) -> bytes:
    """A file's content at commit `i`: a few KB of Terraform-ish text, different each time."""
    words = ("subnet", "cidr", "tags", "name", "vpc", "route", "zone", "count", "each", "value")
    if name.endswith(".tf"):
        body = "".join(
            f'variable "{rng.choice(words)}_{i}_{k}" {{\n  type    = string\n  default = "{rng.random():.10f}"\n}}\n'
            for k in range(rng.randint(20, 50))
        )
    else:
        body = "".join(" ".join(rng.choice(words) for _ in range(12)) + "\n" for _ in range(rng.randint(30, 80)))
    return body.encode()


def template_repo(bare: Path, commits: int) -> str:
    """A bare repository of `commits` commits (one or two files changed each) and a tag every 30; the last tag."""
    subprocess.run(["git", "init", "--quiet", "--bare", "-b", "main", str(bare)], check=True, env=GIT_ENV)
    rng = random.Random(25)
    stream: list[bytes] = []
    last = ""
    for i in range(1, commits + 1):
        changed = {name: _blob(rng, name, i) for name in rng.sample(FILES, 2 if i > 1 else len(FILES))}
        if i == 1:
            changed = {name: _blob(rng, name, i) for name in FILES}
        stream.append(f"commit refs/heads/main\nmark :{i}\n".encode())
        stream.append(f"committer bench <bench@example.com> {1_700_000_000 + i * 3600} +0000\n".encode())
        message = f"change {i}".encode()
        stream.append(b"data %d\n%s\n" % (len(message), message))
        if i > 1:
            stream.append(f"from :{i - 1}\n".encode())
        for name, data in sorted(changed.items()):
            stream.append(b"M 100644 inline %s\ndata %d\n%s\n" % (name.encode(), len(data), data))
        if i % 30 == 0 or i == commits:
            last = f"v1.{i // 30}.0" if i % 30 == 0 else f"v1.{i // 30}.1"
            stream.append(f"reset refs/tags/{last}\nfrom :{i}\n\n".encode())
    subprocess.run(["git", "fast-import", "--quiet"], cwd=bare, input=b"".join(stream), check=True, env=GIT_ENV)
    subprocess.run(["git", "gc", "--quiet", "--aggressive"], cwd=bare, check=True, env=GIT_ENV)
    return last


def root_modules(work: Path, names: list[str], git_url: str, tag: str) -> dict[str, Path]:
    """One root module per way, each calling the same `names`."""
    version = tag.removeprefix("v")
    sources = {
        "archive": lambda n: f'source  = "{REGISTRY_HOST}/archive/{n}/null"\n  version = "{version}"',
        "git-shallow": lambda n: f'source  = "{REGISTRY_HOST}/shallow/{n}/null"\n  version = "{version}"',
        "git-full": lambda n: f'source  = "{REGISTRY_HOST}/full/{n}/null"\n  version = "{version}"',
        "direct": lambda n: f'source = "git::{git_url}/{n}.git?ref={tag}"',
        "local": lambda n: f'source = "./modules/{n}"',
    }
    roots = {}
    for way in WAYS:
        root = work / way
        root.mkdir(parents=True)
        (root / "main.tf").write_text("".join(f'module "{n}" {{\n  {sources[way](n)}\n}}\n' for n in names))
        roots[way] = root
    return roots


def local_copies(root: Path, repos: Path, names: list[str], tag: str) -> None:
    """The `local` root's modules: each repository's tree at `tag`, as plain directories."""
    for n in names:
        target = root / "modules" / n
        target.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", "--format=tar", tag], cwd=repos / f"{n}.git", capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)


def init_seconds(terraform: list[str], root: Path, env: dict[str, str]) -> float:
    """Wall seconds of `terraform init` in `root` from an empty `.terraform`."""
    shutil.rmtree(root / ".terraform", ignore_errors=True)
    (root / ".terraform.lock.hcl").unlink(missing_ok=True)
    started = time.perf_counter()
    result = subprocess.run(
        [*terraform, "init", "-input=false", "-no-color", "-backend=false"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"init failed in {root.name}:\n{result.stdout}\n{result.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modules", type=int, default=20)
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 modules, 40 commits, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.modules, args.commits, args.rounds = 3, 40, 1
    terraform = list(require_clients()[0].argv)
    work = workdir("init-modes")
    repos = work / "repos"
    repos.mkdir()
    tag = template_repo(repos / "template.git", args.commits)
    names = [f"m{i}" for i in range(args.modules)]
    for n in names:
        copy_repo(repos / "template.git", repos / f"{n}.git")
    pack = sum(p.stat().st_size for p in (repos / "template.git" / "objects").rglob("*") if p.is_file())
    git_http = GitHttpChild(repos)
    base = git_http.base_url
    config = write_config(
        work / "gitreg.toml",
        f'[storage]\npath = "{work / "store"}"\n[git]\nprotocols = ["http"]\n'
        f'[[modules]]\nnamespace = "shallow"\nrepository = "{base}/{{name}}.git"\nshallow = true\n'
        f'[[modules]]\nnamespace = "full"\nrepository = "{base}/{{name}}.git"\nref = "commit"\n'
        f'[[modules]]\nnamespace = "archive"\nrepository = "{base}/{{name}}.git"\ndownload = "archive"\n',
    )
    server = start_gitreg(["--config", str(config)], work / "gitreg.log")
    try:
        cli = cli_config(work / "cli.tfrc", server.url)
        env = clean_env(work / "home", TF_CLI_CONFIG_FILE=str(cli))
        roots = root_modules(work / "roots", names, base, tag)
        local_copies(roots["local"], repos, names, tag)
        times: dict[str, list[float]] = {way: [] for way in WAYS}
        for way in WAYS:  # warm-up: gitreg's caches and archives filled, git's and the OS's too
            init_seconds(terraform, roots[way], env)
        for r in range(args.rounds):
            for way in WAYS[r % len(WAYS) :] + WAYS[: r % len(WAYS)]:
                times[way].append(init_seconds(terraform, roots[way], env))
        installed = sum(1 for p in (roots["git-shallow"] / ".terraform" / "modules").iterdir() if p.is_dir())
        # What each git way cloned: the tag alone, or the whole history.
        shallow = {way: (roots[way] / ".terraform/modules" / names[0] / ".git/shallow").exists() for way in WAYS[2:]}
        if shallow != {"git-shallow": True, "git-full": False, "direct": False}:
            raise RuntimeError(f"unexpected clone depths: {shallow}")
    finally:
        server.stop()
        git_http.stop()
    print(f"# {machine()}")
    print(
        f"# {args.modules} modules, {args.commits} commits each ({pack / 1024:.0f} KiB of git objects each), tag {tag}"
    )
    print(f"# terraform init from an empty .terraform, {args.rounds} rounds, {installed} modules, medians")
    # Ratios round by round (the ways of one round ran within seconds of each other), then medians.
    print("| way | median s | min s | max s | vs local | vs direct |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for way in WAYS:
        t = times[way]
        vs_local = median([a / b for a, b in zip(t, times["local"], strict=True)])
        vs_direct = median([a / b for a, b in zip(t, times["direct"], strict=True)])
        print(f"| {way} | {median(t):.2f} | {min(t):.2f} | {max(t):.2f} | {vs_local:.2f}x | {vs_direct:.2f}x |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
