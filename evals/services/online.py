"""Online evaluation: rules that score a project's incoming production runs with an
evaluator, a sampled share of them, in the background.

``score_recent_runs`` is called by the periodic task ``evals.tasks.score_online_runs``
(every 30 seconds). For each enabled rule it looks at runs that ended (succeeded or
failed) since the rule's cursor, minus ``OVERLAP`` so a run whose transaction committed
a little after it was stamped is still seen. Which runs a rule scores is decided by a
hash of the rule's id and the run's id (``sample_point``), so scanning the same runs
again never changes the choice, and each run is scored once per metric (the constraint
``score_unique_online_metric``). Runs of experiments are left out: the experiment scores
them itself. Work is bounded per call (``MAX_RUNS_PER_RULE`` runs and
``RULE_TIME_BUDGET_SECONDS`` per rule): a backlog drains over several calls, as the
cursor only moves past runs that were handled.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from datetime import datetime, timedelta

from django.core.cache import cache
from django.db import DataError, IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone

from agentops.errors import InvalidRequest, NotFound
from agentops.scoping import dangerously_unscoped, organization_scope
from agentops.services.audit import audit_record, audited_create, audited_delete
from evals import scoring
from evals.models import Evaluator, ExperimentResult, OnlineRule, Score
from runs.models import Run

logger = logging.getLogger(__name__)

# Runs stamped this long before the cursor are looked at again: a run's ``updated_at`` is
# set before its transaction commits, so a scan may miss it the first time.
OVERLAP = timedelta(minutes=2)
MAX_RUNS_PER_RULE = 500
RULE_TIME_BUDGET_SECONDS = 120
# One scan of a rule at a time (a slow LLM judge may still be scoring when the next beat comes).
RULE_LEASE_SECONDS = 15 * 60
FILTER_KEYS = ("agent_name", "environment", "tag")
MAX_RULES_PER_PROJECT = 50


# --- Rules ---------------------------------------------------------------------------------------


def _online_evaluator(project, evaluator) -> Evaluator:
    """The evaluator a rule uses: an Evaluator, its id or its name, of ``project``, not human."""
    if isinstance(evaluator, Evaluator):
        found = evaluator if evaluator.project_id == project.pk else None
    else:
        queryset = Evaluator.objects.filter(project=project)
        if isinstance(evaluator, int) and not isinstance(evaluator, bool):
            found = queryset.filter(pk=evaluator).first()
        elif isinstance(evaluator, str) and evaluator.strip():
            found = queryset.filter(name=evaluator.strip()).first()
            if found is None and evaluator.strip().isdecimal():
                found = queryset.filter(pk=int(evaluator)).first()
        else:
            raise InvalidRequest("choose the evaluator that scores the runs (its id or name)")
    if found is None:
        raise NotFound("evaluator not found in this project")
    if found.kind == Evaluator.Kind.HUMAN:
        raise InvalidRequest(
            f"“{found.name}” is scored by people; online rules need an automatic evaluator "
            "(add runs to an annotation queue instead)"
        )
    if found.archived:
        raise InvalidRequest(f"“{found.name}” is archived; choose an evaluator in use")
    return found


def _sampling_rate(value) -> float:
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise InvalidRequest("sampling_rate is a number from 0 to 1 (the share of runs scored)") from None
    if isinstance(value, bool) or not 0 <= rate <= 1:
        raise InvalidRequest("sampling_rate is a number from 0 to 1 (the share of runs scored)")
    return rate


def clean_filters(filters) -> dict[str, str]:
    """The rule's filters: ``agent_name``, ``environment`` and ``tag``, each a text that
    the run's field must equal (a tag: be one of its tags). Empty ones are dropped."""
    if filters in (None, ""):
        return {}
    if not isinstance(filters, dict):
        raise InvalidRequest("filters is an object: {agent_name?, environment?, tag?}")
    unknown = sorted(str(key) for key in filters if key not in FILTER_KEYS)
    if unknown:
        raise InvalidRequest(
            f"unknown filter {', '.join(unknown)}; filter runs by {', '.join(FILTER_KEYS)}",
            details={"unknown": unknown},
        )
    cleaned = {}
    for key in FILTER_KEYS:
        value = filters.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidRequest(f"filters.{key} is a text")
        if "\x00" in value:
            raise InvalidRequest(f"filters.{key} holds a NUL character, which cannot be stored")
        value = value.strip()
        if len(value) > 200:
            raise InvalidRequest(f"filters.{key} is too long (200 characters at most)")
        if value:
            cleaned[key] = value
    return cleaned


def rule_create(
    *,
    project,
    actor,
    evaluator,
    sampling_rate=1.0,
    filters: dict | None = None,
    enabled: bool = True,
    ip: str | None = None,
) -> OnlineRule:
    """Start scoring the project's runs that end from now on with ``evaluator`` (an
    automatic one: not human), a ``sampling_rate`` share of those matching ``filters``."""
    chosen = _online_evaluator(project, evaluator)
    rate = _sampling_rate(sampling_rate)
    cleaned = clean_filters(filters)
    with transaction.atomic():
        if OnlineRule.objects.filter(project=project).count() >= MAX_RULES_PER_PROJECT:
            raise InvalidRequest(f"a project has at most {MAX_RULES_PER_PROJECT} online rules; delete one first")
        now = timezone.now()
        return audited_create(
            OnlineRule,
            organization=project.organization,
            actor=actor,
            action="online_rule.create",
            data={"evaluator": chosen.name, "sampling_rate": rate, "filters": cleaned, "enabled": bool(enabled)},
            ip=ip,
            project=project,
            evaluator=chosen,
            sampling_rate=rate,
            filters=cleaned,
            enabled=bool(enabled),
            # Runs that ended before the rule existed are not scored: it is for incoming runs.
            cursor_at=now,
            created_at=now,
        )


def rule_update(
    *,
    rule: OnlineRule,
    actor,
    sampling_rate=None,
    filters: dict | None = None,
    enabled: bool | None = None,
    ip: str | None = None,
) -> OnlineRule:
    """Change a rule's sampling rate, filters or whether it runs. Its evaluator stays (a
    rule's scores carry its name): to score with another, make a new rule. Enabling a
    disabled rule starts from now: runs that ended while it was off are not scored."""
    changes: dict = {}
    if sampling_rate is not None:
        changes["sampling_rate"] = _sampling_rate(sampling_rate)
    if filters is not None:
        changes["filters"] = clean_filters(filters)
    with transaction.atomic():
        current = OnlineRule.objects.select_for_update().get(pk=rule.pk)
        if enabled is not None:
            changes["enabled"] = bool(enabled)
            if enabled and not current.enabled:
                changes["cursor_at"] = timezone.now()
        changed = {key: value for key, value in changes.items() if getattr(current, key) != value}
        for key, value in changed.items():
            setattr(current, key, value)
        if changed:
            current.save(update_fields=list(changed))
            audit_record(
                organization=current.project.organization,
                actor=actor,
                action="online_rule.update",
                target=current,
                data={key: value for key, value in changed.items() if key != "cursor_at"},
                ip=ip,
            )
    return current


def rule_delete(*, rule: OnlineRule, actor, ip: str | None = None) -> None:
    """Stop and remove a rule; the scores it gave stay on their runs."""
    with transaction.atomic():
        audited_delete(
            rule,
            organization=rule.project.organization,
            actor=actor,
            action="online_rule.delete",
            data={"evaluator": rule.evaluator.name, "scored_count": rule.scored_count},
            ip=ip,
        )


def rule_list(*, project) -> QuerySet[OnlineRule]:
    """The project's rules with their evaluators, oldest first."""
    return OnlineRule.objects.filter(project=project).select_related("evaluator").order_by("id")


# --- Sampling ------------------------------------------------------------------------------------


def sample_point(rule_id: int, run_id: int) -> float:
    """Where a run falls in [0, 1) for a rule: the rule scores it when this is below its
    sampling rate. The same as ``_SAMPLE_POINT_SQL`` computes in the database."""
    digest = hashlib.md5(f"{rule_id}:{run_id}".encode(), usedforsecurity=False).hexdigest()
    return int(digest[:8], 16) / 2**32


# The first 32 bits of md5("<rule id>:<run id>") as a fraction: sampling in SQL, so a scan
# only fetches runs it will score (and the unsampled ones never fill a batch).
_SAMPLE_POINT_SQL = (
    f"(('x' || substr(md5(%s::text || ':' || \"{Run._meta.db_table}\".\"id\"::text), 1, 8))::bit(32)::bigint)::float8"
    " / 4294967296.0"
)


def matching_runs(*, rule: OnlineRule, since: datetime) -> QuerySet[Run]:
    """Runs the rule should score that changed at or after ``since``: ended, matching its
    filters, sampled, not from an experiment and not yet scored with its metric; in the
    order they changed."""
    runs = Run.objects.filter(project_id=rule.project_id, status__in=Run.COMPLETED, updated_at__gte=since)
    filters = rule.filters or {}
    if filters.get("agent_name"):
        runs = runs.filter(agent_name=filters["agent_name"])
    if filters.get("environment"):
        runs = runs.filter(environment=filters["environment"])
    if filters.get("tag"):
        runs = runs.filter(tags__contains=[filters["tag"]])
    already_scored = Score.objects.filter(run=OuterRef("pk"), source=Score.Source.ONLINE, name=rule.evaluator.name)
    from_experiment = ExperimentResult.objects.filter(run=OuterRef("pk"))
    runs = runs.exclude(Exists(already_scored)).exclude(Exists(from_experiment))
    if rule.sampling_rate < 1:
        # A constant statement with the rule id bound as a parameter.
        point = RawSQL(_SAMPLE_POINT_SQL, (str(rule.pk),))  # noqa: S611
        runs = runs.annotate(sample_point=point).filter(sample_point__lt=rule.sampling_rate)
    return runs.defer("search").order_by("updated_at", "id")


# --- Scanning ------------------------------------------------------------------------------------


def _evaluate(rule: OnlineRule, spec: dict, run: Run) -> scoring.Outcome:
    try:
        return scoring.evaluate(
            spec,
            scoring.Subject.from_run(run),
            organization=rule.project.organization,
            project=rule.project,
            source="online",
        )
    except Exception as exc:  # noqa: BLE001 - one run's failure is recorded on its score, not fatal to the scan
        logger.exception("online rule %s: evaluating run %s failed", rule.pk, run.pk)
        return scoring.Outcome(value=None, error=f"the evaluator failed: {exc}"[:2000])


def score_rule(*, rule_id: int, now: datetime | None = None) -> int:
    """Score the runs one rule has not handled yet (inside its organization's scope).
    Returns how many scores it stored."""
    now = now or timezone.now()
    rule = (
        OnlineRule.objects.filter(pk=rule_id, enabled=True).select_related("evaluator", "project__organization").first()
    )
    if rule is None:
        return 0
    if rule.evaluator.archived or rule.sampling_rate <= 0:
        # Nothing is sampled now: the runs count as seen, so raising the rate or bringing the
        # evaluator back later does not score the backlog of the meantime.
        OnlineRule.objects.filter(pk=rule.pk).update(cursor_at=now)
        return 0
    lease_key = f"evals:online-rule-lease:{rule.pk}"
    if not cache.add(lease_key, uuid.uuid4().hex, RULE_LEASE_SECONDS):
        return 0  # Another worker is scanning this rule; it will move the cursor.
    try:
        return _scan(rule, now)
    finally:
        cache.delete(lease_key)


def _scan(rule: OnlineRule, now: datetime) -> int:
    since = (rule.cursor_at or rule.created_at) - OVERLAP
    runs = list(matching_runs(rule=rule, since=since)[:MAX_RUNS_PER_RULE])
    spec = scoring.spec_of(rule.evaluator)
    started = time.monotonic()
    scored = 0
    handled = 0
    for run in runs:
        outcome = _evaluate(rule, spec, run)
        value = outcome.value
        try:
            with transaction.atomic():
                Score.objects.create(
                    organization_id=rule.organization_id,
                    project_id=rule.project_id,
                    run=run,
                    evaluator=rule.evaluator,
                    name=rule.evaluator.name,
                    value=value,
                    passed=scoring.passed(spec, value),
                    reasoning=outcome.reasoning or "",
                    details={**(outcome.details or {}), "rule": rule.pk},
                    error=outcome.error or "",
                    source=Score.Source.ONLINE,
                )
            scored += 1
        except IntegrityError:
            pass  # Already scored (another rule with the same evaluator, or an earlier scan).
        except DataError:  # an answer the database refuses: logged, and the scan goes on
            logger.exception("online rule %s: the score of run %s could not be stored", rule.pk, run.pk)
        handled += 1
        if time.monotonic() - started > RULE_TIME_BUDGET_SECONDS:
            break
    if handled == len(runs) and len(runs) < MAX_RUNS_PER_RULE:
        cursor = now  # everything that changed up to now was seen
    else:
        cursor = runs[handled - 1].updated_at  # the rest is picked up by the next call
    OnlineRule.objects.filter(pk=rule.pk).update(cursor_at=cursor, scored_count=F("scored_count") + scored)
    return scored


def score_recent_runs(now: datetime | None = None) -> int:
    """Score the runs every enabled online rule (of every organization) has not handled
    yet; called by the periodic task ``evals.tasks.score_online_runs``. Returns how many
    scores were stored."""
    with dangerously_unscoped("online evaluation scans the enabled rules of every organization"):
        targets = list(OnlineRule.objects.filter(enabled=True).order_by("id").values_list("pk", "organization_id"))
    total = 0
    for rule_id, organization_id in targets:
        with organization_scope(organization_id):
            try:
                total += score_rule(rule_id=rule_id, now=now)
            except Exception:  # noqa: BLE001 - one broken rule must not stop the others
                logger.exception("online rule %s: the scan failed", rule_id)
    return total
