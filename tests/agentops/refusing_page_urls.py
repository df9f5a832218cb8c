"""A URLconf for tests of how pages answer a service's refusal: the project's URLs, plus
pages whose handlers raise the ``ServiceError`` named in ``?error=`` without catching
it, as a page that forgot a catch would."""

from django.urls import path

from agentops.errors import Conflict, Forbidden, InvalidRequest, NotFound, PaymentRequired
from agentops.pages import Need, ProjectPage, SignedInPage
from agentops.urls import handler404, handler500
from agentops.urls import urlpatterns as project_urlpatterns

ERRORS = {
    "invalid": InvalidRequest("the name must not be empty"),
    "forbidden": Forbidden("only an owner may do that"),
    "not_found": NotFound("dataset not found"),
    "conflict": Conflict("that name is taken"),
    "budget": PaymentRequired("the monthly budget is spent"),
}


class RefusingProjectPage(ProjectPage):
    permissions = {"GET": Need("work:read", "see it"), "POST": Need("work:read", "try it")}

    def get(self, request, org_slug, project_slug):
        raise ERRORS[request.GET["error"]]

    def post(self, request, org_slug, project_slug):
        raise ERRORS[request.POST["error"]]


class RefusingSignedInPage(SignedInPage):
    def get(self, request):
        raise ERRORS[request.GET["error"]]


urlpatterns = [
    path("o/<slug:org_slug>/p/<slug:project_slug>/refusing/", RefusingProjectPage.as_view()),
    path("refusing/", RefusingSignedInPage.as_view()),
    *project_urlpatterns,
]

__all__ = ["handler404", "handler500", "urlpatterns"]
