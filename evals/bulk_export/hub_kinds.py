"""The Hugging Face Hub kinds of export job (docs/exports.md, Hugging Face Hub): three
pushes to a dataset repository and one import from one. Each reads its Hub account from
the job's ``hf_hub`` destination and talks to the Hub through ``evals.hub``.

- ``hf_dataset``: a dataset version's items (key, input, expected, metadata);
- ``hf_results``: an ended experiment's results, one row per item (the rows of the
  results download, ``evals.exports.experiment_results_rows``);
- ``hf_leaderboard``: a dataset's leaderboard, one row per ended experiment (the rows of
  the leaderboard download);
- ``hf_import``: a split of a Hub dataset repository into a new version of a dataset
  (``evals.bulk_export.hub_import``).

A push writes one JSON Lines file, ``data/<split>.jsonl`` (nested values stay JSON, as
in the downloads), streamed to a temporary file on the worker, and commits it with a
dataset card that says what it is, in one commit. Options (checked when the job is
created, 400 with the reason): ``repo_id`` ("namespace/name" or "name"), ``private``
(default true), ``split`` (the split name in the card), and what to push.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from agentops.csvexport import to_json
from agentops.errors import InvalidRequest
from evals import selectors
from evals.bulk_export.errors import ExportFailed
from evals.bulk_export.kind_base import ExportKind, Progress
from evals.exports import experiment_results_rows, leaderboard_rows
from evals.hub import (
    HUB_DESTINATION_KIND,
    REVISION_PATTERN,
    SPLIT_PATTERN,
    HubError,
    check_repo_id,
    dataset_card,
    hub_account,
    push_dataset_files,
)
from evals.models import Dataset, DatasetItem, Experiment

ROWS_PER_REPORT = 500
ITEMS_BATCH = 1000


def _int_option(options: dict, name: str, *, required: bool) -> int | None:
    value = options.get(name)
    if value is None or value == "":
        if required:
            raise InvalidRequest(f"options.{name} is required")
        return None
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit():
        raise InvalidRequest(f"options.{name} must be a whole number")
    return int(value)


def _dataset_option(project, options: dict) -> Dataset:
    dataset_id = _int_option(options, "dataset", required=True)
    dataset = Dataset.objects.filter(project=project, pk=dataset_id).first()
    if dataset is None:
        raise InvalidRequest(f"no dataset with id {dataset_id} in this project")
    return dataset


def _repo_option(options: dict) -> str:
    repo_id = options.get("repo_id")
    if not isinstance(repo_id, str) or not repo_id.strip():
        raise InvalidRequest("options.repo_id is required: the Hub dataset repository, 'namespace/name' or 'name'")
    try:
        return check_repo_id(repo_id.strip())
    except HubError as exc:
        raise InvalidRequest(f"options.repo_id: {exc.message}") from None


def _split_option(options: dict, default: str) -> str:
    split = options.get("split")
    if split is None or split == "":
        return default
    if not isinstance(split, str) or len(split) > 64 or not SPLIT_PATTERN.match(split):
        raise InvalidRequest("options.split must be a split name: letters, digits and '_' (e.g. 'test')")
    return split


def _account(job):
    try:
        return hub_account(job.destination)
    except HubError as exc:
        raise ExportFailed(exc.message) from None


class HubKind(ExportKind):
    destination_kinds = (HUB_DESTINATION_KIND,)
    table = ""
    default_split = "test"
    # Options beyond the common ones.
    option_fields: tuple[str, ...] = ()
    common_fields: tuple[str, ...] = ("repo_id", "private", "split")

    def clean_tables(self, tables):
        if tables:
            raise InvalidRequest(f"a {self.kind} job has no tables to choose")
        return [self.table]

    def clean_options(self, project, options):
        options = dict(options or {})
        unknown = sorted(set(options) - {*self.common_fields, *self.option_fields})
        if unknown:
            known = ", ".join((*self.common_fields, *self.option_fields))
            raise InvalidRequest(f"a {self.kind} job has no option {unknown[0]!r}; its options: {known}")
        cleaned = {"repo_id": _repo_option(options), "split": _split_option(options, self.default_split)}
        if "private" in self.common_fields:
            private = options.get("private", True)
            if not isinstance(private, bool):
                raise InvalidRequest("options.private must be true or false")
            cleaned["private"] = private
        cleaned.update(self.clean_subject(project, options))
        return cleaned

    def clean_subject(self, project, options: dict) -> dict:
        raise NotImplementedError

    def describe(self, job):
        return f"{self.label}: {job.options.get('repo_id', '')}"


class HubPush(HubKind):
    """A push of rows as ``data/<split>.jsonl`` plus a card (subclasses say which rows)."""

    def rows(self, job) -> tuple[Iterable[dict], dict]:
        """The rows to push and what the card says: {title, summary, sections, tags}."""
        raise NotImplementedError

    def run(self, job, progress: Progress) -> None:
        account = _account(job)
        options = job.options
        split = options["split"]
        path_in_repo = f"data/{split}.jsonl"
        rows, about = self.rows(job)
        progress.log(f"writing {self.table} to {path_in_repo}")
        with tempfile.TemporaryDirectory(prefix="agentops-hub-") as workdir:
            local = Path(workdir) / f"{split}.jsonl"
            count = self._write(rows, local, progress)
            size = local.stat().st_size
            card = dataset_card(
                title=about["title"],
                summary=about["summary"].replace("{rows}", str(count)),
                splits={split: path_in_repo},
                tags=about.get("tags"),
                sections=about.get("sections", []),
            )
            visibility = "private" if options.get("private", True) else "public"
            progress.log(f"pushing {count} rows ({size} bytes) to the {visibility} repository {options['repo_id']}")
            try:
                result = push_dataset_files(
                    account,
                    repo_id=options["repo_id"],
                    files={path_in_repo: local},
                    card=card,
                    private=options.get("private", True),
                    commit_message=about["title"],
                )
            except HubError as exc:
                raise ExportFailed(exc.message) from None
        entry = {
            "table": self.table,
            "location": f"{result.url}/blob/{result.commit}/{path_in_repo}",
            "rows": count,
            "bytes": size,
        }
        progress.file(entry)
        progress.log(f"committed {result.commit} to {result.repo_id}: {result.commit_url}")

    def _write(self, rows: Iterable[dict], local: Path, progress: Progress) -> int:
        count = 0
        progress.rows(self.table, 0)
        with open(local, "w", encoding="utf-8") as sink:
            for row in rows:
                sink.write(to_json(row) + "\n")
                count += 1
                if count % ROWS_PER_REPORT == 0:
                    progress.rows(self.table, count)
        progress.rows(self.table, count)
        return count


class HubDatasetPush(HubPush):
    kind = "hf_dataset"
    label = "Dataset version to the Hugging Face Hub"
    table = "items"
    option_fields = ("dataset", "version")

    def clean_subject(self, project, options):
        dataset = _dataset_option(project, options)
        if not dataset.latest_version:
            raise InvalidRequest(f"the dataset {dataset.name!r} has no version yet: add items first")
        version = _int_option(options, "version", required=False) or dataset.latest_version
        if not 1 <= version <= dataset.latest_version:
            raise InvalidRequest(f"the dataset {dataset.name!r} has versions 1 to {dataset.latest_version}")
        return {"dataset": dataset.pk, "version": version}

    def rows(self, job):
        dataset = Dataset.objects.filter(project=job.project, pk=job.options["dataset"]).first()
        if dataset is None:
            raise ExportFailed("the dataset was deleted")
        version = job.options["version"]
        about = {
            "title": f"{dataset.name} (version {version})",
            "summary": f"Version {version} of the dataset “{dataset.name}” of the project “{job.project.name}”, "
            "exported from AgentOps Studio: {rows} items, one JSON object per line.",
            "tags": ["evaluation"],
            "sections": [
                *([("Description", dataset.description)] if dataset.description.strip() else []),
                (
                    "Columns",
                    "- `key`: the item's stable id across versions\n"
                    "- `input`: what the agent is given (JSON)\n"
                    "- `expected`: the expected output, if any (JSON)\n"
                    "- `metadata`: anything else about the item (a JSON object)",
                ),
            ],
        }
        return self._items(dataset, version), about

    @staticmethod
    def _items(dataset: Dataset, version: int) -> Iterator[dict]:
        last_id = 0
        while True:
            batch = list(
                DatasetItem.objects.filter(dataset=dataset, pk__gt=last_id)
                .in_version(version)
                .order_by("id")
                .values("id", "key", "input", "expected", "metadata")[:ITEMS_BATCH]
            )
            for item in batch:
                yield {key: item[key] for key in ("key", "input", "expected", "metadata")}
            if len(batch) < ITEMS_BATCH:
                return
            last_id = batch[-1]["id"]


class HubResultsPush(HubPush):
    kind = "hf_results"
    label = "Experiment results to the Hugging Face Hub"
    table = "results"
    default_split = "results"
    option_fields = ("experiment",)

    def clean_subject(self, project, options):
        experiment_id = _int_option(options, "experiment", required=True)
        experiment = Experiment.objects.filter(project=project, pk=experiment_id).first()
        if experiment is None:
            raise InvalidRequest(f"no experiment with id {experiment_id} in this project")
        if not experiment.ended:
            raise InvalidRequest(f"the experiment {experiment.name!r} is {experiment.status}: push it once ended")
        return {"experiment": experiment.pk}

    def rows(self, job):
        experiment = (
            Experiment.objects.filter(project=job.project, pk=job.options["experiment"])
            .select_related("dataset", "dataset_version")
            .first()
        )
        if experiment is None:
            raise ExportFailed("the experiment was deleted")
        summary = experiment.summary or {}
        metrics = summary.get("metrics") or {}
        lines = [f"- status: {experiment.status}", f"- pass rate: {_number(summary.get('pass_rate'))}"]
        lines += [f"- {name}: mean {_number((value or {}).get('mean'))}" for name, value in metrics.items()]
        who = ", ".join(
            part
            for part in (
                experiment.agent_name and f"agent {experiment.agent_name} {experiment.agent_version_label}".strip(),
                experiment.model and f"model {experiment.model}",
            )
            if part
        )
        about = {
            "title": f"{experiment.name}: results",
            "summary": f"The results of the experiment “{experiment.name}” on version "
            f"{experiment.dataset_version.number} of the dataset “{experiment.dataset.name}”"
            + (f" ({who})" if who else "")
            + ", exported from AgentOps Studio: {rows} items, one JSON object per line.",
            "tags": ["evaluation", "experiment-results"],
            "sections": [
                ("Summary", "\n".join(lines)),
                (
                    "Columns",
                    "- `item_key`, `status`, `input`, `expected`, `output`\n"
                    "- `scores`: metric -> score from 0 to 1 (null when not scored)\n"
                    "- `passed`: metric -> whether the score reached the evaluator's threshold\n"
                    "- `cost` (a decimal string), `latency_ms`, `tokens`, `error`, `run_id`",
                ),
            ],
        }
        return experiment_results_rows(experiment), about


class HubLeaderboardPush(HubPush):
    kind = "hf_leaderboard"
    label = "Leaderboard to the Hugging Face Hub"
    table = "leaderboard"
    default_split = "leaderboard"
    option_fields = ("dataset",)

    def clean_subject(self, project, options):
        return {"dataset": _dataset_option(project, options).pk}

    def rows(self, job):
        dataset = Dataset.objects.filter(project=job.project, pk=job.options["dataset"]).first()
        if dataset is None:
            raise ExportFailed("the dataset was deleted")
        names, leader_rows = selectors.leaderboard(dataset=dataset)
        rows = list(leaderboard_rows(dataset, names, leader_rows))
        header = ["Experiment", "Model", "Pass rate", *names]
        table = [
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
            *(
                "| "
                + " | ".join(
                    [
                        _cell(row["name"]),
                        _cell(row["model"]),
                        _number(row["pass_rate"]),
                        *(_number(row["metrics"][name]["mean"]) for name in names),
                    ]
                )
                + " |"
                for row in rows[:50]
            ),
        ]
        about = {
            "title": f"{dataset.name}: leaderboard",
            "summary": f"The leaderboard of the dataset “{dataset.name}” of the project “{job.project.name}”, "
            "exported from AgentOps Studio: {rows} ended experiments, newest first, one JSON object per line, "
            "each metric with its mean, 95% interval and pass rate.",
            "tags": ["evaluation", "leaderboard"],
            "sections": [("Leaderboard", "\n".join(table))],
        }
        return rows, about


def _number(value) -> str:
    return "–" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def _cell(value) -> str:
    return str(value or "").replace("|", "\\|").replace("\n", " ")


class HubImport(HubKind):
    """A split of a Hub dataset repository into a new version of a dataset."""

    kind = "hf_import"
    label = "Import from the Hugging Face Hub"
    table = "items"
    default_split = "train"
    common_fields = ("repo_id", "split")
    option_fields = ("revision", "columns", "dataset", "new_dataset")

    def clean_subject(self, project, options):
        from evals.bulk_export.hub_import import clean_columns
        from evals.services.datasets import MAX_NAME_LENGTH

        cleaned: dict = {"columns": clean_columns(options.get("columns"))}
        revision = options.get("revision") or ""
        if revision and (not isinstance(revision, str) or not REVISION_PATTERN.match(revision)):
            raise InvalidRequest("options.revision must be a branch, tag or commit of the repository")
        cleaned["revision"] = revision
        has_dataset = options.get("dataset") not in (None, "")
        new_name = options.get("new_dataset")
        if has_dataset == bool(new_name):
            raise InvalidRequest("give options.dataset (an existing dataset's id) or options.new_dataset (a name)")
        if has_dataset:
            cleaned["dataset"] = _dataset_option(project, options).pk
        else:
            if not isinstance(new_name, str) or not new_name.strip() or len(new_name.strip()) > MAX_NAME_LENGTH:
                raise InvalidRequest(f"options.new_dataset must be a name of 1 to {MAX_NAME_LENGTH} characters")
            if Dataset.objects.filter(project=project, name=new_name.strip()).exists():
                raise InvalidRequest(f"a dataset named {new_name.strip()!r} exists already: give its id as dataset")
            cleaned["new_dataset"] = new_name.strip()
        return cleaned

    def describe(self, job):
        return f"{self.label}: {job.options.get('repo_id', '')} ({job.options.get('split', '')})"

    def run(self, job, progress):
        from evals.bulk_export.hub_import import run_import

        run_import(job, _account(job), progress)


HUB_KINDS = (HubDatasetPush(), HubResultsPush(), HubLeaderboardPush(), HubImport())
