from django.urls import path

from apps.web.consumers import OrgConsumer

websocket_urlpatterns = [
    path("ws/org/<uuid:org_id>/", OrgConsumer.as_asgi()),
]
