"""Page views, one module per navigation entry: small functions, access through webapp.projects.selectors.access."""
