"""gitreg: a Terraform and OpenTofu module registry that serves modules straight from Git tags."""

__version__ = "0.1.0"
