"""Server-rendered pages (Django templates + htmx)."""
