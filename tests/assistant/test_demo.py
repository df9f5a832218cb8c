"""The analyst in `make run`'s demo: answers waiting on the failed run and the leaderboard."""

from __future__ import annotations

from django.core.management import call_command

from agentops.scoping import organization_scope
from assistant.analyst.offline import LABEL
from assistant.models import AnalystQuestion


def test_the_demo_has_an_answered_question_and_leaderboard_insights_once(tenant):
    with organization_scope(tenant.organization):
        for command in ("seed_demo_runs", "seed_demo_evals", "seed_demo_analyst", "seed_demo_analyst"):
            call_command(command, "acme/agent", verbosity=0)
        questions = list(AnalystQuestion.objects.select_related("answer_run", "subject_run").order_by("id"))

    assert [question.subject for question in questions] == ["run", "leaderboard"]
    about_run, insights = questions
    assert about_run.subject_run.status == "failed" and about_run.asked_by == tenant.owner
    for question in questions:
        assert question.answer_run.status == "succeeded" and question.answer_run.output.startswith(LABEL)
    assert "Failed steps: [step:" in about_run.answer_run.output
    assert "Top performers:" in insights.answer_run.output
    assert "Cost and quality:" in insights.answer_run.output
    assert "Latest change" in insights.answer_run.output


def test_the_demo_commands_print_nothing_at_verbosity_0(tenant, capsys, django_capture_on_commit_callbacks):
    """`serve --demo` calls them with verbosity 0: its output starts with the demo's
    credentials, as the README shows, and a second start adds no lines either."""
    commands = ("seed_demo_runs", "seed_demo_evals", "seed_demo_jobs", "seed_demo_analyst")
    with django_capture_on_commit_callbacks(execute=False):
        for _start in range(2):
            for command in commands:
                call_command(command, "acme/agent", verbosity=0)
            assert capsys.readouterr().out == ""
    with organization_scope(tenant.organization):
        assert AnalystQuestion.objects.count() == 2  # they did their work all the same
