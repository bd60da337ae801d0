"""Writes for trajectories: production logging, verification, re-scoring, turning failures into evals."""
