"""Who marked a server or tool "trusted output", and when: the same two fields on both, read from the audit log
once per object (the two fields share the lookup)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from ninja import Field, Schema

from apps.api.bodies import Body
from apps.registry import selectors


def _setting(obj):
    if not hasattr(obj, "_trusted_output_setting"):
        obj._trusted_output_setting = selectors.trusted_output_setting(obj)
    return obj._trusted_output_setting


class TrustedOutputFields(Schema):
    trusted_output_set_by: str  # who marked it trusted ('' when not trusted)
    trusted_output_set_at: datetime | None

    @staticmethod
    def resolve_trusted_output_set_by(obj) -> str:
        setting = _setting(obj)
        return setting.by if setting else ""

    @staticmethod
    def resolve_trusted_output_set_at(obj) -> datetime | None:
        setting = _setting(obj)
        return setting.at if setting else None


class OutputTrustIn(Body):
    trust: Literal["trusted", "outside", ""] = Field(description=(
        '"trusted": its results do not taint a run by where they come from; "outside": they are text written '
        'outside the organisation (emails, tickets, web pages), so reading one taints the run as a third-party '
        'result does, whatever the tier and hints say; "": the tier and hints decide. A scanner finding taints '
        "regardless. Admins only; audited."))
