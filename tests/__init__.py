"""gitreg's tests: one folder per package of gitreg, e2e, house; support: what they drive."""
