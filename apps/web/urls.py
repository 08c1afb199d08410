from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy

from apps.web.views import audit, auth, dashboard, members, system, tokens

app_name = "web"

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    path("healthz", dashboard.healthz, name="healthz"),
    # Sign in and accounts
    path("login/", auth.SignInView.as_view(), name="login"),
    path("logout/", auth.sign_out, name="logout"),
    path("signup/", auth.sign_up, name="signup"),
    path("welcome/", auth.no_org, name="no_org"),
    path("orgs/switch/", auth.switch_org, name="switch_org"),
    path("account/password/", auth.PasswordChangeView.as_view(), name="password_change"),
    path("account/password/done/",
         auth_views.PasswordChangeDoneView.as_view(template_name="web/auth/password_change_done.html"),
         name="password_change_done"),
    path("account/reset/", auth_views.PasswordResetView.as_view(
        template_name="web/auth/password_reset.html", email_template_name="web/auth/password_reset_email.txt",
        success_url=reverse_lazy("web:password_reset_done")), name="password_reset"),
    path("account/reset/sent/", auth_views.PasswordResetDoneView.as_view(
        template_name="web/auth/password_reset_done.html"), name="password_reset_done"),
    path("account/reset/<uidb64>/<token>/", auth_views.PasswordResetConfirmView.as_view(
        template_name="web/auth/password_reset_confirm.html",
        success_url=reverse_lazy("web:password_reset_complete")), name="password_reset_confirm"),
    path("account/reset/complete/", auth_views.PasswordResetCompleteView.as_view(
        template_name="web/auth/password_reset_complete.html"), name="password_reset_complete"),
    # Organisation settings
    path("settings/members/", members.members, name="members"),
    path("settings/members/<uuid:member_id>/role/", members.change_role, name="member_role"),
    path("settings/members/<uuid:member_id>/remove/", members.remove_member, name="member_remove"),
    path("settings/tokens/", tokens.tokens, name="tokens"),
    path("settings/tokens/<uuid:token_id>/revoke/", tokens.revoke_token, name="token_revoke"),
    path("settings/system/", system.system, name="system"),
    path("settings/system/check-worker/", system.check_worker, name="check_worker"),
    path("audit/", audit.audit_log, name="audit"),
    # Sections whose pages arrive with their issues
    path("servers/", dashboard.coming_soon, {"section": "servers"}, name="servers"),
    path("agents/", dashboard.coming_soon, {"section": "agents"}, name="agents"),
    path("crews/", dashboard.coming_soon, {"section": "crews"}, name="crews"),
    path("runs/", dashboard.coming_soon, {"section": "runs"}, name="runs"),
    path("inbox/", dashboard.coming_soon, {"section": "inbox"}, name="inbox"),
    path("costs/", dashboard.coming_soon, {"section": "costs"}, name="costs"),
]
