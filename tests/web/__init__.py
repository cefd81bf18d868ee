"""Tests of gitreg/web/."""
