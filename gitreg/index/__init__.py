"""The browse index: what list, search and the pages answer from, built in the background.

- `model`: the values (IndexEntry, IndexedVersion, OrgInfo, IndexStats, ChangeLog, DetailsPending);
- `search`: one generation of the index (View): listing, query matching and ranking;
- `persist`: index.json and the details on disk (the file formats);
- `store`: ModuleIndex, the in-memory store every reader uses, and its Prometheus collector;
- `build`: IndexBuilder, the background work that keeps the store current;
- `details`: module details read from tagged trees, parsed by `parse_workers` in child processes;
- `files`: the images of a module's folder at a commit (a README's diagrams, for the pages);
- `protocol`: the messages between the serving process and the index process, and their wire forms;
- `process`: both sides of that pipe (the entry point of the index process is gitreg/indexer.py).

May import: gitreg.core, config, git, forges, storage, replicas, orgs, registry (never web, cli,
observability or gitreg.indexer, which are above it).
"""
