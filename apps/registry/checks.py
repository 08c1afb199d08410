"""System check: an AIRLOCK_EGRESS_ALLOW entry that is neither a host name nor an address or CIDR
stops every process at start, instead of failing the first URL check."""

from __future__ import annotations

from django.core.checks import Error, register
from django.core.exceptions import ImproperlyConfigured

from apps.core.egress import allow_list


@register()
def egress_allow_list_check(app_configs, **kwargs):
    try:
        allow_list()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), hint="Give host names, addresses or CIDRs, comma-separated.", id="airlock.E010")]
    return []
