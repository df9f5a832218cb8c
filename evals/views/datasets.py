"""Pages of evaluations: the evaluations home (datasets, and links to the other
sections), one dataset (the items of a chosen version, its versions, adding, importing
and removing items), and "add to dataset" on a run's page.

Every write goes through ``evals.services.datasets``; its errors are shown on the page
or as a message, never as a 500. Datasets and runs are looked up in the URL's project,
so another tenant's id is a 404 like a missing one.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, path, reverse

from agentops.errors import ServiceError
from agentops.forms import json_object
from agentops.pages import Need, ProjectPage
from evals.models import Dataset, DatasetItem, DatasetVersion
from evals.services import datasets as services
from runs import selectors as run_selectors

READ = Need("work:read", "see this project's evaluations")
WRITE = Need("work:write", "change datasets")
ITEMS_PER_PAGE = 50
PREVIEW_CHARACTERS = 160
# The other sections of evaluations, linked from its home once their pages exist.
SECTIONS = (
    ("evals:experiments", "Experiments", "An agent version over a dataset version, scored."),
    ("evals:evaluators", "Evaluators", "Rules, LLM judges, webhooks and people that score runs."),
    ("evals:queues", "Annotation queues", "Runs waiting for people to score them."),
    ("evals:online-rules", "Online evaluation", "Score a share of incoming runs as they end."),
    ("evals:exports", "Exports", "Runs, steps, scores and usage as Parquet, to a folder or a bucket."),
)


def _url_or_none(name: str, **kwargs) -> str | None:
    """The URL of ``name``, or None while no page has that name."""
    try:
        return reverse(name, kwargs=kwargs)
    except NoReverseMatch:
        return None


def section_links(page: ProjectPage) -> list[dict[str, str]]:
    slugs = {"org_slug": page.organization.slug, "project_slug": page.project.slug}
    links = []
    for name, label, blurb in SECTIONS:
        url = _url_or_none(name, **slugs)
        if url:
            links.append({"url": url, "label": label, "blurb": blurb})
    return links


def preview(value: Any) -> str:
    """A JSON value as one short line for a table cell."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= PREVIEW_CHARACTERS else text[: PREVIEW_CHARACTERS - 1] + "…"


def form_text(value: Any) -> str:
    """A JSON value as a form shows it: text as itself, anything else as indented JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


def count_of(number: int) -> str:
    return f"{number} item{'s' if number != 1 else ''}"


def _same_text(first: str, second: str) -> bool:
    # Browsers send a textarea's line breaks as CRLF.
    return first.replace("\r\n", "\n").strip() == second.replace("\r\n", "\n").strip()


# --- Forms -------------------------------------------------------------------------------

JSON_HELP = "Text, or a JSON object or array (kept as JSON)."


class DatasetForm(forms.Form):
    name = forms.CharField(max_length=services.MAX_NAME_LENGTH)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))


class ImportForm(forms.Form):
    file = forms.FileField(
        label="CSV or JSON Lines file",
        help_text=(
            "CSV: a header row with an <code>input</code> column, optionally <code>expected</code>, "
            "<code>key</code> and <code>metadata</code>; other columns go into metadata. JSON Lines: one "
            "object per line. Up to 10 MB; all of it is imported, or nothing."
        ),
        widget=forms.ClearableFileInput(attrs={"accept": ".csv,.jsonl,.ndjson,.json"}),
    )


class ItemForm(forms.Form):
    input = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), help_text=JSON_HELP)
    expected = forms.CharField(
        label="Expected output", required=False, widget=forms.Textarea(attrs={"rows": 3}), help_text=JSON_HELP
    )
    metadata = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text='A JSON object, e.g. {"topic": "billing"}.'
    )
    key = forms.CharField(
        required=False,
        max_length=services.MAX_KEY_LENGTH,
        help_text="Optional: an item with the key of one already here replaces it; generated when empty.",
    )

    def clean_metadata(self) -> dict:
        return json_object(self.cleaned_data["metadata"], "Metadata")

    def item(self) -> dict:
        data = self.cleaned_data
        return {
            "key": data["key"],
            "input": services.text_value(data["input"]),
            "expected": services.text_value(data["expected"]) if data["expected"].strip() else None,
            "metadata": data["metadata"],
        }


class AddRunForm(forms.Form):
    dataset = forms.ChoiceField(label="Dataset", required=False)
    new_dataset = forms.CharField(label="Or a new dataset named", required=False, max_length=services.MAX_NAME_LENGTH)
    expected = forms.CharField(
        label="Expected output",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="The run's output unless you change it; empty for none.",
    )

    def __init__(self, *args, datasets: list[Dataset], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["dataset"].choices = [("", "Choose…")] + [(str(d.pk), d.name) for d in datasets]

    def clean(self):
        cleaned = super().clean()
        if not cleaned.get("dataset") and not (cleaned.get("new_dataset") or "").strip():
            raise forms.ValidationError("Choose a dataset, or name a new one.")
        return cleaned


# --- The evaluations home ----------------------------------------------------------------


class EvaluationsIndexPage(ProjectPage):
    """The project's datasets (item counts, latest version) and the other sections;
    members create a dataset here."""

    permissions = {"GET": READ, "POST": Need("work:write", "create datasets")}

    def get(self, request, org_slug, project_slug):
        return self._render(DatasetForm())

    def post(self, request, org_slug, project_slug):
        form = DatasetForm(request.POST)
        if not form.is_valid():
            return self._render(form, status=400)
        try:
            dataset = services.dataset_create(
                project=self.project,
                actor=request.user,
                name=form.cleaned_data["name"],
                description=form.cleaned_data["description"],
                ip=self.ip,
            )
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self._render(form, status=exc.status)
        messages.success(request, f"The dataset “{dataset.name}” was created. Add items, import a file, or add runs.")
        return redirect("evals:dataset", org_slug=org_slug, project_slug=project_slug, dataset_id=dataset.pk)

    def _render(self, form: DatasetForm, *, status: int = 200) -> HttpResponse:
        return self.render_page(
            "evals/index.html",
            {
                "datasets": list(services.dataset_list(project=self.project)),
                "form": form,
                "sections": section_links(self),
            },
            status=status,
        )


# --- One dataset -------------------------------------------------------------------------


def _version_number(value: str | None) -> int | None:
    return int(value) if value and value.isdecimal() and int(value) > 0 else None


def render_dataset(
    page: ProjectPage,
    dataset: Dataset,
    *,
    item_form: ItemForm | None = None,
    import_problems: list[str] | None = None,
    edit_form: DatasetForm | None = None,
    status: int = 200,
) -> HttpResponse:
    """The dataset's page: ``?version=`` (the latest by default) and ``?page=`` of its items."""
    request = page.request
    versions = list(DatasetVersion.objects.filter(dataset=dataset).select_related("created_by").order_by("-number"))
    by_number = {version.number: version for version in versions}
    version = by_number.get(_version_number(request.GET.get("version"))) or by_number.get(dataset.latest_version)
    items_page = None
    if version is not None:
        items_page = Paginator(services.version_items(version).select_related("source_run"), ITEMS_PER_PAGE).get_page(
            request.GET.get("page")
        )
        for item in items_page:
            item.input_preview = preview(item.input)
            item.expected_preview = preview(item.expected)
            item.metadata_preview = preview(item.metadata) if item.metadata else ""
    slugs = {"org_slug": page.organization.slug, "project_slug": page.project.slug}
    return page.render_page(
        "evals/dataset.html",
        {
            "dataset": dataset,
            "versions": versions,
            "version": version,
            "is_latest": version is not None and version.number == dataset.latest_version,
            "items_page": items_page,
            "item_form": item_form or ItemForm(),
            "import_form": ImportForm(),
            "import_problems": import_problems or [],
            "edit_form": edit_form or DatasetForm(initial={"name": dataset.name, "description": dataset.description}),
            "leaderboard_url": _url_or_none("evals:leaderboard", dataset_id=dataset.pk, **slugs),
            "max_import_mb": services.MAX_IMPORT_BYTES // 1024 // 1024,
        },
        status=status,
    )


class DatasetPage(ProjectPage):
    """A dataset: the items of a version, its versions with what changed, and (members)
    forms to add an item, import a file, remove items and rename it."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, dataset_id):
        return render_dataset(self, services.dataset_detail(project=self.project, dataset_id=dataset_id))


class DatasetAction(ProjectPage):
    """A change to a dataset from its page; back to the page with what happened."""

    permissions = {"POST": WRITE}

    def dataset_url(self, dataset: Dataset) -> str:
        return reverse(
            "evals:dataset",
            kwargs={"org_slug": self.organization.slug, "project_slug": self.project.slug, "dataset_id": dataset.pk},
        )

    def done(self, dataset: Dataset, version: DatasetVersion):
        messages.success(self.request, f"Version {version.number} ({count_of(version.item_count)}): {version.note}.")
        return redirect(self.dataset_url(dataset))


class DatasetEditAction(DatasetAction):
    def post(self, request, org_slug, project_slug, dataset_id):
        dataset = services.dataset_detail(project=self.project, dataset_id=dataset_id)
        form = DatasetForm(request.POST)
        if not form.is_valid():
            return render_dataset(self, dataset, edit_form=form, status=400)
        try:
            services.dataset_update(
                dataset=dataset,
                actor=request.user,
                name=form.cleaned_data["name"],
                description=form.cleaned_data["description"],
                ip=self.ip,
            )
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return render_dataset(self, dataset, edit_form=form, status=exc.status)
        messages.success(request, "The dataset was saved.")
        return redirect(self.dataset_url(dataset))


class DatasetImportAction(DatasetAction):
    def post(self, request, org_slug, project_slug, dataset_id):
        dataset = services.dataset_detail(project=self.project, dataset_id=dataset_id)
        form = ImportForm(request.POST, request.FILES)
        if not form.is_valid():
            return render_dataset(self, dataset, import_problems=["Choose a CSV or JSON Lines file."], status=400)
        upload = form.cleaned_data["file"]
        try:
            if upload.size > services.MAX_IMPORT_BYTES:
                raise services.TooLarge(
                    f"the file is {upload.size / 1024 / 1024:.1f} MB; the limit is "
                    f"{services.MAX_IMPORT_BYTES // 1024 // 1024} MB"
                )
            version = services.items_import(
                dataset=dataset, actor=request.user, filename=upload.name, content=upload.read(), ip=self.ip
            )
        except ServiceError as exc:
            problems = (exc.details or {}).get("problems") if isinstance(exc.details, dict) else None
            return render_dataset(
                self, dataset, import_problems=[exc.message, *(problems or [])[1:]], status=exc.status
            )
        return self.done(dataset, version)


class DatasetItemAddAction(DatasetAction):
    def post(self, request, org_slug, project_slug, dataset_id):
        dataset = services.dataset_detail(project=self.project, dataset_id=dataset_id)
        form = ItemForm(request.POST)
        if not form.is_valid():
            return render_dataset(self, dataset, item_form=form, status=400)
        try:
            version = services.items_add(dataset=dataset, actor=request.user, items=[form.item()], ip=self.ip)
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return render_dataset(self, dataset, item_form=form, status=exc.status)
        return self.done(dataset, version)


class DatasetItemRemoveAction(DatasetAction):
    def post(self, request, org_slug, project_slug, dataset_id):
        dataset = services.dataset_detail(project=self.project, dataset_id=dataset_id)
        try:
            version = services.items_remove(
                dataset=dataset, actor=request.user, keys=request.POST.getlist("key"), ip=self.ip
            )
        except ServiceError as exc:
            messages.error(request, f"Nothing was removed: {exc.message}")
            return redirect(self.dataset_url(dataset))
        return self.done(dataset, version)


# --- "Add to dataset" on a run's page ----------------------------------------------------


def dataset_panel_context(page, run) -> dict:
    """Context of templates/evals/_run_panel_dataset.html: the datasets this run is in
    (as a live item), and for members the form that adds it to one."""
    memberships = list(
        DatasetItem.objects.filter(project=page.project, source_run=run, removed_in__isnull=True)
        .select_related("dataset")
        .order_by("dataset__name")
    )
    context: dict[str, Any] = {"run_dataset_items": memberships}
    if page.access.allows("work:write"):
        context["add_run_form"] = AddRunForm(
            datasets=list(services.dataset_list(project=page.project)), initial={"expected": form_text(run.output)}
        )
    return context


class RunAddToDatasetAction(ProjectPage):
    """Add a run to a dataset (or a new one) from the run's page. From the run panel's
    htmx form it answers the panel's dataset part again, with the outcome; from a plain
    form it goes back to the run's page with a message."""

    permissions = {"POST": Need("work:write", "add runs to datasets")}

    def post(self, request, org_slug, project_slug, run_id):
        run = run_selectors.run_detail(project=self.project, run_id=run_id)
        datasets = list(services.dataset_list(project=self.project))
        form = AddRunForm(request.POST, datasets=datasets)
        outcome, ok = "", False
        if not form.is_valid():
            outcome = " ".join(error for errors in form.errors.values() for error in errors)
        else:
            try:
                with transaction.atomic():  # a new dataset is kept only if the run goes in
                    outcome, dataset = self._add(run, form)
                ok = True
            except ServiceError as exc:
                outcome = f"The run was not added: {exc.message}"
        if not request.htmx:
            (messages.success if ok else messages.error)(request, outcome)
            return redirect("runs:detail", org_slug=org_slug, project_slug=project_slug, run_id=run.pk)
        context = {**self.page_context(), "run": run, **dataset_panel_context(self, run)}
        # An invalid form shows its own errors; a refusal of the service says why here.
        context["dataset_outcome"] = {"ok": ok, "text": outcome} if ok or form.is_valid() else None
        if ok:
            context["dataset_outcome"]["url"] = reverse(
                "evals:dataset", kwargs={"org_slug": org_slug, "project_slug": project_slug, "dataset_id": dataset.pk}
            )
        else:
            form.fields["dataset"].choices = context["add_run_form"].fields["dataset"].choices
            context["add_run_form"] = form
        # 200 either way: htmx swaps only successful responses, and the outcome says what happened.
        return render(request, "evals/_run_panel_dataset.html", context)

    def _add(self, run, form: AddRunForm) -> tuple[str, Dataset]:
        new_name = (form.cleaned_data["new_dataset"] or "").strip()
        if new_name:
            dataset = services.dataset_create(project=self.project, actor=self.request.user, name=new_name, ip=self.ip)
        else:
            dataset = services.dataset_detail(project=self.project, dataset_id=int(form.cleaned_data["dataset"]))
        typed = form.cleaned_data["expected"]
        if _same_text(typed, form_text(run.output)):
            expected = ...  # unchanged: the output exactly as stored, not re-read from text
        elif not typed.strip():
            expected = None
        else:
            expected = services.text_value(typed)
        version = services.item_from_run(
            dataset=dataset, actor=self.request.user, run=run, expected=expected, ip=self.ip
        )
        return f"Added to “{dataset.name}” as version {version.number} ({count_of(version.item_count)}).", dataset


dataset = "datasets/<int:dataset_id>"
urlpatterns = [
    path("", EvaluationsIndexPage.as_view(), name="index"),
    path(f"{dataset}/", DatasetPage.as_view(), name="dataset"),
    path(f"{dataset}/edit/", DatasetEditAction.as_view(), name="dataset-edit"),
    path(f"{dataset}/import/", DatasetImportAction.as_view(), name="dataset-import"),
    path(f"{dataset}/items/", DatasetItemAddAction.as_view(), name="dataset-item-add"),
    path(f"{dataset}/items/remove/", DatasetItemRemoveAction.as_view(), name="dataset-item-remove"),
    path("runs/<int:run_id>/add-to-dataset/", RunAddToDatasetAction.as_view(), name="dataset-add-run"),
]
