"""End to end: real Terraform, OpenTofu, Chromium and scanners against a real `gitreg serve`."""
