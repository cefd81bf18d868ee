"""The module browser: server-rendered HTML pages over the index, for people (the JSON API is `web.api`).

- `views`: the module page's handler and `add_ui`, which registers every page.
- `listing`: the pages that list modules (`/` with search, filters, sort and page numbers; one name's systems).
- `session`: logging in with a registry token, the signed session cookie, the page guard.
- `render`: the Jinja2 environment, HTML error pages, security headers, template helpers.
- `readme`: READMEs rendered to safe HTML (markdown-it-py, raw HTML off, safe links only), for the
  pages in parse worker processes within a budget, remembered per commit (`Readmes`).
- `templates/` (Jinja2, autoescape on) and `static/` (one stylesheet, one script: copy buttons and
  the section bar's current mark; icons; no inline script).

May import `gitreg.web` (keys, auth, signing) and everything below it; nothing imports the
pages but the app factory.
"""
