"""Verifiers: a name and a kind, with an immutable version per configuration change."""
