"""Pure vocabulary: errors, module addresses, versions, Git URLs, secret comparison, shared work.

- `errors`: gitreg's exceptions (each web answer's status is decided from them, in one place).
- `names`: the address grammar (namespace/name/system) and the checks of a request's segments.
- `versions`: the one SemVer 2.0 grammar (`SEMVER`), versions chosen from tags, and their order.
- `urls`: the one parser of Git URLs and scp-like addresses, identities, masking.
- `secrets`: constant-time comparison and digests of secrets.
- `content`: the content key (repository, path, commit) of archives and details files.
- `flight`: in-flight de-duplication (`InFlight`) and remembered failures (`Remembered`).
- `events`: `Signal`, the one observer style (an emitter owns one per event; listeners connect).

Nothing here does I/O or knows aiohttp's server. May import: the standard library and small
parsing libraries (semver) only, and other `gitreg.core` modules; nothing else of gitreg.
"""
