"""gitreg's exit codes (the table in docs/command-line.md; `gitreg --help` summarizes it)."""

EXIT_OK = 0
EXIT_PROBE_FAILED = 1
EXIT_CONFIG = 2
