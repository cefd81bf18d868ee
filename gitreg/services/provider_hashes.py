"""Provider zips' `h1:` hashes computed in parse worker processes (providers.hashstore's hasher).

A release's zip is whatever its publisher uploaded; unzipping and hashing it is CPU that, on a
thread of the server, would share the GIL with the event loop. In a parse worker process
(index.parse_workers) it cannot, a wall-clock budget bounds it and an address-space limit caps
it. Here because the providers' layer sits below the parse workers' (the import-linter layers):
the composition root hands this to the providers' HashStore.
"""

from __future__ import annotations

from gitreg.index.parse_workers import BudgetExceeded, ParseWorkers, WorkerFailed
from gitreg.providers.hashes import HashError, h1_request

# Wall-clock budget of one zip's `h1:` (a 100 MB zip of one binary takes about a second).
H1_SECONDS = 60.0


class WorkerHasher:
    """`await hasher(path)`: hashes.h1_request's answer for the zip at `path`, computed in a parse
    worker (one at a time: the mirror asks for a few zips, each once ever)."""

    def __init__(self, seconds: float = H1_SECONDS) -> None:
        self.seconds = seconds
        self.workers = ParseWorkers(f"{h1_request.__module__}:{h1_request.__name__}", size=1)

    async def __call__(self, path: str) -> dict[str, str]:
        try:
            async with self.workers.budget(self.seconds) as call:
                answer = await call({"path": path})
        except BudgetExceeded:
            return {"error": f"hashing the zip took longer than {self.seconds:g} s"}
        except WorkerFailed as e:
            return {"error": f"the parse worker hashing the zip stopped ({e})"}
        except OSError as e:  # no worker could start: a transient failure, not a verdict on the zip
            raise HashError(f"no parse worker to hash the zip: {e}") from None
        if not isinstance(answer, dict):
            return {"error": "the parse worker's answer was not readable"}
        return {k: v for k, v in answer.items() if isinstance(k, str) and isinstance(v, str)}

    async def close(self) -> None:
        """Kill the worker (a hash still being computed gives no answer)."""
        await self.workers.close()
