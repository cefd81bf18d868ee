"""What gitreg keeps under `[storage] path`, and how it keeps it.

- `files`: blocking file work done one way: off the event loop (`run_file_work`), written whole
  (`write_atomically`), crash leftovers removed, large JSON documents encoded and decoded
  without holding the event loop up;
- `state`: a persisted JSON state file (`StateFile`: format, `.damaged` set-aside, dirty flag,
  periodic flush), as catalog.json, index.json and orgs.json are;
- `budget`: `[storage] max_bytes`, one bound over mirrors and archives (`StorageBudget`);
- `mirrors`: bare mirrors of served repositories (`MirrorStore`), and scratch fetches;
- `archives`: module archives built from the mirrors (archive mode);
- `pins`: the commit each tag was first served at (moved-tag safety, tagpins.jsonl).

Git runs only through `gitreg.git` (`MirrorGit`), in the git pool; nothing here builds a git
command line.

May import: `gitreg.core`, `gitreg.config`, `gitreg.git`.
"""
