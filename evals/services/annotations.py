"""Human scores: annotation queues of runs, reviewers taking the next run of a queue,
and the scores they give it (from a queue or straight from the run's page).

A human score always has a person as its author: API keys cannot give one. Each
reviewer has at most one score per run and metric (the constraint
``score_unique_human_per_author``): scoring a run again replaces their own score and
keeps everyone else's, so two reviewers' opinions can be compared.

Two reviewers working through the same queue get different runs: ``next_entry`` claims
the entry it hands out for ``CLAIM_SECONDS`` in the shared cache (Redis ``SET NX``).
A row lock (``select_for_update(skip_locked=True)``) would not do here, since it ends
with the request that showed the run, long before the reviewer submits. The claim is
advisory: if it expires or the cache is lost, two people may score the same run, and
both scores are simply kept, one per author.
"""

from __future__ import annotations

from typing import Any

from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from agentops.errors import Conflict, Forbidden, InvalidRequest, ServiceError
from agentops.models import ApiKey
from agentops.services.audit import audit_record
from evals import scoring
from evals.models import AnnotationQueue, Evaluator, QueueEntry, Score
from runs.models import Run

# How long a run handed to a reviewer stays theirs before another reviewer may get it.
CLAIM_SECONDS = 10 * 60
# Runs added to a queue in one request (a larger list is sent in several).
MAX_RUNS_PER_ADD = 1000
# Pending entries looked at per round trip to the cache while looking for an unclaimed one.
CLAIM_BATCH = 100
MAX_COMMENT = 5000


# --- Queues --------------------------------------------------------------------------------------


def human_evaluators(*, project) -> QuerySet[Evaluator]:
    """The project's human evaluators that are in use (not archived), by name."""
    return Evaluator.objects.filter(project=project, kind=Evaluator.Kind.HUMAN, archived=False).order_by("name")


def _resolve_human_evaluators(project, refs: list) -> list[Evaluator]:
    """The human evaluators named by ``refs`` (ids or names); unknown ones are named in the error."""
    if not isinstance(refs, list | tuple) or not refs:
        raise InvalidRequest("choose at least one human evaluator for the queue")
    by_id = {evaluator.pk: evaluator for evaluator in human_evaluators(project=project)}
    by_name = {evaluator.name: evaluator for evaluator in by_id.values()}
    chosen: dict[int, Evaluator] = {}
    unknown = []
    for ref in refs:
        evaluator = by_id.get(ref) if isinstance(ref, int) and not isinstance(ref, bool) else by_name.get(str(ref))
        if evaluator is None and isinstance(ref, str) and ref.isdecimal():
            evaluator = by_id.get(int(ref))
        if evaluator is None:
            unknown.append(str(ref))
        else:
            chosen[evaluator.pk] = evaluator
    if unknown:
        raise InvalidRequest(
            f"not human evaluators of this project: {', '.join(unknown)} "
            "(a queue is scored by people, so only evaluators of kind “human” can be used)",
            details={"unknown": unknown},
        )
    return list(chosen.values())


def queue_create(
    *, project, actor, name: str, description: str = "", evaluator_ids: list, ip: str | None = None
) -> AnnotationQueue:
    """Create an annotation queue scored with the project's human evaluators ``evaluator_ids``
    (their ids or names)."""
    name = (name or "").strip()
    if not name:
        raise InvalidRequest("give the queue a name")
    if len(name) > AnnotationQueue._meta.get_field("name").max_length:
        raise InvalidRequest("the queue's name is too long (100 characters at most)")
    evaluators = _resolve_human_evaluators(project, evaluator_ids)
    try:
        with transaction.atomic():
            queue = AnnotationQueue.objects.create(
                organization_id=project.organization_id,
                project=project,
                name=name,
                description=(description or "").strip(),
                created_by=actor if not isinstance(actor, ApiKey) else None,
            )
            queue.evaluators.set(evaluators)
            audit_record(
                organization=project.organization,
                actor=actor,
                action="annotation_queue.create",
                target=queue,
                data={"project": project.slug, "evaluators": [evaluator.name for evaluator in evaluators]},
                ip=ip,
            )
    except IntegrityError:
        raise Conflict(f"a queue named “{name}” already exists in this project") from None
    return queue


def _run_ids(run_ids) -> list[int]:
    if not isinstance(run_ids, list | tuple) or not run_ids:
        raise InvalidRequest("give the ids of the runs to add (run_ids: a list of run ids)")
    if len(run_ids) > MAX_RUNS_PER_ADD:
        raise InvalidRequest(f"add at most {MAX_RUNS_PER_ADD} runs at a time")
    ids = []
    for value in run_ids:
        if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdecimal():
            raise InvalidRequest(f"run ids are whole numbers; got {value!r}")
        ids.append(int(value))
    return list(dict.fromkeys(ids))


def queue_add_runs(*, queue: AnnotationQueue, actor, run_ids: list, ip: str | None = None) -> int:
    """Add runs of the queue's project to it; runs already in it are left as they are.
    Returns how many were added. Unknown ids (or another project's) are named in the error
    and nothing is added."""
    ids = _run_ids(run_ids)
    found = set(Run.objects.filter(project_id=queue.project_id, pk__in=ids).values_list("pk", flat=True))
    missing = [run_id for run_id in ids if run_id not in found]
    if missing:
        raise InvalidRequest(
            f"no run with id {', '.join(map(str, missing))} in this project; nothing was added",
            details={"unknown_run_ids": missing},
        )
    with transaction.atomic():
        already = set(QueueEntry.objects.filter(queue=queue, run_id__in=ids).values_list("run_id", flat=True))
        new = [run_id for run_id in ids if run_id not in already]
        # ignore_conflicts: a run added by someone else at the same moment stays added once.
        QueueEntry.objects.bulk_create(
            [
                QueueEntry(
                    organization_id=queue.organization_id, project_id=queue.project_id, queue=queue, run_id=run_id
                )
                for run_id in new
            ],
            ignore_conflicts=True,
        )
        if new:
            audit_record(
                organization=queue.project.organization,
                actor=actor,
                action="annotation_queue.add_runs",
                target=queue,
                data={"run_ids": new[:100], "count": len(new)},
                ip=ip,
            )
    return len(new)


def queue_progress(*, queue: AnnotationQueue) -> dict[str, int]:
    """How many of the queue's runs are done, skipped and waiting (one query)."""
    counts = QueueEntry.objects.filter(queue=queue).aggregate(
        total=Count("id"),
        done=Count("id", filter=Q(status=QueueEntry.Status.DONE)),
        skipped=Count("id", filter=Q(status=QueueEntry.Status.SKIPPED)),
    )
    counts["pending"] = counts["total"] - counts["done"] - counts["skipped"]
    return counts


# --- Taking the next run -------------------------------------------------------------------------


def _claim_key(entry_id: int) -> str:
    return f"evals:queue-entry-claim:{entry_id}"


def _holding_key(queue_id: int, user_id: int) -> str:
    return f"evals:queue-holding:{queue_id}:{user_id}"


def _release(entry: QueueEntry) -> None:
    cache.delete(_claim_key(entry.pk))


def next_entry(*, queue: AnnotationQueue, user) -> QueueEntry | None:
    """The run ``user`` should score next in ``queue``: the one they were given and have not
    finished, else the oldest pending entry no other reviewer holds (claimed for
    ``CLAIM_SECONDS``). None when nothing is left for them."""
    pending = QueueEntry.objects.filter(queue=queue, status=QueueEntry.Status.PENDING).select_related("run")
    holding_key = _holding_key(queue.pk, user.pk)
    held_id = cache.get(holding_key)
    if held_id is not None:
        held = pending.filter(pk=held_id).first()
        if held is not None:
            claim = _claim_key(held.pk)
            holder = cache.get(claim)
            # Still this reviewer's (kept for another CLAIM_SECONDS), or free again after its
            # claim ran out: taken back by SET NX, as any free run is, so a reviewer who
            # claimed it in between keeps it.
            if holder == user.pk or (holder is None and cache.add(claim, user.pk, CLAIM_SECONDS)):
                cache.set(claim, user.pk, CLAIM_SECONDS)
                cache.set(holding_key, held.pk, CLAIM_SECONDS)
                return held
    after = 0
    while True:
        batch = list(pending.filter(pk__gt=after).order_by("pk")[:CLAIM_BATCH])
        if not batch:
            return None
        holders = cache.get_many([_claim_key(entry.pk) for entry in batch])
        for entry in batch:
            holder = holders.get(_claim_key(entry.pk))
            if holder == user.pk:
                taken = True
            elif holder is None:
                # SET NX: of two reviewers asking at once, one gets it, the other moves on.
                taken = cache.add(_claim_key(entry.pk), user.pk, CLAIM_SECONDS)
            else:
                taken = False
            if taken:
                cache.set(holding_key, entry.pk, CLAIM_SECONDS)
                return entry
        after = batch[-1].pk


def skip_entry(*, entry: QueueEntry, actor, ip: str | None = None) -> QueueEntry:
    """Take a run out of the queue unscored (nobody is shown it again)."""
    with transaction.atomic():
        updated = QueueEntry.objects.filter(pk=entry.pk, status=QueueEntry.Status.PENDING).update(
            status=QueueEntry.Status.SKIPPED, completed_by=actor, completed_at=timezone.now()
        )
        if updated:
            audit_record(
                organization=entry.queue.project.organization,
                actor=actor,
                action="annotation_queue.skip",
                target=entry.queue,
                data={"run_id": entry.run_id},
                ip=ip,
            )
    _release(entry)
    entry.refresh_from_db()
    return entry


# --- Scores --------------------------------------------------------------------------------------


def _normalised(evaluator: Evaluator, raw: Any) -> float:
    try:
        value = scoring.normalise_human(evaluator.config, raw)
    except ServiceError as exc:
        raise InvalidRequest(f"{evaluator.name}: {exc.message}") from None
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"{evaluator.name}: {exc}") from None
    return float(value)


def submit_scores(
    *,
    author,
    scores: dict,
    run: Run | None = None,
    entry: QueueEntry | None = None,
    comment: str = "",
    ip: str | None = None,
) -> list[Score]:
    """Record ``author``'s scores of a run, ``{evaluator name: raw value}`` on each human
    evaluator's own scale (normalised to 0..1). Their earlier score of the same run and
    metric is replaced; other people's stay. Given a queue ``entry``, it is marked done."""
    if author is None or isinstance(author, ApiKey) or not getattr(author, "is_authenticated", False):
        raise Forbidden(
            "human scores need a signed-in person as their author; API keys cannot give them "
            "(report automated scores as an experiment's results instead)"
        )
    if entry is not None:
        run = entry.run
    if run is None:
        raise InvalidRequest("say which run is scored")
    if not isinstance(scores, dict) or not scores:
        raise InvalidRequest("give at least one score: {evaluator name: value}")
    comment = (comment or "").strip()
    if len(comment) > MAX_COMMENT:
        raise InvalidRequest(f"the comment is too long ({MAX_COMMENT} characters at most)")
    evaluators = {evaluator.name: evaluator for evaluator in human_evaluators(project=run.project)}
    unknown = [str(name) for name in scores if name not in evaluators]
    if unknown:
        raise InvalidRequest(
            f"not human evaluators of this project: {', '.join(unknown)}", details={"unknown": unknown}
        )
    rows = []
    for name, raw in scores.items():
        evaluator = evaluators[name]
        value = _normalised(evaluator, raw)
        rows.append((evaluator, raw, value, scoring.passed(scoring.spec_of(evaluator), value)))

    now = timezone.now()
    details_extra = {"queue": entry.queue_id} if entry is not None else {}
    saved = []
    with transaction.atomic():
        for evaluator, raw, value, passed in rows:
            score, _created = Score.objects.update_or_create(
                run=run,
                name=evaluator.name,
                author=author,
                source=Score.Source.HUMAN,
                defaults={
                    "evaluator": evaluator,
                    "value": value,
                    "passed": passed,
                    "reasoning": comment,
                    "details": {"raw": raw, **details_extra},
                    "error": "",
                    "created_at": now,
                },
                create_defaults={
                    "organization_id": run.organization_id,
                    "project_id": run.project_id,
                    "evaluator": evaluator,
                    "value": value,
                    "passed": passed,
                    "reasoning": comment,
                    "details": {"raw": raw, **details_extra},
                    "created_at": now,
                },
            )
            saved.append(score)
        if entry is not None:
            # Another reviewer may have finished it a moment ago: their completion stands.
            QueueEntry.objects.filter(pk=entry.pk, status=QueueEntry.Status.PENDING).update(
                status=QueueEntry.Status.DONE, completed_by=author, completed_at=now
            )
        audit_record(
            organization=run.project.organization,
            actor=author,
            action="score.human",
            target=run,
            data={"scores": {score.name: score.value for score in saved}, **details_extra},
            ip=ip,
        )
    if entry is not None:
        _release(entry)
        entry.refresh_from_db()
    return saved


def run_scores(*, run: Run) -> QuerySet[Score]:
    """Every score of a run, whatever its source, with its author and evaluator."""
    return Score.objects.filter(run=run).select_related("author", "evaluator").order_by("name", "source", "id")
