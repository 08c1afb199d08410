"""The one NinjaAPI: /api/v1/, OpenAPI at /api/v1/openapi.json, docs at /api/v1/docs."""

from __future__ import annotations

import json

from django.shortcuts import render
from ninja import NinjaAPI
from ninja.openapi.docs import Swagger

from apps.api import errors
from apps.api.auth import API_AUTH
from apps.api.openapi import document_errors
from apps.api.parsing import StrictParser
from apps.api.routers import (
    agents,
    approvals,
    audit,
    costs,
    crews,
    gateway_keys,
    llm_connections,
    me,
    members,
    resources,
    runs,
    servers,
    standing_approvals,
    tokens,
    tool_calls,
    tools,
    webhooks,
)


class LocalSwagger(Swagger):
    """The docs page from ninja's own template and files, served by us (config/settings.py, NINJA_DIR): no CDN and no
    inline script. ninja chooses these only when it is an installed app, which Airlock leaves it out of."""

    def render_page(self, request, api, **kwargs):
        self.settings["url"] = self.get_openapi_url(api, kwargs)
        return render(request, self.template, {
            "swagger_settings": json.dumps(self.settings, indent=1), "api": api,
            "add_csrf": any(getattr(auth, "csrf", False) for auth in api.auth or ())})


class AirlockAPI(NinjaAPI):
    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        return document_errors(super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params))


api = AirlockAPI(
    title="Airlock API",
    version="1",
    description="Control plane for teams of LLM agents. Authenticate with `Authorization: Bearer <token>`.",
    auth=API_AUTH,
    urls_namespace="api",
    parser=StrictParser(),
    docs=LocalSwagger(),
)
errors.install(api)
api.add_router("/", me.router)
api.add_router("/members", members.router)
api.add_router("/tokens", tokens.router)
api.add_router("/audit", audit.router)
api.add_router("/llm-connections", llm_connections.router)
api.add_router("/agents", agents.router)
api.add_router("/agents", runs.agent_runs)
api.add_router("/crews", crews.router)
api.add_router("/crews", runs.crew_runs)
api.add_router("/servers", servers.router)
api.add_router("/tools", tools.router)
api.add_router("/resources", resources.router)
api.add_router("/runs", runs.router)
api.add_router("/tool-calls", tool_calls.router)
api.add_router("/approvals", approvals.router)
api.add_router("/standing-approvals", standing_approvals.router)
api.add_router("/webhooks", webhooks.router)
api.add_router("/gateway-keys", gateway_keys.router)
api.add_router("/costs", costs.router)
