"""The evaluator kinds, one object each, registered under the string stored in
``Evaluator.kind`` (as Django registers each lookup on a field). A kind holds all it
needs: ``settings`` (the configuration keys it takes), ``clean`` (reads them, refusing
what is wrong, defaults filled in), ``score`` (an ``Outcome`` for a ``Subject``),
``example`` (a configuration the create form and docs show; it passes ``clean``),
``help`` (one line for the pages) and what the pages say about it (``try_note``,
``signing_secret``). The families live beside this module: ``rules``, ``trajectory``,
``judge``, ``webhook``, ``human``; importing ``evals.scoring`` registers them all.

An evaluator is applied through its *spec*, ``{"id", "name", "kind", "config",
"threshold"}`` (``spec_of``): experiments store the specs they started with, so a
later edit of an evaluator does not change how an experiment scores.

``evaluate`` never raises for a bad output: an output that fails a rule scores 0, and
an evaluator that cannot score at all (no expected output to compare with, a judge
that answered nonsense, a webhook that timed out) gives ``Outcome(value=None,
error=...)``. Configurations are checked when an evaluator is saved
(``validate_config``); docs/evaluations.md describes every kind.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from django.utils import timezone

from agentops.errors import InvalidRequest
from agentops.jsonsafe import storable_lossy, storage_problem
from evals.scoring.config import ConfigReader
from evals.scoring.subject import Outcome, Subject

logger = logging.getLogger(__name__)


class EvaluatorKind:
    """One kind of evaluator. Subclasses set the class attributes, read their settings
    in ``clean`` and score in ``score``, and are registered with ``@register``."""

    name: ClassVar[str] = ""  # the value of Evaluator.kind, stored on evaluators and in specs
    settings: ClassVar[tuple[str, ...]] = ()
    example: ClassVar[dict[str, Any]] = {}
    help: ClassVar[str] = ""
    # What trying it on the evaluator's page does besides scoring ("" when nothing).
    try_note: ClassVar[str] = ""
    # Whether its evaluators carry a signing secret (encrypted, shown once).
    signing_secret: ClassVar[bool] = False
    # Whether ``score`` reads the subject's steps or tool calls (a run's trajectory is
    # then read from the database; rules that look at the output only say False).
    reads_trajectory: ClassVar[bool] = True

    def clean(self, config: ConfigReader) -> None:
        """Read every setting through ``config`` (which keeps them, cleaned); raise
        InvalidRequest saying what is wrong."""

    def score(self, spec: dict, config: dict, subject: Subject, organization) -> Outcome:
        """Score ``subject`` with a configuration that passed ``clean``. May raise: the
        caller turns an exception into an Outcome without a score."""
        raise NotImplementedError


_KINDS: dict[str, EvaluatorKind] = {}


def register(kind_class: type[EvaluatorKind]) -> type[EvaluatorKind]:
    """Class decorator: the one object of a kind, under its name."""
    if not kind_class.name or kind_class.name in _KINDS:
        raise ValueError(f"evaluator kind {kind_class.name!r} has no name or is registered twice")
    _KINDS[kind_class.name] = kind_class()
    return kind_class


def get_kind(name: str) -> EvaluatorKind | None:
    """The registered kind named ``name``, or None."""
    return _KINDS.get(name)


def kinds() -> list[EvaluatorKind]:
    """Every registered kind (pages list them in the order of ``Evaluator.Kind``)."""
    return list(_KINDS.values())


def spec_of(evaluator) -> dict:
    """What an experiment stores of an evaluator, so later edits do not change it."""
    return {
        "id": evaluator.pk,
        "name": evaluator.name,
        "kind": evaluator.kind,
        "config": dict(evaluator.config or {}),
        "threshold": evaluator.pass_threshold,
    }


def reads_trajectory(specs: list[dict]) -> bool:
    """Whether any of these evaluators reads a run's steps or tool calls (an unknown kind
    counts as reading them)."""
    return any(getattr(_KINDS.get(spec.get("kind")), "reads_trajectory", True) for spec in specs)


def passed(spec: dict, value: float | None) -> bool | None:
    """Whether a score passes the evaluator's threshold (None when there is no score)."""
    if value is None:
        return None
    return value >= float(spec.get("threshold", 0.5))


def validate_config(kind: str, config: dict) -> dict:
    """The cleaned configuration of a ``kind`` evaluator (defaults filled in), or
    InvalidRequest saying what is wrong."""
    evaluator_kind = _KINDS.get(kind)
    if evaluator_kind is None:
        raise InvalidRequest(f"unknown evaluator kind {kind!r}; use one of {', '.join(_KINDS)}")
    if problem := storage_problem(config):
        raise InvalidRequest(f"the configuration cannot be stored: {problem}")
    reader = ConfigReader(kind, config, evaluator_kind.settings)
    evaluator_kind.clean(reader)
    return reader.cleaned


def evaluate(
    spec: dict, subject: Subject, *, organization, project=None, source: str = "", experiment_id: int | None = None
) -> Outcome:
    """Score ``subject`` with the evaluator ``spec``. Never raises for bad output. A paid
    model call the evaluator made (the LLM judge) goes to ``project``'s billing ledger as
    evaluation spend, with ``source`` (experiment, online, try) and ``experiment_id``."""
    kind = spec.get("kind")
    evaluator_kind = _KINDS.get(kind)
    if evaluator_kind is None:
        return Outcome(value=None, error=f"unknown evaluator kind {kind!r}")
    config = spec.get("config") or {}
    try:
        outcome = evaluator_kind.score(spec, config, subject, organization)
    except InvalidRequest as exc:  # e.g. no Mistral key for the judge
        return Outcome(value=None, error=exc.message)
    except Exception as exc:  # noqa: BLE001 - one evaluator's failure must not stop an experiment
        logger.exception("evaluator %s (%s) failed", spec.get("name"), kind)
        return Outcome(value=None, error=f"the evaluator failed: {type(exc).__name__}: {str(exc)[:300]}")
    if outcome.model_call is not None and project is not None:
        _record_model_call(
            outcome.model_call,
            project=project,
            evaluator=str(spec.get("name") or kind),
            source=source,
            experiment_id=experiment_id,
            run_id=subject.run_id,
        )
    # A judge's or a webhook's answer is stored as given: nothing in it may be unstorable.
    return Outcome(
        value=outcome.value,
        reasoning=storable_lossy(outcome.reasoning or ""),
        details=storable_lossy(outcome.details or {}),
        error=storable_lossy(outcome.error or ""),
    )


def _record_model_call(call: dict, *, project, evaluator: str, source: str, experiment_id, run_id) -> None:
    """The judge's call into the billing ledger (billing sits below evals: its service
    writes it). A ledger failure is logged, never the score's: the call was made."""
    from billing.ledger import evaluation_usage_record

    try:
        evaluation_usage_record(
            organization_id=project.organization_id,
            project_id=project.pk,
            model=call["model"],
            input_tokens=call["input_tokens"],
            cached_input_tokens=call["cached_input_tokens"],
            output_tokens=call["output_tokens"],
            cost=call["cost"],
            price_id=call["price_id"],
            at=timezone.now(),
            evaluator=evaluator,
            source=source,
            experiment_id=experiment_id,
            run_id=run_id,
        )
    except Exception:  # noqa: BLE001 - the score stands; the missing ledger row is logged
        logger.exception("recording the judge call of %s in the ledger failed", evaluator)
