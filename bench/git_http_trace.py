"""What reading git's HTTP headers costs: `ls-remote` of a 10,000-tag repository over real
smart HTTP, through gitreg's adapter, with git's header trace on (gitreg's hot path since
issue 11: redirects and answers that are not git are seen in it) and off (the same adapter
with `GIT_TRACE_CURL=0`, i.e. what it did before), interleaved in one run.

    python bench/git_http_trace.py [--rounds 21] [--tags 10000]

Reported: median and p90 per call for each, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

from _common import GitHttpChild, machine, median, pct, tagged_repo, workdir
from gitreg.config.model import GitConfig
from gitreg.git.remote import GitAdapter
from gitreg.git.runner import GitRunner


class UntracedRunner(GitRunner):
    """gitreg's runner without git's header trace: the baseline."""

    def environment(self, url: str) -> dict[str, str]:
        return {**super().environment(url), "GIT_TRACE_CURL": "0"}


def measure(url: str, rounds: int, tags: int) -> dict[str, list[float]]:
    """Seconds per `ls_remote_tags` call, trace off and on, interleaved round by round."""
    config = GitConfig(timeout_seconds=60, protocols=("http",))
    with tempfile.TemporaryDirectory() as home:
        adapters = {
            "trace off (before)": GitAdapter(UntracedRunner(config, (), home)),
            "trace on (now)": GitAdapter(GitRunner(config, (), home)),
        }
        times: dict[str, list[float]] = {name: [] for name in adapters}
        for name, adapter in adapters.items():  # warm-up: page cache, git's first run
            assert len(adapter.ls_remote_tags(url).tags) == tags, name
        for _ in range(rounds):
            for name, adapter in adapters.items():
                started = time.perf_counter()
                found = adapter.ls_remote_tags(url)
                times[name].append(time.perf_counter() - started)
                assert len(found.tags) == tags
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--tags", type=int, default=10_000)
    args = parser.parse_args()
    root = workdir("trace")
    tagged_repo(root / "big.git", args.tags)
    server = GitHttpChild(root)
    try:
        times = measure(server.url("big.git"), args.rounds, args.tags)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"# {machine()}")
    print(f"ls-remote --tags of {args.tags} tags over smart HTTP, {args.rounds} rounds each, interleaved")
    for name, values in times.items():
        print(f"  {name:20} median {median(values) * 1000:7.1f} ms   p90 {pct(values, 90) * 1000:7.1f} ms")
    before, now = (median(v) for v in times.values())
    print(f"  ratio now/before: {now / before:.3f}")


if __name__ == "__main__":
    main()
