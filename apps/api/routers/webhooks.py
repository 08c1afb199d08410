from datetime import datetime
from uuid import UUID

from ninja import Field, Router, Schema, Status
from ninja.pagination import paginate

from apps.api.bodies import Body
from apps.api.pagination import Pagination
from apps.notifications import selectors, services

router = Router(tags=["webhooks"])


class WebhookOut(Schema):
    id: UUID
    name: str
    url: str
    events: list[str]
    enabled: bool
    created_at: datetime


class WebhookIn(Body):
    name: str = Field(..., min_length=1, max_length=100)
    url: str = Field(..., min_length=1, max_length=500)
    events: list[str]
    secret: str = Field("", max_length=200)


class WebhookCreated(Schema):
    webhook: WebhookOut
    secret: str  # signs every body (HMAC-SHA256 over "<timestamp>.<body>"); shown once


class DeliveryOut(Schema):
    id: UUID
    webhook_id: UUID
    event: str
    status: str
    attempts: int
    response_status: int | None
    last_error: str
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    created_at: datetime

    @staticmethod
    def resolve_event(obj) -> str:
        return obj.notification.event


@router.get("", response=list[WebhookOut])
@paginate(Pagination)
def list_webhooks(request):
    request.auth.require("members.manage")
    return selectors.org_webhooks(org_id=request.auth.org_id)


@router.post("", response={201: WebhookCreated})
def create_webhook(request, payload: WebhookIn):
    hook, secret = services.create_webhook(actor=request.auth, name=payload.name, url=payload.url,
                                           events=payload.events, secret=payload.secret)
    return Status(201, {"webhook": hook, "secret": secret})


@router.get("/deliveries", response=list[DeliveryOut])
@paginate(Pagination)
def list_deliveries(request):
    request.auth.require("members.manage")
    return selectors.recent_deliveries(org_id=request.auth.org_id, limit=500)


@router.delete("/{webhook_id}", response={204: None})
def delete_webhook(request, webhook_id: UUID):
    services.delete_webhook(actor=request.auth, webhook_id=webhook_id)
    return Status(204, None)
