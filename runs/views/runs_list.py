"""The runs list: filters, sort, keyset pages, saved views; new runs arrive live."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, QueryDict
from django.shortcuts import redirect
from django.urls import reverse

from agentops import live
from agentops.errors import ServiceError
from agentops.pages import Need, ProjectPage, otlp_endpoint
from runs import selectors
from runs.forms import DEFAULT_SORT, RunFilterForm, SavedViewForm
from runs.models import SavedView
from runs.services import saved_views
from runs.views.keyset import paginate

PAGE_SIZE = 50


def saved_view_list(*, project):
    """The project's saved views, for the list's view picker."""
    return SavedView.objects.filter(project=project).select_related("owner").order_by("name", "id")


class RunsListPage(ProjectPage):
    """The project's runs, newest first, narrowed by the filters in the query string."""

    permissions = {"GET": Need("work:read", "see this project's runs")}

    def get(self, request, org_slug, project_slug):
        form = RunFilterForm(request.GET)
        page = paginate(
            selectors.run_list(project=self.project, filters=form.filters()),
            sort=form.sort_key,
            cursor=request.GET.get("cursor"),
            size=PAGE_SIZE,
        )
        query = form.query_string()
        views = list(saved_view_list(project=self.project))
        # New runs are pushed to the top of the list only where the top is "the newest
        # runs": no filter, the default order, the first page. Elsewhere a notice offers
        # to reload, since a pushed row might not belong there.
        live_rows = not form.is_filtered and form.sort_key == DEFAULT_SORT and not request.GET.get("cursor")
        return self.render_page(
            "runs/index.html",
            {
                "form": form,
                "runs": page.rows,
                "next_cursor": page.next_cursor,
                "is_first_page": not request.GET.get("cursor"),
                "query": query,
                "live_rows": live_rows,
                "saved_views": views,
                "current_view": next((view for view in views if view.query == query), None),
                "save_form": SavedViewForm(initial={"query": query}),
                "otlp_endpoint": otlp_endpoint(request),
            },
            # The list's top (new rows) or its reload notice, and the rows it shows.
            live_topics=[live.topic("runs" if live_rows else "runs-notice")]
            + [live.topic("run-row", run.pk) for run in page.rows],
        )


def _normalized_query(raw: str) -> str:
    """A submitted query string reduced to the list's valid filters, so a saved view
    stores nothing the list would not understand."""
    return RunFilterForm(QueryDict(raw)).query_string()


class SavedViewCreateAction(ProjectPage):
    """Save the list's current filters under a name. Any member may: a saved view is
    a bookmark, it changes no run (hence ``work:read``)."""

    permissions = {"POST": Need("work:read", "save views of the runs list")}

    def post(self, request, org_slug, project_slug):
        form = SavedViewForm(request.POST)
        index = reverse("runs:index", kwargs={"org_slug": org_slug, "project_slug": project_slug})
        query = _normalized_query(request.POST.get("query", ""))
        if not form.is_valid():
            messages.error(request, "Give the view a name of at most 100 characters.")
            return redirect(f"{index}?{query}" if query else index)
        try:
            view = saved_views.saved_view_create(
                project=self.project, owner=request.user, name=form.cleaned_data["name"], query=query
            )
        except ServiceError as exc:
            messages.error(request, f"Could not save the view: {exc.message}.")
            return redirect(f"{index}?{query}" if query else index)
        messages.success(request, f"Saved the view “{view.name}”.")
        return redirect(f"{index}?{view.query}" if view.query else index)


class SavedViewDeleteAction(ProjectPage):
    permissions = {"POST": Need("work:read", "delete your saved views")}

    def post(self, request, org_slug, project_slug, view_id):
        view = saved_view_list(project=self.project).filter(pk=view_id).first()
        if view is None:
            raise Http404("saved view not found")
        try:
            saved_views.saved_view_delete(saved_view=view, actor=request.user)
        except ServiceError as exc:
            messages.error(request, f"Could not delete “{view.name}”: {exc.message}.")
        else:
            messages.success(request, f"Deleted the view “{view.name}”.")
        return redirect("runs:index", org_slug=org_slug, project_slug=project_slug)
