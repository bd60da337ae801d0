"""REST API with an OpenAPI schema (django-ninja), for scripts and production logging."""
