#!/usr/bin/env bash
# Web process: bring the schema and static files up to date, then hand the process over to
# gunicorn (exec) so that SIGTERM from systemd or docker reaches it and shuts it down gracefully.
# Workers, threads and timeouts: deploy/gunicorn.conf.py (WEB_* variables in deploy/.env.example).
# Serve it behind the buffering proxy (deploy/nginx/), never to the internet directly.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

python manage.py migrate --noinput
python manage.py collectstatic --noinput
exec gunicorn --config deploy/gunicorn.conf.py webapp.config.wsgi:application
