from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy

from apps.web.views import agents, audit, auth, catalog, crews, dashboard, members, runs, servers, system, tokens

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
    path("servers/", servers.servers, name="servers"),
    path("servers/catalog/", catalog.server_catalog, name="server_catalog"),
    path("servers/catalog/<slug:key>/", catalog.catalog_register, name="catalog_register"),
    path("servers/<uuid:server_id>/", servers.server, name="server"),
    path("servers/<uuid:server_id>/status/", servers.server_status, name="server_status"),
    path("servers/<uuid:server_id>/sync/", servers.server_sync, name="server_sync"),
    path("servers/<uuid:server_id>/toggle/", servers.server_toggle, name="server_toggle"),
    path("servers/<uuid:server_id>/delete/", servers.server_delete, name="server_delete"),
    path("tools/<uuid:tool_id>/", servers.tool, name="tool"),
    path("tools/<uuid:tool_id>/pin/", servers.tool_pin, name="tool_pin"),
    path("tools/<uuid:tool_id>/update/", servers.tool_update, name="tool_update"),
    # Agents, LLM connections and crews
    path("agents/", agents.agent_list, name="agents"),
    path("agents/new/", agents.agent_new, name="agent_new"),
    path("agents/prompt-preview/", agents.prompt_preview, name="agent_prompt_preview"),
    path("agents/tools/", agents.tool_picker, name="agent_tool_picker"),
    path("agents/grant-row/", agents.grant_row, name="agent_grant_row"),
    path("agents/connections/", agents.connections, name="llm_connections"),
    path("agents/connections/<uuid:connection_id>/", agents.connection_edit, name="llm_connection_edit"),
    path("agents/connections/<uuid:connection_id>/test/", agents.connection_test, name="llm_connection_test"),
    path("agents/connections/<uuid:connection_id>/delete/", agents.connection_delete, name="llm_connection_delete"),
    path("agents/<uuid:agent_id>/", agents.agent_detail, name="agent_detail"),
    path("agents/<uuid:agent_id>/edit/", agents.agent_edit, name="agent_edit"),
    path("agents/<uuid:agent_id>/enabled/", agents.agent_toggle, name="agent_toggle"),
    path("agents/<uuid:agent_id>/delete/", agents.agent_delete, name="agent_delete"),
    path("crews/", crews.crew_list, name="crews"),
    path("crews/new/", crews.crew_new, name="crew_new"),
    path("crews/task-row/", crews.task_row, name="crew_task_row"),
    path("crews/input-row/", crews.input_row, name="crew_input_row"),
    path("crews/<uuid:crew_id>/", crews.crew_detail, name="crew_detail"),
    path("crews/<uuid:crew_id>/edit/", crews.crew_edit, name="crew_edit"),
    path("crews/<uuid:crew_id>/enabled/", crews.crew_toggle, name="crew_toggle"),
    path("crews/<uuid:crew_id>/delete/", crews.crew_delete, name="crew_delete"),
    path("crews/<uuid:crew_id>/run/", runs.run_start, name="run_start"),
    path("runs/", runs.run_list, name="runs"),
    path("runs/<uuid:run_id>/", runs.run_detail, name="run_detail"),
    path("runs/<uuid:run_id>/cancel/", runs.run_cancel, name="run_cancel"),
    path("inbox/", runs.inbox, name="inbox"),
    path("inbox/<uuid:approval_id>/decide/", runs.inbox_decide, name="inbox_decide"),
    path("costs/", dashboard.coming_soon, {"section": "costs"}, name="costs"),
]
