from django.urls import path

from apps.web.consumers import OrgConsumer, RunConsumer

websocket_urlpatterns = [
    path("ws/org/<uuid:org_id>/", OrgConsumer.as_asgi()),
    path("ws/run/<uuid:run_id>/", RunConsumer.as_asgi()),
]
