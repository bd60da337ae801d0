#!/usr/bin/env bash
# Web process: bring the schema and static files up to date, then hand the process over to
# gunicorn (exec) so that SIGTERM from systemd or docker reaches it and shuts it down gracefully.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

python manage.py migrate --noinput
python manage.py collectstatic --noinput
exec gunicorn webapp.config.wsgi:application --bind 0.0.0.0:8000 --workers 3
