""" "Used by": which repositories of the organization call each module, and how.

- `model`: the shared data (`Consumer`: one `module` block; `Install`: an observed CI install);
- `parse`: the parse workers' handler finding the `module` blocks whose `source` is this registry;
- `store`: what the scan found per repository, in memory and in usage.json;
- `scan`: the passes over every repository the orgs list (incremental, by push marker and commit);
- `child`: the process a pass's reads run in (`python -m gitreg.usage.child`);
- `service`: `Usage`, the facade the web layer and the composition root ask, and the scan's schedule;
- `view`: what the API and the page show of one module's consumers to one reader;
- `probe`: `gitreg check --probe --consumers`, one scan in-process, nothing persisted;
- `installs`: observed installs by CI jobs (another helper's).

May import: gitreg.core, config, git, forges, storage, orgs, index (its parse workers); never
identity (what a reader may see comes in as a callable), web, services or cli.
Imports nothing heavy at package import: the parse workers import `parse` by name.
"""
