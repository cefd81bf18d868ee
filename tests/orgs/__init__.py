"""Tests of gitreg/orgs/."""
