"""Git: the only package that starts git.

- `pool`: the one bounded pool (slots, per-host limits, priorities) blocking git work runs in;
- `runner`: the one place a git process starts (`GitRunner.spawn`): hardened environment with
  the host's credential, timeout, process group, counted, killed at shutdown;
- `remote`: calls to Git hosts (`GitAdapter`: `ls-remote` tag listing as a `TagList`);
- `mirror`: commands on gitreg's own bare repositories (`MirrorGit`: init, fetch, archive,
  tag dates, pinned-commit refs);
- `failures`: what a failed call to a Git host stands for (stderr and HTTP header trace).

Callers outside this package never build a git command line nor start git; they call the
operations of `remote` and `mirror` (in the pool).

May import: `gitreg.core`, `gitreg.config`.
"""
