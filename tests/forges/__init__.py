"""Tests of gitreg/forges/."""
