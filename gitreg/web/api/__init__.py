"""The JSON endpoints: the module registry protocol (`modules`), the browsing API (`browse`) and webhooks."""
