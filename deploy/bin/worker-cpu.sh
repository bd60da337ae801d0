#!/usr/bin/env bash
# CPU worker: light web-side work and CPU verifiers. CRUCIBLE_WORKER_QUEUES replaces the queue
# list for this one process (leave it unset in an env file shared with the GPU worker).
# exec, so that SIGTERM reaches celery and starts its warm shutdown.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

exec celery -A webapp.config worker -Q "${CRUCIBLE_WORKER_QUEUES:-default,verify}" -l INFO --concurrency 2
