"""What a deployment relies on: production settings pass Django's deploy checks, and every
service in docker-compose.yml runs a command that exists in this project."""

from __future__ import annotations

import importlib
import os
import posixpath
import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
import yaml
from django.core.management import get_commands
from django.test import override_settings

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": "prod-" + "x9" * 30,
    "ALLOWED_HOSTS": "airlock.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://airlock.example.com",
    "AIRLOCK_ENCRYPTION_KEY": "aP4XjMozeMei1iJ0WDWY_CRpsi7-AQeKtHVTcQ7iOeQ=",
    "DJANGO_SETTINGS_MODULE": "config.settings",
}


def clean_env(env: dict[str, str]) -> dict[str, str]:
    """This process's environment without its Airlock and Django settings, then `env`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRLOCK_", "DJANGO_", "DEBUG", "SECRET_KEY"))}
    return {**base, **env}


def run_manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=clean_env(env),
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


@pytest.mark.parametrize("value", ["fast", "0"])
def test_a_switch_interval_that_is_not_a_number_of_milliseconds_stops_the_start_and_says_so(value):
    result = run_manage("check", env={**PRODUCTION_ENV, "AIRLOCK_WEB_SWITCH_INTERVAL_MS": value})
    assert result.returncode != 0
    assert f"AIRLOCK_WEB_SWITCH_INTERVAL_MS must be a number of milliseconds above 0 and at most 100, not {value!r}" \
        in result.stderr


@pytest.mark.parametrize(("value", "expected"), [(None, 0.001), ("2.5", 0.0025)])
def test_a_web_process_lets_its_event_loop_in_at_the_configured_switch_interval(value, expected):
    """What `uvicorn config.asgi:application` loads; a test process importing the app keeps Python's own."""
    env = clean_env({**PRODUCTION_ENV, **({"AIRLOCK_WEB_SWITCH_INTERVAL_MS": value} if value else {})})
    result = subprocess.run([sys.executable, "-c", "import sys, config.asgi; print(sys.getswitchinterval())"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout.strip().splitlines()[-1]) == pytest.approx(expected)
    import config.asgi  # noqa: F401  (the tests' own import of the app)

    assert sys.getswitchinterval() == pytest.approx(0.005)


def _setting(name: str, env: dict[str, str]) -> str:
    result = run_manage("shell", "-c", f"from django.conf import settings; print(settings.{name})", env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_sign_up_is_off_in_production_unless_turned_on():
    assert _setting("AIRLOCK_ALLOW_SIGNUP", PRODUCTION_ENV) == "False"
    assert _setting("AIRLOCK_ALLOW_SIGNUP", {**PRODUCTION_ENV, "AIRLOCK_ALLOW_SIGNUP": "1"}) == "True"
    assert _setting("AIRLOCK_ALLOW_SIGNUP", {**PRODUCTION_ENV, "DEBUG": "1"}) == "True"


def _command_exists(command: list[str]) -> None:
    program, *args = command
    if program == "sh":  # `sh -c "a && b"`: each part must exist
        assert args[0] == "-c"
        for part in args[1].split("&&"):
            _command_exists(part.split())
    elif program == "uvicorn":
        module, attribute = args[0].split(":")
        assert args[0] in {"config.asgi:application", "config.gateway:app"}, args[0]
        assert hasattr(importlib.import_module(module), attribute), args[0]
    elif program == "celery":
        assert args[0] == "-A"
        assert hasattr(importlib.import_module(args[1]), "celery_app")
        assert args[2] in {"worker", "beat", "inspect"}
    elif program == "python" and args[:2] == ["-m", "config.worker"]:
        assert callable(importlib.import_module("config.worker").main)
    elif program == "python" and args[0] == "manage.py":
        assert args[1] in get_commands(), f"no management command {args[1]}"
    elif program == "python" and args[0] == "-c":
        assert re.search(r"urlopen\('http://127\.0\.0\.1:\d+/(healthz|readyz)'\)", args[1]), args[1]
    else:
        raise AssertionError(f"unexpected program {program}")


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_the_compose_file_is_valid_against_the_compose_specification():
    """The schema docker compose itself validates with, vendored by check-jsonschema (no network)."""
    result = subprocess.run([str(Path(sys.executable).with_name("check-jsonschema")), "--builtin-schema",
                             "vendor.compose-spec", str(ROOT / "docker-compose.yml")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "ok -- validation done" in result.stdout, result.stdout + result.stderr


def test_every_compose_service_runs_a_command_that_exists():
    services = _compose()["services"]
    assert {"postgres", "redis", "web", "worker", "beat"} <= set(services)
    built = {name: s for name, s in services.items() if s.get("build")}
    assert {"web", "worker", "beat", "migrate", "gateway"} <= set(built)
    for name, service in built.items():
        _command_exists(service["command"])
        env = service["environment"]
        assert env["DATABASE_URL"].startswith("postgres://"), name
        assert env["REDIS_URL"].startswith("redis://"), name
        test = service.get("healthcheck", {}).get("test")
        if test:
            _command_exists(test[1:] if test[0] == "CMD" else test[1].split())
    for name in ("postgres", "redis", "web", "gateway", "worker", "beat"):
        assert "healthcheck" in services[name], name
    assert (ROOT / "Dockerfile").exists()


def test_the_compose_stack_keeps_its_data_and_has_no_fixed_password():
    compose = _compose()
    services = compose["services"]
    assert "POSTGRES_PASSWORD" in services["postgres"]["environment"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    assert ":airlock@" not in services["web"]["environment"]["DATABASE_URL"]
    for name in ("web", "worker", "beat", "gateway", "migrate"):
        assert "airlock-data:/var/lib/airlock" in services[name]["volumes"], name  # sandbox work dirs survive
        assert services[name]["environment"]["FORWARDED_ALLOW_IPS"], name  # the client's address, not the proxy's
    assert {"pgdata", "redisdata", "airlock-data"} <= set(compose["volumes"])
    assert int(services["worker"]["stop_grace_period"].rstrip("s")) >= 60  # a step finishes on shutdown
    for name in ("worker", "gateway"):  # they start stdio MCP servers in bubblewrap
        assert "seccomp=unconfined" in services[name]["security_opt"], name
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"FROM node:2[2-9]", dockerfile)  # a current Node for npm MCP servers


def test_every_queue_a_task_goes_to_has_a_worker_in_compose_and_runall():
    """A task routed to a queue no worker consumes waits forever: a resume after a person's decision would."""
    from apps.core.management.commands import runall
    from config.celery import WORKER_QUEUES, app
    from config.worker import worker_args

    routed = {route["queue"] for route in app.conf.task_routes.values()} | {app.conf.task_default_queue}
    assert {"resume", "runs", "default"} <= routed
    assert routed <= set(WORKER_QUEUES.split(","))
    laptop = runall.processes(host="127.0.0.1", port=8000, gateway_port=8001, concurrency=2)["worker"]
    for worker in (_compose()["services"]["worker"]["command"], laptop):  # scripts/run's one worker too
        assert worker[1:3] == ["-m", "config.worker"], worker  # Airlock's worker entry point
        args = worker_args(worker[3:])  # with the queues it consumes when none are named
        assert set(args[args.index("-Q") + 1].split(",")) == set(WORKER_QUEUES.split(","))
    assert worker_args(["-Q", "resume", "-l", "info"]) == ["-Q", "resume", "-l", "info"]  # named queues are kept
    assert worker_args(["--queues=runs"]) == ["--queues=runs"]


def test_beats_periodic_tasks_never_wait_behind_the_runs_backlog():
    """The sweep that takes back a dead worker's run, approval expiry and retention run on `default`: a deep
    `runs` queue (a burst of runs) must not delay them; a run's steps and a decision's resume have their queues."""
    from config.celery import app

    def queue(task: str) -> str:
        return app.amqp.router.route({}, task)["queue"].name

    assert {entry["task"] for entry in app.conf.beat_schedule.values()} >= {"apps.runs.tasks.sweep_stuck_runs",
                                                                           "apps.runs.tasks.expire_approvals"}
    for entry in app.conf.beat_schedule.values():
        assert queue(entry["task"]) == "default", entry["task"]
    assert queue("apps.runs.tasks.execute_run") == "runs" and queue("apps.runs.tasks.resume_run") == "resume"


SETTING_READ = re.compile(r"(?:os\.environ\.get|os\.environ\.setdefault|os\.getenv|env_bool|env_list)"
                          r"""\(\s*["']([A-Z][A-Z0-9_]+)["']""")
# Set by Airlock's own entry points for their processes (config/asgi.py, config/celery.py), or by tests.
NOT_USER_SETTINGS = {"AIRLOCK_DB_POOL", "DJANGO_SETTINGS_MODULE", "CELERY_SKIP_CHECKS", "AIRLOCK_TEST_RUN_ID",
                     "DJANGO_ALLOW_ASYNC_UNSAFE", "CELERY_TASK_ALWAYS_EAGER", "AIRLOCK_TEST_EMBEDDED",
                     "AIRLOCK_UPDATE_SCREENSHOTS"}


def settings_read() -> set[str]:
    names = set()
    for path in [*ROOT.glob("config/*.py"), *ROOT.glob("apps/**/*.py")]:
        if path.name == "settings_test.py":
            continue
        names |= set(SETTING_READ.findall(path.read_text()))
    return names - NOT_USER_SETTINGS


def test_every_setting_the_code_reads_is_in_env_example_and_the_docs():
    """A new environment variable must be documented where operators look: .env.example and the table."""
    names = settings_read()
    assert {"DATABASE_URL", "SECRET_KEY", "AIRLOCK_RUN_CALLS_PER_TOOL", "AIRLOCK_METRICS_TOKEN"} <= names
    example = (ROOT / ".env.example").read_text()
    listed = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example, re.MULTILINE))
    assert names - listed == set(), f"missing from .env.example: {sorted(names - listed)}"
    table = (ROOT / "docs" / "operations.md").read_text()
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", table))
    assert names - documented == set(), f"missing from docs/operations.md: {sorted(names - documented)}"


def test_the_image_collects_static_files_with_production_settings():
    """The build step the serving test below reproduces; DEBUG=0 selects the hashed, compressed storage."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"RUN DEBUG=0 SECRET_KEY=\S+ python manage.py collectstatic --noinput", dockerfile)


# --- the production image's static files ------------------------------------------------------------

# One page per section of the app, as a signed-in owner sees them.
PAGES = ["/", "/servers/", "/agents/", "/crews/", "/runs/", "/inbox/", "/costs/", "/audit/", "/settings/members/",
         "/settings/system/", "/api/v1/docs"]  # the docs page: Swagger UI from our collected files
PRODUCTION_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
ASSET = re.compile(r"""(?:href|src)="(/static/[^"]+)\"""")
CSS_URL = re.compile(r"""url\(["']?([^"')]+)["']?\)""")


class ProxiedClient:
    """Talks to the server as the TLS proxy in front of it would: `Host` and `X-Forwarded-Proto: https`.
    Keeps cookies itself, since Secure cookies would otherwise never go back over this plain HTTP hop."""

    def __init__(self, base_url: str, host: str) -> None:
        self.base_url, self.host, self.cookies = base_url, host, {}

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        headers = {"Host": self.host, "X-Forwarded-Proto": "https", "Origin": f"https://{self.host}",
                   "Referer": f"https://{self.host}{path}",
                   "Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        response = requests.request(method, self.base_url + path, headers=headers, allow_redirects=False,
                                    timeout=30, **kwargs)
        self.cookies.update(response.cookies.get_dict())
        return response


def _collect_static(static_var_dir: Path) -> None:
    result = run_manage("collectstatic", "--noinput", env={**PRODUCTION_ENV, "AIRLOCK_VAR_DIR": str(static_var_dir)})
    assert result.returncode == 0, result.stdout + result.stderr


@contextmanager
def _production_server(var_dir: Path, log: Path):
    from tests.processes import free_port, stop, test_database_url, wait_for_port

    port = free_port()
    env = clean_env({**PRODUCTION_ENV, "AIRLOCK_VAR_DIR": str(var_dir), "DATABASE_URL": test_database_url(),
                     "PYTHONUNBUFFERED": "1"})
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
                                 "--port", str(port), "--proxy-headers"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port, proc, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


def _assets_of(client: ProxiedClient, html: str, fetched: dict[str, int]) -> None:
    """Fetches every static file the page links, and every file those stylesheets point at (fonts)."""
    for path in ASSET.findall(html):
        if path in fetched:
            continue
        response = client.request("GET", path)
        fetched[path] = response.status_code
        if path.endswith(".css") and response.ok:
            for ref in CSS_URL.findall(response.text):
                if ref.startswith("data:"):
                    continue
                target = posixpath.normpath(posixpath.join(posixpath.dirname(path), ref.split("?")[0].split("#")[0]))
                fetched[target] = client.request("GET", target).status_code


@pytest.mark.django_db(transaction=True)
def test_the_production_build_serves_every_section_with_its_collected_assets(tmp_path):
    """What the Dockerfile does: collectstatic with DEBUG=0, then serve from the collected files only."""
    from tests.factories import PASSWORD, make_org, owner_of

    _collect_static(tmp_path)
    assert (tmp_path / "staticfiles" / "staticfiles.json").exists()
    with override_settings(PASSWORD_HASHERS=PRODUCTION_HASHERS):  # the tests' fast hasher is not one of them
        owner = owner_of(make_org("Acme"))
    with _production_server(tmp_path, tmp_path / "web.log") as url:
        client = ProxiedClient(url, "airlock.example.com")
        login = client.request("GET", "/login/")
        assert login.status_code == 200, login.text[:500]
        fetched: dict[str, int] = {}
        _assets_of(client, login.text, fetched)
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        signed_in = client.request("POST", "/login/", data={"csrfmiddlewaretoken": csrf, "username": owner.user.email,
                                                            "password": PASSWORD})
        assert signed_in.status_code == 302, signed_in.text[:500]
        assert "/signup/" not in login.text
        assert client.request("GET", "/signup/").status_code == 404
        for page in PAGES:
            response = client.request("GET", page)
            assert response.status_code == 200, f"{page}: {response.status_code}\n{response.text[:500]}"
            _assets_of(client, response.text, fetched)
    # Hashed names prove the pages link the collected manifest, not the source folder.
    assert any(re.search(r"tabler\.min\.[0-9a-f]{12}\.css$", p) for p in fetched), sorted(fetched)
    assert any(p.endswith(".woff2") for p in fetched), sorted(fetched)
    assert any(re.search(r"ninja/swagger-ui-bundle\.[0-9a-f]{12}\.js$", p) for p in fetched), sorted(fetched)
    assert {p: s for p, s in fetched.items() if s != 200} == {}
