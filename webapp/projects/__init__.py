"""Projects, memberships with roles, API tokens and the audit log."""
