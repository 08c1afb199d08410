"""Airlock as an OAuth client of an MCP server (the MCP specification's authorization section).

The protocol pieces are the SDK's (`mcp.client.auth`): reading the `WWW-Authenticate` hint, the ordered
protected-resource and authorization-server metadata URLs, dynamic client registration, PKCE, the scope
choice and the RFC 8707 resource. What is ours is the part the SDK runs inline (it waits for the browser
inside the request that got the 401): here the flow is split across two requests of the admin's browser.
`begin` discovers, registers and returns the authorization URL plus a `Pending` record the caller keeps in
the admin's session (bound to the server and the state); `complete` exchanges the code. `fresh` refreshes
an access token before it expires. Every URL goes through the egress guard (`guarded_transport`).

What is stored on `McpServer.oauth` (encrypted, never shown back): the tokens, their expiry, the client
registration and the two metadata documents, so a refresh needs no rediscovery after a restart.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlencode

import anyio
import httpx2
from mcp.client.auth.oauth2 import PKCEParameters
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_client_registration_request,
    create_oauth_metadata_request,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
    get_client_metadata_scopes,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    handle_registration_response,
    validate_authorization_response_iss,
    validate_metadata_issuer,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthMetadata, OAuthToken
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url

from apps.core.egress import check_url, guarded_transport

REFRESH_MARGIN_S = 60  # refresh this long before the access token expires
CLIENT_NAME = "Airlock"


class OAuthFailed(Exception):
    """The flow could not go on; `str(exc)` is safe to show (no token, no secret)."""


@dataclass
class Pending:
    """What the callback needs; kept in the admin's session, never in the database."""

    server_id: str
    state: str
    code_verifier: str
    redirect_uri: str
    resource: str
    scope: str | None
    client: dict[str, Any]
    metadata: dict[str, Any]
    authorization_url: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _http(timeout: float) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=guarded_transport(), follow_redirects=False, trust_env=False,
                              timeout=httpx2.Timeout(timeout))


async def _send(http: httpx2.AsyncClient, request: httpx2.Request) -> httpx2.Response:
    await anyio.to_thread.run_sync(check_url, str(request.url))
    return await http.send(request)


async def probe(url: str, *, timeout: float = 15) -> httpx2.Response:
    """An `initialize` POST without credentials: a 401 with a resource-metadata hint means OAuth."""
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": CLIENT_NAME, "version": "1"}}}
    async with _http(timeout) as http:
        request = http.build_request("POST", url, json=body,
                                     headers={"Accept": "application/json, text/event-stream"})
        response = await _send(http, request)
        await response.aread()
        return response


def wants_oauth(response: httpx2.Response) -> bool:
    return response.status_code == 401 and "bearer" in response.headers.get("www-authenticate", "").lower()


async def begin(*, server_id: str, url: str, redirect_uri: str, client_id: str = "", client_secret: str = "",
                timeout: float = 15) -> Pending:
    """Discovers the resource's and its authorization server's metadata, registers a client (unless
    `client_id` is pre-registered) and builds the authorization URL (PKCE S256, state, resource)."""
    first = await probe(url, timeout=timeout)
    if not wants_oauth(first):
        raise OAuthFailed(f"The server did not ask for OAuth (HTTP {first.status_code} without a Bearer challenge).")
    async with _http(timeout) as http:
        prm = None
        for candidate in build_protected_resource_metadata_discovery_urls(
                extract_resource_metadata_from_www_auth(first), url):
            prm = await handle_protected_resource_response(await _send(http, create_oauth_metadata_request(candidate)))
            if prm is not None:
                break
        if prm is None or not prm.authorization_servers:
            raise OAuthFailed("The server's protected resource metadata names no authorization server.")
        resource = resource_url_from_server_url(url)
        if prm.resource and check_resource_allowed(requested_resource=resource, configured_resource=str(prm.resource)):
            resource = str(prm.resource)
        issuer = str(prm.authorization_servers[0])
        metadata = None
        for candidate in build_oauth_authorization_server_metadata_discovery_urls(issuer, url):
            ok, metadata = await handle_auth_metadata_response(
                await _send(http, create_oauth_metadata_request(candidate)))
            if metadata is not None or not ok:
                break
        if metadata is None:
            raise OAuthFailed(f"No authorization server metadata at {issuer}.")
        try:
            validate_metadata_issuer(metadata, issuer)
        except Exception as exc:
            raise OAuthFailed(f"The authorization server's metadata is not its own: {exc}") from None
        scope = get_client_metadata_scopes(extract_scope_from_www_auth(first), prm, metadata,
                                           ["authorization_code", "refresh_token"])
        client_metadata = OAuthClientMetadata(
            client_name=CLIENT_NAME, redirect_uris=[redirect_uri], grant_types=["authorization_code", "refresh_token"],
            response_types=["code"], token_endpoint_auth_method="client_secret_post" if client_secret else "none",
            scope=scope)
        if client_id:
            client = OAuthClientInformationFull(**client_metadata.model_dump(), client_id=client_id,
                                                client_secret=client_secret or None)
        else:
            if not metadata.registration_endpoint:
                raise OAuthFailed("The authorization server does not register clients dynamically: "
                                  "give a pre-registered client id.")
            try:
                client = await handle_registration_response(await _send(
                    http, create_client_registration_request(metadata, client_metadata, issuer)))
            except Exception as exc:
                raise OAuthFailed(f"Registering Airlock with the authorization server failed: {exc}") from None
    pkce = PKCEParameters.generate()
    state = secrets.token_urlsafe(32)
    params = {"response_type": "code", "client_id": client.client_id, "redirect_uri": redirect_uri, "state": state,
              "code_challenge": pkce.code_challenge, "code_challenge_method": "S256", "resource": resource}
    if scope:
        params["scope"] = scope
    authorization_url = f"{metadata.authorization_endpoint}?{urlencode(params)}"
    return Pending(server_id=server_id, state=state, code_verifier=pkce.code_verifier, redirect_uri=redirect_uri,
                   resource=resource, scope=scope, client=client.model_dump(mode="json", exclude_none=True),
                   metadata=metadata.model_dump(mode="json", exclude_none=True), authorization_url=authorization_url)


def _client(state: dict[str, Any], secrets_: dict[str, Any]) -> OAuthClientInformationFull:
    return OAuthClientInformationFull.model_validate(
        {**state["client"], "client_secret": secrets_.get("client_secret") or None})


async def _token_request(state: dict[str, Any], secrets_: dict[str, Any], data: dict[str, str],
                         timeout: float) -> OAuthToken:
    client = _client(state, secrets_)
    data["client_id"] = client.client_id
    if client.client_secret:
        data["client_secret"] = client.client_secret
    endpoint = str(OAuthMetadata.model_validate(state["metadata"]).token_endpoint)
    async with _http(timeout) as http:
        request = http.build_request("POST", endpoint, data=data,
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        response = await _send(http, request)
        body = await response.aread()
    if response.status_code != 200:
        raise OAuthFailed(f"The authorization server refused the token request (HTTP {response.status_code}).")
    try:
        return OAuthToken.model_validate_json(body)
    except ValueError:
        raise OAuthFailed("The authorization server's token response is not a token.") from None


@dataclass
class Grant:
    """What is kept: `state` on McpServer.oauth (not secret), `secrets` on McpServer.oauth_secrets (encrypted)."""

    state: dict[str, Any]
    secrets: dict[str, Any]


def _grant(token: OAuthToken, state: dict[str, Any], secrets_: dict[str, Any]) -> Grant:
    expires_at = time.time() + token.expires_in if token.expires_in else None
    new_state = {"resource": state["resource"], "scope": token.scope or state.get("scope"),
                 "client": state["client"], "metadata": state["metadata"], "expires_at": expires_at,
                 "lifetime": token.expires_in,
                 "authorized_at": time.time() if "authorized_at" not in state else state["authorized_at"],
                 "refreshed_at": time.time() if "authorized_at" in state else None}
    new_secrets = {"access_token": token.access_token,
                   "refresh_token": token.refresh_token or secrets_.get("refresh_token"),
                   "client_secret": secrets_.get("client_secret")}
    return Grant(state=new_state, secrets={k: v for k, v in new_secrets.items() if v})


async def complete(pending: Pending, *, code: str, state: str, iss: str | None = None,
                   timeout: float = 15) -> Grant:
    """Exchanges the authorization code (with the PKCE verifier and the resource) for tokens. `iss`: the
    RFC 9207 issuer of the authorization response, checked against the metadata's when either has it."""
    if not state or not secrets.compare_digest(state, pending.state):
        raise OAuthFailed("The authorization answer does not belong to this request (state mismatch).")
    try:
        validate_authorization_response_iss(iss, OAuthMetadata.model_validate(pending.metadata))
    except Exception as exc:
        raise OAuthFailed(f"The authorization answer comes from another issuer: {exc}") from None
    if not code:
        raise OAuthFailed("The authorization server sent no code.")
    client = dict(pending.client)
    secrets_ = {"client_secret": client.pop("client_secret", None)}
    base = {"resource": pending.resource, "scope": pending.scope, "client": client, "metadata": pending.metadata}
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": pending.redirect_uri,
            "code_verifier": pending.code_verifier, "resource": pending.resource}
    token = await _token_request(base, secrets_, data, timeout)
    return _grant(token, base, secrets_)


def refresh_due(state: dict[str, Any] | None) -> float | None:
    """When the access token should be refreshed: REFRESH_MARGIN_S before it expires, or half its lifetime
    before when that is shorter. A token that lives less than the margin would otherwise need refreshing the
    moment it arrives, and with rotating refresh tokens each process refreshing in turn revokes the token the
    one before is using. None: it does not expire."""
    if not state or not state.get("expires_at"):
        return None
    margin = min(REFRESH_MARGIN_S, state["lifetime"] / 2) if state.get("lifetime") else REFRESH_MARGIN_S
    return state["expires_at"] - margin


def needs_refresh(state: dict[str, Any] | None, *, now: float | None = None) -> bool:
    due = refresh_due(state)
    return due is not None and (now or time.time()) >= due


async def refresh(state: dict[str, Any], secrets_: dict[str, Any], *, timeout: float = 15) -> Grant:
    """A new access token from the refresh token. Raises OAuthFailed (then a person must authorize again)."""
    if not secrets_.get("refresh_token"):
        raise OAuthFailed("The access token expired and the authorization server gave no refresh token.")
    data = {"grant_type": "refresh_token", "refresh_token": secrets_["refresh_token"], "resource": state["resource"]}
    token = await _token_request(state, secrets_, data, timeout)
    return _grant(token, state, secrets_)
