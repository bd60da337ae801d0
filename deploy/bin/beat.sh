#!/usr/bin/env bash
# Celery beat: schedules the periodic lease reaper and the experiment sweep (advance_experiments).
# Run one beat for the whole deployment, however many hosts there are: the reaper's updates are conditional, so a second beat does no harm, but
# it only doubles the work.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

exec celery -A webapp.config beat -l INFO
