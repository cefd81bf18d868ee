"""Tests of gitreg/replicas/."""
