from uuid import UUID

from ninja import Router, Schema

from apps.accounts import selectors

router = Router(tags=["me"])


class OrgOut(Schema):
    id: UUID
    name: str
    slug: str


class MeOut(Schema):
    org: OrgOut
    role: str
    actor: str
    kind: str  # "user" or "token"


@router.get("/me", response=MeOut, summary="Who is calling, and for which organisation")
def me(request):
    actor = request.auth
    org = selectors.get_org(org_id=actor.org_id)
    return {"org": org, "role": actor.role, "actor": actor.label, "kind": "token" if actor.token_id else "user"}
