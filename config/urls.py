from allauth.account import views as account_views
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from oauth2_provider import urls as oauth_urls

from apps.api.api import api
from apps.web.views import oauth, sso

# allauth runs single sign-on only. Its own password pages would be a second way in that skips
# Airlock's sign-in rules, so the names its flow reverses lead to Airlock's pages instead.
allauth_patterns = [
    path("login/", RedirectView.as_view(pattern_name="web:login"), name="account_login"),
    path("logout/", RedirectView.as_view(pattern_name="web:login"), name="account_logout"),
    path("inactive/", RedirectView.as_view(pattern_name="web:login"), name="account_inactive"),
    path("signup/", RedirectView.as_view(pattern_name="web:signup"), name="account_signup"),
    path("password/reset/", RedirectView.as_view(pattern_name="web:password_reset"), name="account_reset_password"),
    path("reauthenticate/", account_views.reauthenticate, name="account_reauthenticate"),
    path("2fa/", include("allauth.mfa.urls")),
    path("3rdparty/", include("allauth.socialaccount.urls")),
    path("oidc/<str:provider_id>/login/", sso.sso_login, name="openid_connect_login"),
    path("oidc/<str:provider_id>/login/callback/", sso.sso_callback, name="openid_connect_callback"),
]

# Airlock's OAuth authorization server for MCP hosts (django-oauth-toolkit): RFC 8414 metadata at the
# root, the endpoints under /o/, with Airlock's consent page (the agent picker) as /o/authorize/.
oauth_patterns = [
    path("authorize/", oauth.ConsentView.as_view(), name="authorize"),
    *[p for p in oauth_urls.base_urlpatterns if p.name in ("token", "revoke-token")],
    *oauth_urls.dcr_urlpatterns,
]

urlpatterns = [
    path("", include((oauth_urls.metadata_urlpatterns[:2], "oauth2_provider_meta"))),
    path("o/", include((oauth_patterns, "oauth2_provider"))),
    path("api/v1/", api.urls),
    path("django-admin/", admin.site.urls),
    path("accounts/", include(allauth_patterns)),
    path("", include("apps.web.urls")),
]
