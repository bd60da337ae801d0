"""The Crucible Django project: one app per area, configured from environment variables."""
