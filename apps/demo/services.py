"""The demo organisation (slug `demo`): what a newcomer signs into on first start.

Idempotent: a second run finds everything in place and changes nothing. It finishes by starting
one real run of the Refund desk, executed inline by the engine until its refund waits in the
inbox. Passwords are random per installation, kept in var/demo-logins.json (mode 600) so they
can be printed again.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction

from apps.accounts import selectors as accounts
from apps.accounts import services as accounts_services
from apps.accounts.actors import system_actor
from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.approvals.definition_changes import inbox
from apps.core.errors import NotFound
from apps.costs import selectors as costs
from apps.costs import services as costs_services
from apps.costs.pricing import EXAMPLE_PRICE_NOTE
from apps.crews.models import Crew
from apps.demo.agents_and_crews import REFUND_DESK, seed_agents_and_crews
from apps.registry import selectors as registry_selectors
from apps.registry import services as registry_services
from apps.runs import services as runs
from apps.runs import worker as run_worker
from apps.runs.models import Run

DEMO_SLUG = "demo"
ORDER_DESK_NAME = "orders"
DEMO_USERS = [
    ("owner@demo.example", Role.OWNER),
    ("approver@demo.example", Role.APPROVER),
    ("builder@demo.example", Role.BUILDER),
    ("viewer@demo.example", Role.VIEWER),
]


@dataclass
class DemoSeed:
    created: bool
    logins: dict[str, str | None]  # email -> password (None when unknown: set before this file existed)


def _logins_file() -> Path:
    return Path(settings.VAR_DIR) / "demo-logins.json"


def _saved_logins() -> dict[str, str]:
    path = _logins_file()
    return json.loads(path.read_text()) if path.exists() else {}


def _save_logins(logins: dict[str, str]) -> None:
    path = _logins_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(logins, indent=2))
    os.chmod(path, 0o600)


def seed_demo() -> DemoSeed:
    """Writes the demo organisation and its people if missing. Returns what to print."""
    saved = _saved_logins()
    try:
        org = accounts.get_org_by_slug(DEMO_SLUG)
        created = False
    except NotFound:
        owner_email = DEMO_USERS[0][0]
        saved[owner_email] = saved.get(owner_email) or secrets.token_urlsafe(9)
        org, _, _ = accounts_services.create_organization(
            name="Demo Co", slug=DEMO_SLUG, owner_email=owner_email, password=saved[owner_email], via="seed_demo"
        )
        created = True
    actor = system_actor(org.id, "seed_demo")
    with transaction.atomic():
        for email, role in DEMO_USERS[1:]:
            if Membership.objects.filter(org=org, user__username=email).exists():
                continue
            if accounts.user_by_email(email) is None:
                saved[email] = saved.get(email) or secrets.token_urlsafe(9)
                accounts_services.ensure_user(email=email, password=saved[email])
            accounts_services.add_member(actor=actor, email=email, role=role)
            created = True
    created = _seed_order_desk(actor) or created
    created = seed_agents_and_crews(actor) or created
    created = _seed_example_price(actor) or created
    created = _seed_waiting_run(actor) or created
    _save_logins(saved)
    return DemoSeed(created=created, logins={email: saved.get(email) for email, _ in DEMO_USERS})


def _seed_order_desk(actor) -> bool:
    """Registers the bundled order desk (apps/demo/order_desk.py) as an internal stdio server
    named `orders` and syncs it once. Returns False when it is already registered."""
    if registry_selectors.get_server_by_name(org_id=actor.org_id, name=ORDER_DESK_NAME):
        return False
    server = registry_services.create_server(
        actor=actor, name=ORDER_DESK_NAME, transport="stdio", trust_tier="internal", command=sys.executable,
        args=["-m", "apps.demo.order_desk", "stdio"], cwd=str(settings.BASE_DIR),
        env={"ORDER_DESK_DATA": str(Path(settings.VAR_DIR) / "order-desk.json")},
        description="The bundled demo order desk: order lookups, refunds, customer deletion.", sync=False,
    )
    registry_services.sync_server(actor=actor, server_id=server.id, review=inbox)
    return True




def _seed_example_price(actor) -> bool:
    """A made-up price for the scripted model (whose calls cost nothing), marked as an example in its note,
    so the demo's runs and the costs page show spend from the first run on. Skipped once it has a price."""
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone


    if any(p.model == "scripted" for p in costs.org_prices(org_id=actor.org_id)):
        return False
    costs_services.set_model_price(actor=actor, model="scripted", provider="scripted", input_per_mtok=Decimal(3),
                                   output_per_mtok=Decimal(15), effective_from=timezone.now() - timedelta(days=30),
                                   note=EXAMPLE_PRICE_NOTE)
    return True


def _seed_waiting_run(actor) -> bool:
    """Starts one real run of the Refund desk and runs the engine inline, here in this command (no
    worker needed at seed time), until the refund waits in the inbox. Skipped once any run of the
    crew exists."""
    crew = Crew.objects.filter(org_id=actor.org_id, name=REFUND_DESK).first()
    if crew is None or Run.objects.filter(org_id=actor.org_id, crew=crew).exists():
        return False
    run = runs.start_run(actor=actor, crew_id=crew.id, inputs={"order_id": "A-1001", "amount_cents": 1500},
                         idempotency_key="seed-demo-refund", enqueue=False)
    run_worker.drive_run(run_id=run.id)
    return True
