from django.urls import path

from apps.web.consumers import DashboardConsumer, InboxConsumer, OrgConsumer, RunConsumer, RunListConsumer

websocket_urlpatterns = [
    path("ws/org/<uuid:org_id>/", OrgConsumer.as_asgi()),
    path("ws/run/<uuid:run_id>/", RunConsumer.as_asgi()),
    path("ws/inbox/<uuid:org_id>/", InboxConsumer.as_asgi()),
    path("ws/runs/<uuid:org_id>/", RunListConsumer.as_asgi()),
    path("ws/dashboard/<uuid:org_id>/", DashboardConsumer.as_asgi()),
]
