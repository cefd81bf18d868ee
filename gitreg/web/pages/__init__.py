"""The module browser: server-rendered pages, their templates and static files."""
