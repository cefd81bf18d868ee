"""The composition root: the services of one process, built from the config (`compose.Services`).

One plain object builds every service (the git pool, the tag cache, the registry, the index, the
identity door...) in dependency order and closes them in reverse; the role (index.process.Role)
decides which a process has. The web layer wires HTTP to it (web/app.py), the index process runs
it without any HTTP (indexer.py), and the tests get what production gets through `create_app`.

`provider_hashes`: the parse workers that compute provider zips' `h1:` (the providers' layer is
below the parse workers', so the root hands them in). `release_providers`: the providers' services
as the serving process runs them (imported only there: the index process never serves one).

May import every package below it; imported by `gitreg.web` and `gitreg.indexer`.
"""
