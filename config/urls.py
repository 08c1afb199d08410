from allauth.account import views as account_views
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from apps.api.api import api
from apps.web.views import sso

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

urlpatterns = [
    path("api/v1/", api.urls),
    path("django-admin/", admin.site.urls),
    path("accounts/", include(allauth_patterns)),
    path("", include("apps.web.urls")),
]
