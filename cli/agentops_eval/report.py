"""What the CLI reports: the summary table (stdout), JUnit XML, Markdown and JSON.

All of them are built from one ``Outcome``: the experiment object, the gate endpoint's
answer (if the gate was evaluated), the failing item results (if read) and, when something
went wrong, a one-line message.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from agentops_eval import __version__

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"

#: Most failing items listed in the JUnit XML and in the Markdown.
MAX_JUNIT_ITEMS = 200
MAX_MARKDOWN_ITEMS = 20
#: Longest message put in a JUnit ``message`` attribute or a Markdown cell.
MAX_MESSAGE = 500

MARKDOWN_MARKER = "<!-- agentops-eval -->"


@dataclass
class Outcome:
    status: str  # PASSED | FAILED | ERROR
    exit_code: int
    message: str = ""  # why, for ERROR (and a note for the others)
    experiment: dict | None = None
    gate: dict | None = None  # the answer of POST experiments/{id}/gate/
    conditions: list[dict] = field(default_factory=list)  # the conditions asked for
    skipped: list[dict] = field(default_factory=list)  # relative ones left out: no baseline (--if-no-baseline skip)
    skip_reason: str = ""
    results: list[dict] | None = None  # the experiment's result rows, when read
    results_complete: bool = True
    junit_items: bool = False  # list the failing items in the JUnit XML too
    waited_seconds: float | None = None


# -- formatting helpers -------------------------------------------------------------------------


def fmt_num(value: Any) -> str:
    """A metric value for a table: 3 decimals for scores, fewer digits for large numbers,
    significant digits for tiny ones (costs)."""
    if value is None or value == "":
        return "n/a"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if number != number:  # NaN
        return "n/a"
    if number.is_integer() and abs(number) >= 10:
        return str(int(number))
    if abs(number) >= 10:
        return f"{number:.1f}"
    if abs(number) >= 0.01 or number == 0:
        return f"{number:.3f}"
    return f"{number:.3g}"


def fmt_count(value: Any) -> str:
    """A count (a metric's ``n``): a whole number as such, 8 and not 8.000 as fmt_num
    writes a score below 10."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return fmt_num(value)
    return str(int(number)) if number.is_integer() else fmt_num(value)


def fmt_signed(value: Any) -> str:
    """A change: "+0.020", "-0.050"; no sign for none."""
    text = fmt_num(value)
    if text != "n/a" and not text.startswith("-") and text.strip("0.") != "":
        text = "+" + text
    return text


def fmt_money(value: Any) -> str:
    """A decimal string of the API ("0.004200000") without its trailing zeros."""
    if value is None or value == "":
        return "n/a"
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return str(value)
    if amount == 0:
        return "0"
    return f"{amount.normalize():f}"


def fmt_pct(value: Any) -> str:
    if value is None or value == "":
        return "n/a"
    try:
        return f"{float(value) * 100:.1f}%"
    except (TypeError, ValueError):
        return str(value)


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def condition_text(condition: dict) -> str:
    """``correctness >= 0.8``, or ``correctness change >= -0.02`` for a relative one."""
    metric = condition.get("metric", "?")
    comparator = condition.get("comparator", "?")
    threshold_text = _threshold_text(condition)
    if condition.get("relative"):
        return f"{metric} change vs baseline {comparator} {threshold_text}"
    return f"{metric} {comparator} {threshold_text}"


def _plain(value: Any, *, signed: bool = False) -> str:
    """A threshold as the user wrote it (no rounding); ``signed`` adds "+" to a positive one
    (a change against the baseline)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value)
    if signed and isinstance(value, int | float) and value > 0:
        text = "+" + text
    return text


_CONTROL = re.compile("[\x00-\x1f\x7f]")
# What a terminal may take for a command: C0 controls but line feed and tab (an escape
# sequence starts with ESC; a carriage return overwrites the line), DEL, and C1 controls
# (\x9b starts a sequence on its own in some terminals).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _threshold_text(condition: dict) -> str:
    return _plain(condition.get("threshold"), signed=bool(condition.get("relative")))


def one_line(text: Any, limit: int = MAX_MESSAGE) -> str:
    """One line of printable text (control characters, terminal escapes too, become "?")."""
    text = _CONTROL.sub("?", " ".join(str(text or "").split()))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def printable(text: str) -> str:
    """``text`` for a terminal, lines and tabs kept: every other control character (an
    escape sequence's start among them) becomes "?"."""
    return _UNPRINTABLE.sub("?", text)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain-text table with columns padded to their widest cell."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(headers)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return "\n".join(lines)


def metric_rows(experiment: dict | None) -> list[list[str]]:
    """[metric, mean, 95% CI, pass rate, n] per metric of the experiment's summary."""
    metrics = ((experiment or {}).get("summary") or {}).get("metrics") or {}
    rows = []
    for name, values in metrics.items():
        values = values or {}
        low, high = values.get("ci_low"), values.get("ci_high")
        ci = f"[{fmt_num(low)}, {fmt_num(high)}]" if low is not None and high is not None else "n/a"
        rows.append(
            [str(name), fmt_num(values.get("mean")), ci, fmt_pct(values.get("pass_rate")), fmt_count(values.get("n"))]
        )
    return rows


def gate_rows(outcome: Outcome) -> list[dict]:
    """The conditions to report: the gate's answers and the skipped ones, or, when the gate
    was not evaluated, the ones asked for."""
    skipped = [dict(c, status=SKIPPED, actual=None, baseline_value=None) for c in outcome.skipped]
    if outcome.gate is not None or (skipped and outcome.status != ERROR):
        return list((outcome.gate or {}).get("conditions") or []) + skipped
    return [dict(c, status=None, actual=None) for c in outcome.conditions]


def failing_items(outcome: Outcome) -> list[dict]:
    """Result rows that errored or failed at least one evaluator, each
    ``{"key", "kind": "error"|"failure", "message"}``."""
    items = []
    for row in outcome.results or []:
        key = str(row.get("item_key") or row.get("id") or "?")
        if row.get("status") == "error" or row.get("error"):
            items.append({"key": key, "kind": "error", "message": one_line(row.get("error") or "error")})
            continue
        passed = row.get("passed") or {}
        scores = row.get("scores") or {}
        failed = [name for name, ok in passed.items() if ok is False]
        if failed:
            detail = ", ".join(f"{name}={fmt_num(scores.get(name))}" for name in failed)
            items.append({"key": key, "kind": "failure", "message": f"failed {detail}"})
    return items


def verdict(outcome: Outcome) -> tuple[str, str]:
    """("PASSED" | "FAILED" | "ERROR", a short reason)."""
    conditions = gate_rows(outcome)
    if outcome.status == ERROR:
        return "ERROR", outcome.message
    evaluated = [c for c in conditions if c.get("status") != SKIPPED]
    skipped = len(conditions) - len(evaluated)
    note = f"; {skipped} skipped: {outcome.skip_reason}" if skipped else ""
    if outcome.status == FAILED:
        failed = sum(1 for c in evaluated if c.get("status") == FAILED)
        return "FAILED", f"{failed} of {_count(len(evaluated), 'condition')} failed{note}"
    if not evaluated and skipped:
        return "PASSED", f"the experiment succeeded; {_count(skipped, 'condition')} skipped: {outcome.skip_reason}"
    if not evaluated:
        return "PASSED", "no conditions; the experiment succeeded"
    return "PASSED", f"{len(evaluated)} of {_count(len(evaluated), 'condition')} passed{note}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def headline(outcome: Outcome) -> str:
    """``Gate: PASSED (3 of 3 conditions passed)``, ``Gate: ERROR - <why>``."""
    word, reason = verdict(outcome)
    return f"Gate: {word} - {reason}" if word == "ERROR" else f"Gate: {word} ({reason})"


def _experiment_line(experiment: dict) -> str:
    status = experiment.get("status", "?")
    items = experiment.get("item_count")
    done = experiment.get("completed_count")
    errors = experiment.get("error_count") or 0
    parts = [f"Experiment #{experiment.get('id')}"]
    if experiment.get("name"):
        parts.append(f'"{experiment["name"]}"')
    parts.append(status)
    text = " ".join(parts)
    details = []
    if items is not None:
        details.append(f"{done if done is not None else '?'}/{items} items")
    details.append(_count(errors, "error"))
    if experiment.get("total_cost") not in (None, ""):
        details.append(f"cost {fmt_money(experiment['total_cost'])}")
    return f"{text}: {', '.join(details)}"


def _summary_extras(experiment: dict) -> str:
    summary = experiment.get("summary") or {}
    parts = []
    if summary.get("pass_rate") is not None:
        parts.append(f"pass rate (all evaluators) {fmt_pct(summary['pass_rate'])}")
    if summary.get("error_rate") is not None:
        parts.append(f"error rate {fmt_pct(summary['error_rate'])}")
    latency = summary.get("latency_ms") or {}
    if latency.get("p50") is not None or latency.get("p95") is not None:
        parts.append(f"latency p50 {fmt_num(latency.get('p50'))} ms, p95 {fmt_num(latency.get('p95'))} ms")
    if summary.get("cost_per_item") not in (None, ""):
        parts.append(f"cost per item {fmt_money(summary['cost_per_item'])}")
    return "; ".join(parts)


def _baseline_text(gate: dict | None) -> str:
    baseline = (gate or {}).get("baseline")
    if not baseline:
        return ""
    text = f"#{baseline.get('id')}"
    if baseline.get("name"):
        text += f' "{baseline["name"]}"'
    if baseline.get("branch"):
        text += f" on {baseline['branch']}"
    return text


def _result_word(condition: dict) -> str:
    status = condition.get("status")
    return {PASSED: "PASS", FAILED: "FAIL", SKIPPED: "SKIPPED"}.get(status, "not evaluated")


def _actual_text(condition: dict) -> str:
    return fmt_signed(condition.get("actual")) if condition.get("relative") else fmt_num(condition.get("actual"))


# -- the summary on stdout ----------------------------------------------------------------------


def summary_text(outcome: Outcome, *, with_headline: bool = True) -> str:
    """The experiment, its metrics, the gate's conditions, the first failing items and
    (unless ``with_headline`` is False) the verdict, as plain text for a terminal or CI log."""
    experiment = outcome.experiment
    lines: list[str] = []
    if experiment:
        lines.append(_experiment_line(experiment))
        if experiment.get("url"):
            lines.append(str(experiment["url"]))
        if experiment.get("error") and one_line(experiment["error"], 300) not in outcome.message:
            lines.append(f"Error: {one_line(experiment['error'])}")
        rows = metric_rows(experiment)
        if rows:
            lines.append("")
            lines.append(table(["Metric", "Mean", "95% CI", "Pass rate", "n"], rows))
        extras = _summary_extras(experiment)
        if extras:
            lines.append(extras)
    conditions = gate_rows(outcome)
    if conditions:
        lines.append("")
        baseline = _baseline_text(outcome.gate)
        lines.append(f"Gate conditions (baseline {baseline}):" if baseline else "Gate conditions:")
        rows = []
        for condition in conditions:
            baseline_value = condition.get("baseline_value")
            rows.append(
                [
                    condition_text(condition),
                    _actual_text(condition),
                    f"{condition.get('comparator', '?')} {_threshold_text(condition)}",
                    fmt_num(baseline_value) if condition.get("relative") else "",
                    _result_word(condition),
                ]
            )
        lines.append(table(["Condition", "Actual", "Threshold", "Baseline", "Result"], rows))
    items = failing_items(outcome)
    if items:
        lines.append("")
        lines.append(f"{len(items)} item(s) errored or failed an evaluator; first ones:")
        for item in items[:10]:
            lines.append(f"  {item['key']}: {one_line(item['message'], 160)}")
    if with_headline:
        lines.append("")
        lines.append(headline(outcome))
    return "\n".join(lines).strip("\n")


# -- JUnit XML ----------------------------------------------------------------------------------

_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(value: Any) -> str:
    return _XML_ILLEGAL.sub("?", str(value))


def _suite(parent: ET.Element, name: str) -> ET.Element:
    return ET.SubElement(parent, "testsuite", {"name": name})


def _case(suite: ET.Element, classname: str, name: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", {"classname": classname, "name": _xml_text(name), "time": "0"})


def _finish_suite(suite: ET.Element) -> tuple[int, int, int]:
    cases = suite.findall("testcase")
    failures = sum(1 for c in cases if c.find("failure") is not None)
    errors = sum(1 for c in cases if c.find("error") is not None)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    return len(cases), failures, errors


def junit_xml(outcome: Outcome) -> bytes:
    """``<testsuites>`` with the suite "agentops-eval gate" (one testcase per gate condition,
    a ``<failure>`` for each failed one; an ``<error>`` testcase when the experiment failed,
    timed out or the API refused) and, with ``outcome.junit_items`` and any item that errored
    or failed an evaluator, the suite "agentops-eval items" with one testcase per such item
    (opt-in: those fail the report even when the gate passed)."""
    root = ET.Element("testsuites", {"name": "agentops-eval"})
    experiment = outcome.experiment or {}
    gate_suite = _suite(root, "agentops-eval gate")
    properties = ET.SubElement(gate_suite, "properties")
    for name, value in (
        ("experiment.id", experiment.get("id")),
        ("experiment.status", experiment.get("status")),
        ("experiment.url", experiment.get("url")),
        ("baseline", _baseline_text(outcome.gate)),
        ("agentops-eval.version", __version__),
    ):
        if value not in (None, ""):
            ET.SubElement(properties, "property", {"name": name, "value": _xml_text(value)})

    if outcome.status == ERROR:
        label = f"experiment #{experiment['id']}" if experiment.get("id") is not None else "agentops-eval"
        case = _case(gate_suite, "agentops-eval.gate", label)
        error = ET.SubElement(case, "error", {"message": _xml_text(one_line(outcome.message)), "type": "Error"})
        error.text = _xml_text(outcome.message)
    else:
        conditions = gate_rows(outcome)
        if not conditions:
            _case(gate_suite, "agentops-eval.gate", f"experiment #{experiment.get('id')} succeeded")
        for condition in conditions:
            case = _case(gate_suite, "agentops-eval.gate", condition_text(condition))
            if condition.get("status") == SKIPPED:
                ET.SubElement(case, "skipped", {"message": _xml_text(outcome.skip_reason or "skipped")})
            if condition.get("status") == FAILED:
                message = _condition_message(condition)
                failure = ET.SubElement(case, "failure", {"message": _xml_text(message), "type": "GateConditionFailed"})
                failure.text = _xml_text(message + (f"\n{experiment['url']}" if experiment.get("url") else ""))
    totals = [_finish_suite(gate_suite)]

    items = failing_items(outcome) if outcome.junit_items else []
    if items:
        item_suite = _suite(root, "agentops-eval items")
        for item in items[:MAX_JUNIT_ITEMS]:
            case = _case(item_suite, "agentops-eval.items", item["key"])
            tag = "error" if item["kind"] == "error" else "failure"
            element = ET.SubElement(case, tag, {"message": _xml_text(one_line(item["message"])), "type": tag})
            element.text = _xml_text(item["message"])
        left_out = len(items) - MAX_JUNIT_ITEMS
        if left_out > 0 or not outcome.results_complete:
            note = ET.SubElement(item_suite, "system-out")
            note.text = _xml_text(
                f"{max(left_out, 0)} more item(s) not listed"
                + ("" if outcome.results_complete else "; not every result was read")
                + (f"; see {experiment['url']}" if experiment.get("url") else "")
            )
        totals.append(_finish_suite(item_suite))

    root.set("tests", str(sum(t[0] for t in totals)))
    root.set("failures", str(sum(t[1] for t in totals)))
    root.set("errors", str(sum(t[2] for t in totals)))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _condition_message(condition: dict) -> str:
    comparator = condition.get("comparator", "?")
    threshold = _threshold_text(condition)
    if condition.get("relative"):
        return (
            f"{condition.get('metric')}: change vs baseline {_actual_text(condition)} "
            f"(baseline {fmt_num(condition.get('baseline_value'))}), required {comparator} {threshold}"
        )
    return f"{condition.get('metric')}: actual {_actual_text(condition)}, required {comparator} {threshold}"


# -- Markdown -----------------------------------------------------------------------------------


def _md(text: Any) -> str:
    """Text for a Markdown table cell."""
    return one_line(text).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return lines


def markdown(outcome: Outcome) -> str:
    """A pull-request comment: the gate's verdict, a link to the experiment, the metrics,
    the conditions, the comparison with the baseline and the failing items."""
    experiment = outcome.experiment or {}
    lines = [MARKDOWN_MARKER, "### AgentOps evaluation", ""]
    word, reason = verdict(outcome)
    lines.append(f"**Gate: {word}**" + (f" - {_md(reason)}" if reason else ""))
    lines.append("")

    if experiment:
        title = f"Experiment #{experiment.get('id')}"
        if experiment.get("name"):
            title += f": {_md(experiment['name'])}"
        link = f"[{title}]({experiment['url']})" if experiment.get("url") else title
        facts = [link, f"status `{experiment.get('status', '?')}`"]
        dataset = experiment.get("dataset") or {}
        if dataset.get("name"):
            version = experiment.get("dataset_version")
            facts.append(f"dataset `{_md(dataset['name'])}`" + (f" v{version}" if version is not None else ""))
        agent = experiment.get("agent") or {}
        if agent.get("name"):
            facts.append(
                f"agent `{_md(agent['name'])}`" + (f" v{_md(agent['version'])}" if agent.get("version") else "")
            )
        if experiment.get("branch"):
            facts.append(f"branch `{_md(experiment['branch'])}`")
        if experiment.get("commit"):
            facts.append(f"commit `{_md(str(experiment['commit'])[:12])}`")
        if experiment.get("item_count") is not None:
            errors = experiment.get("error_count") or 0
            done = experiment.get("completed_count", "?")
            facts.append(f"{done}/{experiment['item_count']} items, {_count(errors, 'error')}")
        if experiment.get("total_cost") not in (None, ""):
            facts.append(f"cost {_md(fmt_money(experiment['total_cost']))}")
        lines.append(" · ".join(facts))
        lines.append("")
        if experiment.get("error") and one_line(experiment["error"], 300) not in outcome.message:
            lines.append(f"> Experiment error: {_md(experiment['error'])}")
            lines.append("")

        rows = [[_md(cell) for cell in row] for row in metric_rows(experiment)]
        if rows:
            lines.extend(_md_table(["Metric", "Mean", "95% CI", "Pass rate", "n"], rows))
            lines.append("")
            extras = _summary_extras(experiment)
            if extras:
                lines.append(_md(extras.capitalize() if extras[:1].islower() else extras))
                lines.append("")

    conditions = gate_rows(outcome)
    absolute = [c for c in conditions if not c.get("relative")]
    relative = [c for c in conditions if c.get("relative")]
    if absolute:
        lines.append("#### Gate conditions")
        lines.append("")
        rows = [
            [
                f"`{_md(c.get('metric'))}`",
                _md(_actual_text(c)),
                _md(f"{c.get('comparator', '?')} {_plain(c.get('threshold'))}"),
                f"**{_result_word(c)}**" if c.get("status") == FAILED else _result_word(c),
            ]
            for c in absolute
        ]
        lines.extend(_md_table(["Metric", "Actual", "Threshold", "Result"], rows))
        lines.append("")
    if relative:
        baseline = _baseline_text(outcome.gate)
        lines.append(f"#### Compared with baseline {_md(baseline)}" if baseline else "#### Compared with baseline")
        lines.append("")
        rows = []
        for c in relative:
            base, delta = c.get("baseline_value"), c.get("actual")
            current = c.get("value")  # the server sends this run's own value beside the change
            if current is None and base is not None and delta is not None:
                try:
                    current = float(base) + float(delta)
                except (TypeError, ValueError):
                    current = None
            rows.append(
                [
                    f"`{_md(c.get('metric'))}`",
                    fmt_num(base),
                    fmt_num(current),
                    fmt_signed(delta),
                    _md(f"{c.get('comparator', '?')} {_plain(c.get('threshold'), signed=True)}"),
                    f"**{_result_word(c)}** (regression)" if c.get("status") == FAILED else _result_word(c),
                ]
            )
        lines.extend(_md_table(["Metric", "Baseline", "This run", "Change", "Allowed change", "Result"], rows))
        lines.append("")

    items = failing_items(outcome)
    if items:
        shown = items[:MAX_MARKDOWN_ITEMS]
        lines.append(f"<details><summary>{len(items)} item(s) errored or failed an evaluator</summary>")
        lines.append("")
        lines.extend(_md_table(["Item", "Problem"], [[f"`{_md(i['key'])}`", _md(i["message"])] for i in shown]))
        if len(items) > len(shown):
            lines.append("")
            lines.append(f"... and {len(items) - len(shown)} more.")
        lines.append("")
        lines.append("</details>")
        lines.append("")

    lines.append(f"<sub>agentops-eval {__version__}</sub>")
    return "\n".join(lines) + "\n"


# -- JSON ---------------------------------------------------------------------------------------


def json_report(outcome: Outcome) -> str:
    data = {
        "status": outcome.status,
        "exit_code": outcome.exit_code,
        "message": outcome.message,
        "experiment": outcome.experiment,
        "gate": outcome.gate,
        "conditions": outcome.conditions,
        "failing_items": failing_items(outcome),
        "waited_seconds": outcome.waited_seconds,
        "version": __version__,
    }
    return json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"
