"""Real components for the tests and benchmarks: repositories, a smart-HTTP git server, Terraform."""
