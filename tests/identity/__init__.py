"""Tests of gitreg/identity/."""
