"""State several replicas share (Redis), or this process alone keeps (memory).

- `base`: `SharedState`, the Protocol the rest of gitreg holds (tag lists through a shared
  lock, invalidations, moved-tag records, download counts, the index lease). Callers ask it
  what it answers (`is_shared`, `up`, `leading()`), never which backend it is.
- `memory`: `MemoryShared`, this process alone (`[cache] backend = "memory"`, the index
  process, the services' defaults).
- `redis`: `RedisShared`, replicas sharing Redis; an optimisation of local truth, never a
  dependency (its docstring tells how). It owns the connection (`wire`: what its parts use of
  it) and hands each concern to one part:
- `tags`: `SharedTags`, tag lists behind one lock per repository, and invalidations.
- `lease`: `SharedIndex`, the index lease and the index the leader publishes.
- `counts`: `SharedDownloads`, download counts summed across replicas.
- `pinning`: `SharedPins`, moved-tag records in Redis: the earliest pin wins on every replica,
  each replica's pins on disk published again at every (re)connect.
- `owning`: `SharedOwners`, org module owners: the earliest holder wins on every replica.
- `access`: `SharedAccess`, Git hosts' "can read" answers, asked once across replicas.
- `logins`: `SharedLogins`, the tokens `terraform login` and sign-in issued (digests, host
  tokens sealed), the revocation log beside them, and their one-time codes, shared so that every
  replica accepts and revokes alike.
- `installs`: `SharedInstalls`, observed CI installs of each module, newest time kept, bounded.
- `values`: what is read back from Redis, checked (only values gitreg itself writes).
- `connection`: talking to Redis (fail-fast client, masked error texts, `check_redis` for
  `gitreg check`).
- `factory`: `make_shared`, the one place that picks a backend from the config.

May import: `gitreg.core`, `gitreg.config`, `gitreg.git` (and redis-py, lazily).
"""
