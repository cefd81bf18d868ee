"""The index process starts quickly: `gitreg serve` starts it before building its application
(index/process.py, EarlyStart), and what it imports before it can take its seed is the wait
before an org's first `ls-remote` (#33). It imports none of the serving process's own rooms."""

from __future__ import annotations

import json
import subprocess
import sys

# Serving-only: HTTP, sign-in and tokens (PyJWT and cryptography with them), providers, "used by",
# observed installs, provenance. The index process builds none of them (services/compose.py).
NOT_IMPORTED = (
    "aiohttp.web",  # (the serving process's HTTP server; the access log is aiohttp's: observability/logs.py)
    "gitreg.identity",
    "jwt",
    "cryptography",
    "gitreg.providers.service",
    "gitreg.usage.service",
    "gitreg.usage.installs",
    "gitreg.registry.provenance",
)


def test_the_index_process_does_not_import_what_only_the_serving_process_runs():
    code = (
        "import json, sys; import gitreg.indexer; from gitreg.observability.setup import configure_logging; "
        "configure_logging(20, 'json', serve=True); print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = json.loads(done.stdout)
    found = [m for m in loaded if any(m == name or m.startswith(name + ".") for name in NOT_IMPORTED)]
    assert not found, found
