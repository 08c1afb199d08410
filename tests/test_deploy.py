"""What a deployment relies on: production settings pass Django's deploy checks, and every
service in docker-compose.yml runs a command that exists in this project."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import yaml
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": "prod-" + "x9" * 30,
    "ALLOWED_HOSTS": "airlock.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://airlock.example.com",
    "AIRLOCK_ENCRYPTION_KEY": "aP4XjMozeMei1iJ0WDWY_CRpsi7-AQeKtHVTcQ7iOeQ=",
    "DJANGO_SETTINGS_MODULE": "config.settings",
}


def run_manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRLOCK_", "DJANGO_", "DEBUG", "SECRET_KEY"))}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=120)


def test_production_settings_pass_the_deploy_checks():
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_the_deploy_checks_catch_a_missing_encryption_key_and_a_wildcard_host():
    env = {**PRODUCTION_ENV, "AIRLOCK_ENCRYPTION_KEY": "", "ALLOWED_HOSTS": "*"}
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode != 0
    assert "airlock.W001" in result.stderr + result.stdout
    assert "airlock.W002" in result.stderr + result.stdout


def test_production_refuses_to_start_without_a_secret_key():
    result = run_manage("check", env={**PRODUCTION_ENV, "SECRET_KEY": ""})
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def _command_exists(command: list[str]) -> None:
    program, *args = command
    if program == "uvicorn":
        module, attribute = args[0].split(":")
        assert args[0] in {"config.asgi:application", "config.gateway:app"}, args[0]
        assert hasattr(importlib.import_module(module), attribute), args[0]
    elif program == "celery":
        assert args[0] == "-A"
        assert hasattr(importlib.import_module(args[1]), "celery_app")
        assert args[2] in {"worker", "beat"}
    elif program == "python":
        assert args[0] == "manage.py"
        assert args[1] in get_commands(), f"no management command {args[1]}"
    else:
        raise AssertionError(f"unexpected program {program}")


def test_every_compose_service_runs_a_command_that_exists():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "web", "worker", "beat"} <= set(services)
    built = {name: s for name, s in services.items() if s.get("build")}
    assert {"web", "worker", "beat", "migrate", "gateway"} <= set(built)
    for name, service in built.items():
        _command_exists(service["command"])
        env = service["environment"]
        assert env["DATABASE_URL"].startswith("postgres://"), name
        assert env["REDIS_URL"].startswith("redis://"), name
    for name in ("postgres", "redis", "web", "gateway"):
        assert "healthcheck" in services[name], name
    assert (ROOT / "Dockerfile").exists()
