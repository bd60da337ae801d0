"""Trajectories, human reviews and failure buckets."""
