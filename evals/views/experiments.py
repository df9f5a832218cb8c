"""Pages of evaluations: experiments (the list and starting one, one experiment live,
cancelling it, its results as a download), a dataset's leaderboard (with its charts
and downloads), and two experiments compared item by item.

Reads go through ``evals.selectors`` (always scoped to the URL's project, so another
tenant's experiment or dataset is a 404 like a missing one); writes through
``evals.services.experiments``, whose errors are shown on the form or as a message.
The progress block and the result rows are templates of their own, because
``evals.live`` renders the same two when an item is scored.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse

from agentops import live
from agentops.charts import chart_label
from agentops.errors import ServiceError
from agentops.forms import version_field
from agentops.pages import Need, ProjectPage
from billing.carbon import experiment_footprint as footprint_of
from evals import exports, selectors
from evals.models import Dataset, Evaluator, Experiment
from evals.services import experiments as services
from runs.models import Agent

READ = Need("work:read", "see this project's experiments")
WRITE = Need("work:write", "start and cancel experiments")
EXPERIMENTS_PER_PAGE = 50
RESULTS_PER_PAGE = 100
COMPARE_ITEMS_PER_PAGE = 100
# Metrics shown in the experiments list (the rest are on each experiment's page).
LIST_METRICS = 3
COMPARE_CHOICES = 50
LEADERBOARD_SORT_LABELS = {
    "created": "Date",
    "name": "Name",
    "pass_rate": "Pass rate",
    "cost": "Cost",
    "latency": "Latency p50",
}


def _page_number(request) -> str:
    value = request.GET.get("page", "1")
    return value if value.isdecimal() else "1"


def _stat_text(stat: dict | None) -> str:
    """A metric as the pages show it: "0.82 [0.74, 0.89]", the mean alone while there
    is no interval yet, an em dash when nothing was scored."""
    if not stat or stat.get("mean") is None:
        return "—"
    text = f"{stat['mean']:.2f}"
    if stat.get("ci_low") is not None and stat.get("ci_high") is not None:
        text += f" [{stat['ci_low']:.2f}, {stat['ci_high']:.2f}]"
    return text


def _stat_cell(name: str, stat: dict | None) -> dict[str, str]:
    """A leaderboard cell: the mean, and the interval it goes on a line of its own with,
    so a table of several metrics fits a laptop's width."""
    text = _stat_text(stat)
    mean, _space, interval = text.partition(" ")
    return {"name": name, "text": text, "mean": mean, "interval": interval}


def _ordered_metrics(experiment: Experiment) -> list[tuple[str, dict]]:
    """The summary's metrics in the experiment's evaluator order (PostgreSQL's jsonb
    keeps its own key order, not the one they were written in)."""
    metrics = (experiment.summary or {}).get("metrics", {})
    return [(name, metrics[name]) for name in selectors.metric_names(experiment) if name in metrics]


# -- the experiments list, and starting one ------------------------------------------------


class ExperimentStartForm(forms.Form):
    dataset = forms.ModelChoiceField(queryset=Dataset.objects.none(), label="Dataset", empty_label=None)
    dataset_version = version_field("Dataset version")
    agent = forms.ModelChoiceField(queryset=Agent.objects.none(), label="Agent", empty_label=None)
    agent_version = version_field("Agent version")
    evaluators = forms.ModelMultipleChoiceField(
        queryset=Evaluator.objects.none(),
        label="Evaluators",
        widget=forms.CheckboxSelectMultiple,
        help_text="Evaluators scored by people are left out: they score runs through annotation queues.",
    )
    concurrency = forms.IntegerField(
        label="Concurrency",
        initial=4,
        min_value=1,
        max_value=services.MAX_CONCURRENCY,
        help_text=f"Items run at once (1 to {services.MAX_CONCURRENCY}).",
    )
    name = forms.CharField(label="Name", required=False, max_length=200, help_text="Blank: agent, dataset and time.")
    branch = forms.CharField(
        label="Branch", required=False, max_length=200, help_text="The code branch, for gates' baselines (e.g. main)."
    )

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["dataset"].queryset = Dataset.objects.filter(project=project).order_by("name")
        self.fields["agent"].queryset = Agent.objects.filter(project=project, platform="").order_by("name")
        self.fields["evaluators"].queryset = selectors.automatic_evaluators(project=project)


class ExperimentFilterForm(forms.Form):
    dataset = forms.ModelChoiceField(
        queryset=Dataset.objects.none(), label="Dataset", required=False, empty_label="Any dataset"
    )
    status = forms.ChoiceField(label="Status", required=False, choices=[("", "Any status"), *Experiment.Status.choices])
    branch = forms.CharField(label="Branch", required=False, widget=forms.TextInput(attrs={"placeholder": "any"}))

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["dataset"].queryset = Dataset.objects.filter(project=project).order_by("name")

    def filters(self) -> dict:
        if not self.is_valid():
            return {}
        dataset = self.cleaned_data["dataset"]
        return {
            "dataset_id": dataset.pk if dataset else None,
            "status": self.cleaned_data["status"],
            "branch": self.cleaned_data["branch"].strip(),
        }


class ExperimentsPage(ProjectPage):
    """The project's experiments, filtered by dataset, status and branch; members start
    one here (it opens on its own page, where its items arrive live)."""

    permissions = {"GET": READ, "POST": WRITE}

    def get(self, request, org_slug, project_slug):
        initial = {}
        if request.GET.get("dataset", "").isdecimal():
            initial["dataset"] = int(request.GET["dataset"])
        return self._render(ExperimentStartForm(project=self.project, initial=initial))

    def post(self, request, org_slug, project_slug):
        form = ExperimentStartForm(request.POST, project=self.project)
        if not form.is_valid():
            return self._render(form, status=400)
        data = form.cleaned_data
        try:
            experiment = services.experiment_start(
                project=self.project,
                actor=request.user,
                dataset=data["dataset"],
                dataset_version_number=data["dataset_version"],
                agent=data["agent"],
                agent_version_number=data["agent_version"],
                evaluators=list(data["evaluators"]),
                concurrency=data["concurrency"],
                name=data["name"],
                branch=data["branch"].strip(),
                ip=self.ip,
            )
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self._render(form, status=exc.status)
        return redirect("evals:experiment", org_slug=org_slug, project_slug=project_slug, experiment_id=experiment.pk)

    def _render(self, form: ExperimentStartForm, *, status: int = 200) -> HttpResponse:
        filters = ExperimentFilterForm(self.request.GET, project=self.project)
        queryset = selectors.experiment_list(project=self.project, **filters.filters())
        page = Paginator(queryset, EXPERIMENTS_PER_PAGE).get_page(_page_number(self.request))
        for experiment in page:
            experiment.key_metrics = [
                (name, stat.get("mean")) for name, stat in _ordered_metrics(experiment)[:LIST_METRICS]
            ]
        query = {key: value for key, value in self.request.GET.items() if key != "page" and value}
        return self.render_page(
            "evals/experiments.html",
            {
                "form": form,
                "filters": filters,
                "experiments": page,
                "page_query": urlencode(query),
                "filtered": bool(query),
                "has_datasets": form.fields["dataset"].queryset.exists(),
                "has_agents": form.fields["agent"].queryset.exists(),
                "has_evaluators": form.fields["evaluators"].queryset.exists(),
            },
            status=status,
        )


# -- one experiment ------------------------------------------------------------------------


def progress_context(experiment: Experiment) -> dict[str, Any]:
    """What the progress block and the result rows need beside the experiment: the
    same keys ``evals.live`` passes when it renders them for a live update."""
    return {
        "experiment": experiment,
        "metric_names": selectors.metric_names(experiment),
        "means": selectors.running_means(experiment),
        "footprint": experiment_footprint(experiment),
    }


def experiment_footprint(experiment: Experiment):
    """The energy and CO2e estimate of the experiment's runs and its judge calls."""
    run_ids = experiment.results.exclude(run_id=None).values_list("run_id", flat=True)
    return footprint_of(experiment_id=experiment.pk, run_ids=run_ids)


class ExperimentPage(ProjectPage):
    """An experiment: what ran, its progress and numbers (live while it runs), and one
    row per item, paged; members cancel it while it runs."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, experiment_id):
        experiment = selectors.experiment_detail(project=self.project, experiment_id=experiment_id)
        results = Paginator(selectors.result_list(experiment=experiment), RESULTS_PER_PAGE).get_page(
            _page_number(request)
        )
        others = list(
            selectors.experiment_list(project=self.project, dataset_id=experiment.dataset_id).exclude(pk=experiment.pk)[
                :COMPARE_CHOICES
            ]
        )
        slugs = {"org_slug": org_slug, "project_slug": project_slug}
        kwargs = {**slugs, "experiment_id": experiment.pk}
        return self.render_page(
            "evals/experiment.html",
            {
                **progress_context(experiment),
                "results": results,
                "others": others,
                "created_by": experiment.created_by.email if experiment.created_by_id else "",
                "urls": {
                    "live": reverse("evals:experiment-live", kwargs=kwargs) + f"?page={results.number}",
                    "export": reverse("evals:experiment-export", kwargs=kwargs),
                    "cancel": reverse("evals:experiment-cancel", kwargs=kwargs),
                    "compare": reverse("evals:compare", kwargs=slugs),
                    "leaderboard": reverse("evals:leaderboard", kwargs={**slugs, "dataset_id": experiment.dataset_id}),
                },
            },
            # Its progress block and the rows of this page of results.
            live_topics=[live.topic("experiment", experiment.pk)]
            + [live.topic("experiment-result", result.pk) for result in results],
        )


class ExperimentLiveFragment(ProjectPage):
    """The progress block and the rows of one page of results, every part swapped out
    of band: what an open page fetches when its socket (re)opens, since updates sent
    while it had none reached nobody."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, experiment_id):
        experiment = selectors.experiment_detail(project=self.project, experiment_id=experiment_id)
        results = Paginator(selectors.result_list(experiment=experiment), RESULTS_PER_PAGE).get_page(
            _page_number(request)
        )
        return render(
            request,
            "evals/experiment_live.html",
            {**self.page_context(), **progress_context(experiment), "results": results, "oob": True},
        )


class ExperimentCancelAction(ProjectPage):
    """Stop an experiment: no more items start, running ones are cancelled, scored ones stay."""

    permissions = {"POST": WRITE}

    def post(self, request, org_slug, project_slug, experiment_id):
        experiment = selectors.experiment_detail(project=self.project, experiment_id=experiment_id)
        try:
            services.experiment_cancel(experiment=experiment, actor=request.user, ip=self.ip)
        except ServiceError as exc:
            messages.error(request, f"Could not cancel it: {exc.message}.")
        else:
            messages.success(request, "Cancelled: no more items start; the items already scored are kept.")
        return redirect("evals:experiment", org_slug=org_slug, project_slug=project_slug, experiment_id=experiment.pk)


def _export_format(request) -> str:
    value = request.GET.get("format", "csv")
    if value not in exports.FORMATS:
        raise Http404("format must be csv or jsonl")
    return value


class ExperimentExport(ProjectPage):
    """Every item of an experiment as CSV or JSON Lines (``?format=``), streamed."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, experiment_id):
        experiment = selectors.experiment_detail(project=self.project, experiment_id=experiment_id)
        return exports.experiment_download(
            request, experiment, format=_export_format(request), organization=self.organization
        )


# -- a dataset's leaderboard -----------------------------------------------------------------


class LeaderboardPage(ProjectPage):
    """The ended experiments of a dataset, best first by the chosen column, filtered by
    branch, agent and model, with two charts of a chosen metric (against cost, over
    time); ``?format=csv|jsonl`` downloads the table as shown."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, dataset_id):
        dataset = selectors.dataset_detail(project=self.project, dataset_id=dataset_id)
        query = self.query()
        names, rows = selectors.leaderboard(
            dataset=dataset, sort=query["sort"], branch=query["branch"], agent=query["agent"], model=query["model"]
        )
        if "format" in request.GET:
            return self.export(dataset, names, rows)
        metric = next((name for name in (query["metric"], query["sort"], *names) if name in names), "")
        kwargs = {"org_slug": org_slug, "project_slug": project_slug}
        experiment_url = reverse("evals:experiment", kwargs={**kwargs, "experiment_id": 0}).removesuffix("0/")
        choices = selectors.experiment_list(project=self.project, dataset_id=dataset.pk).values_list(
            "branch", "agent_name", "model"
        )
        branches, agents, models = (sorted({row[index] for row in choices if row[index]}) for index in range(3))
        filters = {key: query[key] for key in ("branch", "agent", "model") if query[key]}
        return self.render_page(
            "evals/leaderboard.html",
            {
                "dataset": dataset,
                "names": names,
                "rows": [self.row(names, row, experiment_url) for row in rows],
                "sort": query["sort"] or "created",
                "sort_links": self.sort_links(names, {**filters, **({"metric": metric} if metric else {})}),
                "metric": metric,
                "query": query,
                "filters": filters,
                "filter_choices": {"branch": branches, "agent": agents, "model": models},
                "export_query": urlencode({**filters, **({"sort": query["sort"]} if query["sort"] else {})}),
                "chart": self.chart(names, rows, experiment_url),
                "experiments_url": reverse("evals:experiments", kwargs=kwargs) + f"?dataset={dataset.pk}",
            },
        )

    def query(self) -> dict[str, str]:
        get = self.request.GET
        return {key: get.get(key, "").strip() for key in ("sort", "metric", "branch", "agent", "model")}

    def export(self, dataset: Dataset, names: list[str], rows: list) -> HttpResponse:
        return exports.leaderboard_download(
            self.request, dataset, names, rows, format=_export_format(self.request), organization=self.organization
        )

    @staticmethod
    def row(names: list[str], row: selectors.LeaderRow, experiment_url: str) -> dict[str, Any]:
        experiment = row.experiment
        return {
            "experiment": experiment,
            "url": f"{experiment_url}{experiment.pk}/",
            "metrics": [_stat_cell(name, row.metrics.get(name)) for name in names],
            "pass_rate": row.pass_rate,
            "cost": row.cost,
            "latency_p50": row.latency_p50,
        }

    @staticmethod
    def sort_links(names: list[str], keep: dict[str, str]) -> list[dict[str, str]]:
        columns = [(name, name) for name in names] + list(LEADERBOARD_SORT_LABELS.items())
        return [{"key": key, "label": label, "query": urlencode({**keep, "sort": key})} for key, label in columns]

    @staticmethod
    def chart(names: list[str], rows: list, experiment_url: str) -> dict[str, Any]:
        """Per metric, one point per experiment that scored it: cost, date, mean and
        interval, and the name to hover (escaped for Plotly's label HTML)."""
        points: dict[str, list[dict]] = {name: [] for name in names}
        for row in sorted(rows, key=lambda row: row.experiment.created_at):
            experiment = row.experiment
            for name in names:
                stat = row.metrics.get(name) or {}
                if stat.get("mean") is None:
                    continue
                points[name].append(
                    {
                        "name": chart_label(experiment.name),
                        "cost": float(row.cost),
                        "created": experiment.created_at.isoformat(),
                        "mean": stat["mean"],
                        "low": stat.get("ci_low") if stat.get("ci_low") is not None else stat["mean"],
                        "high": stat.get("ci_high") if stat.get("ci_high") is not None else stat["mean"],
                        "url": f"{experiment_url}{experiment.pk}/",
                    }
                )
        return {"metrics": points}


class LeaderboardExport(LeaderboardPage):
    """The leaderboard as a download, ``?format=csv`` (the default) or ``jsonl``."""

    def get(self, request, org_slug, project_slug, dataset_id):
        dataset = selectors.dataset_detail(project=self.project, dataset_id=dataset_id)
        query = self.query()
        names, rows = selectors.leaderboard(
            dataset=dataset, sort=query["sort"], branch=query["branch"], agent=query["agent"], model=query["model"]
        )
        return self.export(dataset, names, rows)


# -- two experiments compared ------------------------------------------------------------------


def _experiment_id(value: str | None) -> int | None:
    return int(value) if value and value.isdecimal() else None


class ComparePage(ProjectPage):
    """Experiment ``b`` against ``a`` (``?a=&b=``): each metric's difference with its
    95% interval (significant only when the interval leaves out zero), then the items,
    regressions first, with both outputs side by side."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug):
        a_id, b_id = _experiment_id(request.GET.get("a")), _experiment_id(request.GET.get("b"))
        if "a" not in request.GET and "b" not in request.GET:
            # The page opened with nothing chosen yet (the leaderboard links it so): the
            # form, not an error.
            context = {"recent": self.recent(), "chosen": {"a": "", "b": ""}}
            return self.render_page("evals/compare.html", context)
        if a_id is None or b_id is None:
            problem = "Choose two experiments to compare: the URL needs ?a=<id>&b=<id>."
            chosen = {key: request.GET.get(key, "") for key in ("a", "b")}
            context = {"problem": problem, "recent": self.recent(), "chosen": chosen}
            return self.render_page("evals/compare.html", context, status=400)
        a = selectors.experiment_detail(project=self.project, experiment_id=a_id)
        b = selectors.experiment_detail(project=self.project, experiment_id=b_id)
        metrics, items = selectors.compare_experiments(a=a, b=b)
        names = [metric.name for metric in metrics]
        counts = {kind: 0 for kind in ("regressed", "mixed", "improved", "same", "only_a", "only_b")}
        for item in items:
            counts[item.change] += 1
        shown = request.GET.get("show", "changed" if len(items) > COMPARE_ITEMS_PER_PAGE else "all")
        if shown == "changed":
            items = [item for item in items if item.change != "same"]
        page = Paginator(items, COMPARE_ITEMS_PER_PAGE).get_page(_page_number(request))
        thresholds = {spec["name"]: spec.get("threshold") for spec in b.evaluators}
        for item in page:
            item.cells = [self.cell(name, item, thresholds.get(name)) for name in names]
        kwargs = {"org_slug": org_slug, "project_slug": project_slug}
        return self.render_page(
            "evals/compare.html",
            {
                "a": a,
                "b": b,
                "metrics": [self.metric_row(metric) for metric in metrics],
                "items": page,
                "counts": counts,
                "shown": shown,
                "page_query": urlencode({"a": a.pk, "b": b.pk, "show": shown}),
                "same_dataset": a.dataset_id == b.dataset_id,
                "recent": self.recent(),
                "chosen": {"a": a.pk, "b": b.pk},
                "experiment_url": reverse("evals:experiment", kwargs={**kwargs, "experiment_id": 0}).removesuffix("0/"),
            },
        )

    def recent(self) -> list[Experiment]:
        return list(selectors.experiment_list(project=self.project)[:COMPARE_CHOICES])

    @staticmethod
    def metric_row(metric: selectors.MetricChange) -> dict[str, Any]:
        difference = metric.difference
        text = "—"
        if difference.mean is not None:
            text = f"{difference.mean:+.3f}"
            if difference.ci_low is not None and difference.ci_high is not None:
                text += f" [{difference.ci_low:+.3f}, {difference.ci_high:+.3f}]"
        return {
            "name": metric.name,
            "a": metric.a,
            "b": metric.b,
            "difference": text,
            "pairs": difference.n,
            "significant": metric.significant,
            # Colored only when the interval says the change is real.
            "direction": metric.direction if metric.significant else "unchanged",
        }

    @staticmethod
    def cell(name: str, item: selectors.ItemChange, threshold: float | None) -> dict[str, Any]:
        a = (item.a.scores or {}).get(name) if item.a else None
        b = (item.b.scores or {}).get(name) if item.b else None
        delta = item.deltas.get(name)
        return {
            "name": name,
            "a": a,
            "b": b,
            "delta": delta,
            "delta_text": "" if not delta else f"{delta:+.2f}",
            "direction": "none" if not delta else ("up" if delta > 0 else "down"),
            "b_passed": exports.score_passed(b, threshold),
        }


experiment = "experiments/<int:experiment_id>"
leaderboard = "datasets/<int:dataset_id>/leaderboard"
urlpatterns = [
    path("experiments/", ExperimentsPage.as_view(), name="experiments"),
    path("experiments/compare/", ComparePage.as_view(), name="compare"),
    path(f"{experiment}/", ExperimentPage.as_view(), name="experiment"),
    path(f"{experiment}/live/", ExperimentLiveFragment.as_view(), name="experiment-live"),
    path(f"{experiment}/cancel/", ExperimentCancelAction.as_view(), name="experiment-cancel"),
    path(f"{experiment}/export/", ExperimentExport.as_view(), name="experiment-export"),
    path(f"{leaderboard}/", LeaderboardPage.as_view(), name="leaderboard"),
    path(f"{leaderboard}/export/", LeaderboardExport.as_view(), name="leaderboard-export"),
]
