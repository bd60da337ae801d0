"""What every app of the web app uses: keyset pagination, input bounds, the schema-driven form.

Nothing here imports a domain app (projects, datasets, verifiers, trajectories, runs) or
the HTTP layers (api, dashboard): they all import it. tests/test_layering.py holds that.
"""
