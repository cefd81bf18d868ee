"""The tree's own rules, and what ships around the code: docs, packaging, deployment."""
