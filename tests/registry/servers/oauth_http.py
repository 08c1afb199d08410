"""An MCP server over Streamable HTTP protected by OAuth with the SDK's server-side auth: it answers 401 with
a `WWW-Authenticate` resource-metadata hint, publishes RFC 9728 metadata naming the test authorization server
(tests/registry/oauth_as) and verifies each token by introspection there, refusing tokens issued for another
resource.

    python -m tests.registry.servers.oauth_http PORT AS_URL
"""

import base64
import sys
import time

import httpx2
import uvicorn
from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings

from tests.registry.oauth_as.server import RS_CLIENT, RS_SECRET

PORT, AS_URL = int(sys.argv[1]), sys.argv[2]
RESOURCE = f"http://127.0.0.1:{PORT}/mcp"


class Introspecting(TokenVerifier):
    async def verify_token(self, token: str) -> AccessToken | None:
        basic = base64.b64encode(f"{RS_CLIENT}:{RS_SECRET}".encode()).decode()
        async with httpx2.AsyncClient(trust_env=False) as http:
            response = await http.post(f"{AS_URL}/o/introspect/", data={"token": token},
                                       headers={"Authorization": f"Basic {basic}"})
        body = response.json() if response.status_code == 200 else {}
        if not body.get("active") or (body.get("exp") and body["exp"] < time.time()):
            return None
        aud = body.get("aud") or []
        resource = aud[0] if isinstance(aud, list) and aud else aud or None
        return AccessToken(token=token, client_id=body.get("client_id", ""),
                           scopes=(body.get("scope") or "").split(), expires_at=body.get("exp"), resource=resource)


mcp = MCPServer("oauth-guarded", token_verifier=Introspecting(),
                auth=AuthSettings(issuer_url=AS_URL, resource_server_url=RESOURCE, required_scopes=["mcp:tools"],
                                  validate_token_resource=True))


@mcp.tool()
def whoami() -> str:
    """Say which resource the caller's token was issued for."""
    token = get_access_token()
    return f"token for {token.resource if token else 'nobody'}"


if __name__ == "__main__":
    uvicorn.run(mcp.streamable_http_app(), host="127.0.0.1", port=PORT, log_level="warning", lifespan="on")
