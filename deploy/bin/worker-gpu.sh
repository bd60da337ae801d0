#!/usr/bin/env bash
# GPU worker: one job at a time per host (a training or rollout job owns the whole GPU), no
# prefetching, so a queued job waits in Redis for an idle host instead of behind a busy one.
# CRUCIBLE_WORKER_QUEUES replaces the queue list for this one process.
# exec, so that SIGTERM reaches celery and starts its warm shutdown.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

exec celery -A webapp.config worker -Q "${CRUCIBLE_WORKER_QUEUES:-train,rollout}" -l INFO --concurrency 1 --prefetch-multiplier 1 -O fair
