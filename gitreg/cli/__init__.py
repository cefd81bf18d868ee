"""The command line: `gitreg serve`, `gitreg check`, `gitreg demo`, and `--workers` processes. The top layer.

- `main`: the parser, config lookup, `check` and its probes, exit codes;
- `server`: running the server (its port opened before the app is set up);
- `demo`: the demo repository and the files Terraform needs to install from it;
- `workers`: `serve --workers N`.
"""
