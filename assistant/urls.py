"""Pages of the assistant app, mounted at /o/<org>/p/<project>/assistant/."""

from assistant import views

app_name = "assistant"
urlpatterns = views.urlpatterns
