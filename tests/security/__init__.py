"""Adversarial tests: each finding of the security review (issue 32) and a property-based test per class."""
