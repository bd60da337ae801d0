"""Celery tasks and the job runner: claim, run, heartbeat, cancel, reap.

Tasks stay thin: they take a job id and call the runner, which owns the
lifecycle through webapp.runs.services.jobs.
"""
