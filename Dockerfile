# One image for web, worker, beat (and later the MCP gateway).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 AIRLOCK_VAR_DIR=/var/lib/airlock
# bubblewrap sandboxes third_party stdio MCP servers; node runs npm-distributed MCP servers.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap nodejs npm libpq5 \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY requirements.lock .
RUN pip install -r requirements.lock
COPY . .
RUN DEBUG=0 SECRET_KEY=build-only python manage.py collectstatic --noinput \
 && useradd --system --home /var/lib/airlock --create-home airlock \
 && chown -R airlock /var/lib/airlock
USER airlock
EXPOSE 8000
CMD ["uvicorn", "config.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--proxy-headers"]
