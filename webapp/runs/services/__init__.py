"""Writes for runs, jobs, checkpoints and aliases. Views and tasks call these, never the ORM directly."""
