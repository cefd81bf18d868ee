"""The command line: `gitreg serve`, `gitreg check`, and `--workers` processes. The top layer."""
