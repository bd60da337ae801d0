"""Models, runs, jobs, metrics, checkpoints and their aliases (promotion)."""
