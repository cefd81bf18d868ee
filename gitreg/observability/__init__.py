"""What operators see of gitreg: metrics, readiness and logs.

- `metrics`: `Metrics` (the application's own CollectorRegistry, the request and git-call
  instruments, `GET /metrics`'s rendering and token check), `Lifecycle` (`/readyz`), the
  request counting the request wrappers (web/routing.py) call.
- `collectors`: every Prometheus collector, each reading one part of gitreg at scrape time
  (requests, tag cache, shared state, git pool, orgs, archives, index), so the parts they
  describe know nothing of Prometheus.
- `logs`: the access log (aiohttp's); `lines`: JSON log lines and the secret filter, for every
  process (the index process's and `gitreg check`'s too: no aiohttp server imported).

May import: everything below the web layer (`core`, `config`, `git`, `forges`, `storage`,
`replicas`, `orgs`, `registry`, `index`), never `gitreg.web` or `gitreg.cli`; no package below
may import it.
"""
