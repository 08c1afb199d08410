# One image for web, worker, beat and the MCP gateway.
# Node 22 (current LTS) for npm-distributed MCP servers: Debian bookworm's own nodejs is 18, which
# several servers (and the MCP conformance suite) no longer support. Copied from the official image.
FROM node:22-bookworm-slim AS node

FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 AIRLOCK_VAR_DIR=/var/lib/airlock
# bubblewrap sandboxes third_party stdio MCP servers (see docker-compose.yml's x-sandbox).
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap libpq5 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
 && node --version && npm --version

WORKDIR /app
COPY requirements.lock .
RUN pip install --require-hashes -r requirements.lock
COPY . .
RUN DEBUG=0 SECRET_KEY=build-only python manage.py collectstatic --noinput \
 && useradd --system --home /var/lib/airlock --create-home airlock \
 && mkdir -p /var/lib/airlock/metrics \
 && chown -R airlock /var/lib/airlock
USER airlock
# The compose file mounts a volume here: sandbox work folders, beat schedule, metrics files.
VOLUME /var/lib/airlock
EXPOSE 8000
# uvicorn and Celery both stop gracefully on SIGTERM (Celery: warm shutdown, the running step finishes).
STOPSIGNAL SIGTERM
CMD ["uvicorn", "config.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--proxy-headers"]
