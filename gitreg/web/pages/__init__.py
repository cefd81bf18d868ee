"""The module browser: server-rendered HTML pages over the index, for people (the JSON API is `web.api`).

- `views`: the module page's handlers (one module, a module's images) and `add_ui`, which registers every page.
- `listing`: the pages that list modules (`/` with search, filters, sort and page numbers; one name's systems).
- `session`: logging in with a registry token, the signed session cookie, the page guard.
- `render`: the Jinja2 environment, HTML error pages, security headers, template helpers.
- `markdown`: repository Markdown as the Git hosts render it (markdown-it-py, raw HTML through nh3's
  allow-list, `user-content-` ids, relative URLs into the repository or the files endpoint);
- `readme`: READMEs and descriptions rendered by it in parse worker processes within a budget,
  remembered per commit (`Readmes`).
- `templates/` (Jinja2, autoescape on) and `static/` (one stylesheet, one script: copy buttons, the
  section bar's current mark and the reload of pages still being read; icons; no inline script).

May import `gitreg.web` (keys, auth, signing) and everything below it; nothing imports the
pages but the app factory.
"""
