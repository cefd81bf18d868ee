"""The browse index: what list, search and the pages answer from, built in the background.

- `model`: the values (IndexEntry, IndexedVersion, OrgInfo, IndexStats, ChangeLog, DetailsPending);
- `search`: one generation of the index (View): listing, query matching and ranking;
- `persist`: index.json and the details on disk (the file formats);
- `store`: ModuleIndex, the in-memory store every reader uses, and its Prometheus collector;
- `build`: IndexBuilder, the background work that keeps the store current;
- `details`: module details (DetailsService): one commit's files from git (`tree`), what they
  declare (`declarations`, run by `parse_workers` in child processes within a budget);
- `files`: the images of a module's folder at a commit (a README's diagrams, for the pages);
- `protocol`: the messages between the serving process and the index process, and their wire forms;
- `process`: the serving process's side of that pipe, `child` the index process's (its entry point
  is gitreg/indexer.py).

May import: gitreg.core, config, git, forges, storage, replicas, orgs, registry (never web, cli,
observability or gitreg.indexer, which are above it).
"""
