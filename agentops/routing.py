from django.urls import path

from agentops.consumers import LiveConsumer

websocket_urlpatterns = [
    path("ws/o/<slug:org_slug>/", LiveConsumer.as_asgi()),
    path("ws/o/<slug:org_slug>/p/<slug:project_slug>/", LiveConsumer.as_asgi()),
]
