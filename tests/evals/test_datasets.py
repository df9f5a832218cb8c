"""Datasets: versions that keep their items, replacing by key, imports from CSV and JSON
Lines (every refusal names its line), items from runs, and concurrent changes."""

from __future__ import annotations

import itertools
import json
import threading

import pytest
from django.db import connection

from agentops.errors import Conflict, InvalidRequest, NotFound
from agentops.models import AuditEvent
from agentops.scoping import organization_scope
from evals.models import Dataset, DatasetItem, DatasetVersion
from evals.services import datasets as services
from evals.services.datasets import (
    dataset_create,
    dataset_update,
    item_from_run,
    items_add,
    items_import,
    items_remove,
    version_items,
)
from runs.models import Run

_trace = itertools.count(1)


@pytest.fixture
def scoped(tenant):
    with organization_scope(tenant.organization):
        yield tenant


@pytest.fixture
def dataset(scoped):
    return dataset_create(project=scoped.project, actor=scoped.member, name="support questions")


def make_run(project, **fields) -> Run:
    defaults = {
        "trace_id": f"trace-{next(_trace)}",
        "name": "support: where is my order",
        "agent_name": "support-bot",
        "agent_version": "1.4.0",
        "status": Run.Status.SUCCEEDED,
        "input": "Where is my order #1042?",
        "output": {"answer": "It ships on Friday.", "confidence": 0.9},
        "models_used": ["mistral-large-2512"],
    }
    return Run.dangerously_unscoped_objects.create(
        organization=project.organization, project=project, **{**defaults, **fields}
    )


def items_of(version: DatasetVersion) -> dict[str, object]:
    return {item.key: item.input for item in version_items(version)}


def refusal(call) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        call()
    return caught.value


# --- Datasets ----------------------------------------------------------------------------


def test_dataset_names_are_unique_per_project(scoped, dataset):
    with pytest.raises(Conflict, match="a dataset named 'support questions' already exists"):
        dataset_create(project=scoped.project, actor=scoped.member, name="  support questions ")
    assert "only digits" in refusal(lambda: dataset_create(project=scoped.project, actor=None, name="42")).message
    assert "needs a name" in refusal(lambda: dataset_create(project=scoped.project, actor=None, name=" ")).message


def test_same_name_in_another_project_is_fine(scoped, dataset, other_tenant):
    with organization_scope(other_tenant.organization):
        other = dataset_create(project=other_tenant.project, actor=None, name="support questions")
    assert other.pk != dataset.pk


def test_a_new_dataset_has_no_version_until_its_first_items(dataset):
    assert dataset.latest_version == 0 and not DatasetVersion.objects.filter(dataset=dataset).exists()


def test_update_renames_without_a_new_version(scoped, dataset):
    dataset_create(project=scoped.project, actor=None, name="taken")
    updated = dataset_update(dataset=dataset, actor=scoped.member, name="billing questions", description="From CS")
    assert (updated.name, updated.description, updated.latest_version) == ("billing questions", "From CS", 0)
    with pytest.raises(Conflict):
        dataset_update(dataset=updated, actor=scoped.member, name="taken")


# --- Versions ----------------------------------------------------------------------------


def test_version_keeps_its_items_after_later_replacements_and_removals(scoped, dataset):
    first = items_add(
        dataset=dataset,
        actor=scoped.member,
        items=[{"key": "a", "input": "A?", "expected": "A!"}, {"key": "b", "input": "B?"}, {"key": "c", "input": "C?"}],
    )
    second = items_add(dataset=dataset, actor=scoped.member, items=[{"key": "a", "input": "A, reworded?"}])
    third = items_remove(dataset=dataset, actor=scoped.member, keys=["b"])

    assert [first.number, second.number, third.number] == [1, 2, 3]
    assert [first.item_count, second.item_count, third.item_count] == [3, 3, 2]
    assert items_of(first) == {"a": "A?", "b": "B?", "c": "C?"}
    assert items_of(second) == {"a": "A, reworded?", "b": "B?", "c": "C?"}
    assert items_of(third) == {"a": "A, reworded?", "c": "C?"}
    # Version 1's item a is the very row it had: never edited, only retired.
    old_a = DatasetItem.objects.get(dataset=dataset, key="a", added_in=1)
    assert (old_a.removed_in, old_a.expected) == (2, "A!")
    assert [v.note for v in DatasetVersion.objects.filter(dataset=dataset).order_by("number")] == [
        "added 3 items",
        "added 1 item (1 replaced)",
        "removed 1 item: b",
    ]
    dataset.refresh_from_db()
    assert dataset.latest_version == 3


def test_missing_keys_are_generated_and_stay_with_the_item(scoped, dataset):
    items_add(dataset=dataset, actor=scoped.member, items=[{"input": "one"}, {"input": "two"}])
    keys = list(DatasetItem.objects.filter(dataset=dataset).values_list("key", flat=True))
    assert len(set(keys)) == 2 and all(len(key) == services.GENERATED_KEY_LENGTH for key in keys)
    items_add(dataset=dataset, actor=scoped.member, items=[{"input": "three"}])
    latest = DatasetVersion.objects.get(dataset=dataset, number=2)
    assert set(keys) < set(items_of(latest))


def test_items_take_any_json_input_expected_and_metadata(scoped, dataset):
    version = items_add(
        dataset=dataset,
        actor=scoped.member,
        items=[
            {"key": 7, "input": {"messages": [{"role": "user", "content": "hi"}]}, "expected": 3, "metadata": {"t": 1}}
        ],
        note="seed",
    )
    item = version_items(version).get()
    assert (item.key, item.input["messages"][0]["content"], item.expected, item.metadata) == ("7", "hi", 3, {"t": 1})
    assert version.note == "seed"


def test_duplicate_keys_in_one_call_are_refused_naming_them(scoped, dataset):
    error = refusal(
        lambda: items_add(
            dataset=dataset, actor=scoped.member, items=[{"key": "x", "input": 1}, {"key": "x", "input": 2}]
        )
    )
    assert "key 'x' appears more than once (item 0, item 1)" in error.message
    assert not DatasetVersion.objects.filter(dataset=dataset).exists()


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        ({"expected": "no input"}, "item 0: input is required"),
        ({"input": None}, "item 0: input is required"),
        ({"input": "x", "metadata": ["not", "an object"]}, "item 0: metadata must be a JSON object"),
        ({"input": "x", "expect": "typo"}, "item 0: unknown field 'expect'"),
        ({"input": "x", "key": "k" * 201}, "item 0: key is longer than 200 characters"),
        ({"input": "x", "key": ["a"]}, "item 0: key must be text"),
        ({"input": "nul \x00 here"}, "item 0: input: contains a NUL character"),
        ({"input": float("nan")}, "item 0: input: NaN and Infinity are not valid JSON numbers"),
        ("just text", "item 0: an item is a JSON object"),
    ],
)
def test_bad_items_are_refused_saying_what_is_wrong(scoped, dataset, item, problem):
    error = refusal(lambda: items_add(dataset=dataset, actor=scoped.member, items=[item]))
    assert problem in error.message
    assert error.details["problems"][0].startswith(problem.split(":")[0])


def test_removing_unknown_keys_is_refused_naming_them(scoped, dataset):
    items_add(dataset=dataset, actor=scoped.member, items=[{"key": "a", "input": 1}])
    error = refusal(lambda: items_remove(dataset=dataset, actor=scoped.member, keys=["a", "ghost", "phantom"]))
    assert "'ghost', 'phantom'" in error.message and error.details == {"unknown_keys": ["ghost", "phantom"]}
    dataset.refresh_from_db()
    assert dataset.latest_version == 1 and DatasetItem.objects.get(key="a").removed_in is None
    assert "list" in refusal(lambda: items_remove(dataset=dataset, actor=None, keys=[])).message


def test_a_removed_key_can_come_back(scoped, dataset):
    items_add(dataset=dataset, actor=scoped.member, items=[{"key": "a", "input": "first"}])
    items_remove(dataset=dataset, actor=scoped.member, keys=["a"])
    back = items_add(dataset=dataset, actor=scoped.member, items=[{"key": "a", "input": "again"}])
    assert back.note == "added 1 item" and items_of(back) == {"a": "again"}


def test_every_change_is_audited(scoped, dataset):
    items_add(dataset=dataset, actor=scoped.member, items=[{"key": "a", "input": 1}], ip="10.0.0.1")
    items_remove(dataset=dataset, actor=scoped.member, keys=["a"])
    actions = list(AuditEvent.objects.filter(target_type="Dataset").order_by("id").values_list("action", "data"))
    assert [action for action, _ in actions] == ["dataset.create", "dataset.items_add", "dataset.items_remove"]
    assert actions[1][1]["version"] == 1 and actions[1][1]["added"] == 1


def test_too_many_items_at_once_is_refused(scoped, dataset, monkeypatch):
    monkeypatch.setattr(services, "MAX_ITEMS_PER_CHANGE", 3)
    error = refusal(lambda: items_add(dataset=dataset, actor=None, items=[{"input": n} for n in range(4)]))
    assert error.status == 413 and "the limit is 3 per change" in error.message


# --- CSV ---------------------------------------------------------------------------------


def import_file(dataset, actor, filename: str, text: str | bytes) -> DatasetVersion:
    content = text.encode() if isinstance(text, str) else text
    return items_import(dataset=dataset, actor=actor, filename=filename, content=content)


def test_csv_import_reads_every_column_kind(scoped, dataset):
    csv_text = (
        "\ufeffid,input,expected,metadata,topic,difficulty\r\n"
        'q1,Where is my order?,It ships Friday.,"{""source"": ""tickets""}",shipping,\r\n'
        ",,,,,\r\n"
        'q2,"A question\nover two lines","{""answer"": 4}",,math,"[1, 2]"\r\n'
        "q3,42,,,,hard\r\n"
    )
    version = import_file(dataset, scoped.member, "questions.csv", csv_text)

    assert (version.number, version.item_count, version.note) == (1, 3, "imported questions.csv (3 items)")
    items = {item.key: item for item in version_items(version)}
    assert items["q1"].input == "Where is my order?" and items["q1"].expected == "It ships Friday."
    assert items["q1"].metadata == {"source": "tickets", "topic": "shipping"}
    assert items["q2"].input == "A question\nover two lines" and items["q2"].expected == {"answer": 4}
    assert items["q2"].metadata == {"topic": "math", "difficulty": [1, 2]}
    # CSV has no types: a number stays text; an empty expected cell is no expected output.
    assert items["q3"].input == "42" and items["q3"].expected is None and items["q3"].metadata == {"difficulty": "hard"}


def test_csv_without_key_column_gets_generated_keys(scoped, dataset):
    version = import_file(dataset, scoped.member, "plain.CSV", "input\nfirst\nsecond\n")
    assert version.item_count == 2 and set(items_of(version).values()) == {"first", "second"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "question,expected\nhi,there\n",
            "line 1: the header has no input column (its columns: 'question', 'expected')",
        ),
        ("input,key,id\nhi,a,b\n", "line 1: the header names the column key and id (keep one) twice"),
        ('input,metadata\nhi,{"a": 1}\nho,{not json}\n', "line 3: metadata is not valid JSON"),
        ("input,metadata\nhi,[1]\n", "line 2: metadata must be a JSON object"),
        ("input,expected\nhi,there\n,lonely\n", "line 3: input is empty"),
        ("input,expected\nhi,there,extra\n", "line 2: 3 cells, but the header has 2 columns"),
        ("input,key\nhi,a\nho,b\nhey,a\n", "key 'a' appears more than once (line 2, line 4)"),
        ("", "the file is empty"),
        ("input,expected\n", "has no items"),
    ],
)
def test_csv_problems_are_named_by_line_and_nothing_is_imported(scoped, dataset, text, problem):
    error = refusal(lambda: import_file(dataset, scoped.member, "items.csv", text))
    assert problem in error.message
    assert not DatasetItem.objects.filter(dataset=dataset).exists()
    assert not DatasetVersion.objects.filter(dataset=dataset).exists()


def test_all_problems_of_a_file_are_listed_at_once(scoped, dataset):
    text = "input,metadata\n,{}\nok,{bad\n,{}\n"
    error = refusal(lambda: import_file(dataset, scoped.member, "items.csv", text))
    assert error.message.startswith("items.csv was not imported: line 2: input is empty (and 2 more problems)")
    assert error.details["problems"] == [
        "line 2: input is empty",
        "line 3: metadata is not valid JSON "
        "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
        "line 4: input is empty",
    ]


def test_files_that_are_not_utf8_too_big_or_of_unknown_kind_are_refused(scoped, dataset, monkeypatch):
    error = refusal(lambda: import_file(dataset, scoped.member, "items.csv", "input\nok\ncaf\xe9\n".encode("latin-1")))
    assert "line 3: the file is not UTF-8 text" in error.message
    assert "name it .csv for CSV, or .jsonl" in refusal(lambda: import_file(dataset, None, "items.xlsx", "x")).message
    monkeypatch.setattr(services, "MAX_IMPORT_BYTES", 1024 * 1024)
    error = refusal(lambda: import_file(dataset, None, "big.csv", "input\n" + "x" * (1024 * 1024)))
    assert error.status == 413 and "the limit is 1 MB" in error.message


# --- JSON Lines --------------------------------------------------------------------------


def test_jsonl_import_reads_objects_and_skips_blank_lines(scoped, dataset):
    lines = [
        json.dumps({"key": "a", "input": {"question": "2+2"}, "expected": 4, "metadata": {"set": "math"}}),
        "",
        "   ",
        json.dumps({"id": "b", "input": "hi", "tags": ["greeting"]}),
        json.dumps({"input": "line\u2028separator"}),
    ]
    version = import_file(dataset, scoped.member, "items.jsonl", ("\ufeff" + "\n".join(lines) + "\n").encode())

    items = {item.key: item for item in version_items(version)}
    assert version.item_count == 3
    assert (
        items["a"].input == {"question": "2+2"} and items["a"].expected == 4 and items["a"].metadata == {"set": "math"}
    )
    # `id` is another name for key; fields other than the four go into metadata.
    assert items["b"].metadata == {"tags": ["greeting"]}
    assert any(item.input == "line\u2028separator" for item in items.values())


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        (['{"input": "ok"}', '{"input": "broken"', '{"input": "ok too"}'], "line 2: not valid JSON (Expecting"),
        (['{"input": "ok"}', "[1, 2]"], "line 2: each line must be a JSON object, not list"),
        (['{"input": "ok"}', "", '{"expected": "no input"}'], "line 3: input is required"),
        (['{"input": "x", "metadata": "text"}'], "line 1: metadata must be a JSON object"),
        (['{"input": "x", "key": "a", "id": "b"}'], "line 1: both key and id are given"),
        (['{"input": NaN}'], "line 1: input: NaN and Infinity are not valid JSON numbers"),
        (['{"key": "a", "input": 1}', '{"key": "a", "input": 2}'], "key 'a' appears more than once (line 1, line 2)"),
        (["", "  "], "the file is empty"),
    ],
)
def test_jsonl_problems_are_named_by_line_and_nothing_is_imported(scoped, dataset, lines, problem):
    error = refusal(lambda: import_file(dataset, scoped.member, "items.jsonl", "\n".join(lines)))
    assert problem in error.message
    assert not DatasetItem.objects.filter(dataset=dataset).exists()


def test_import_replaces_items_by_key(scoped, dataset):
    import_file(dataset, scoped.member, "v1.jsonl", '{"key": "a", "input": 1}\n{"key": "b", "input": 2}\n')
    version = import_file(dataset, scoped.member, "v2.jsonl", '{"key": "b", "input": 20}\n{"key": "c", "input": 3}\n')
    assert version.note == "imported v2.jsonl (2 items) (1 replaced)"
    assert items_of(version) == {"a": 1, "b": 20, "c": 3} and version.item_count == 3


def test_ten_thousand_items_import_in_one_version(scoped, dataset):
    text = "\n".join(json.dumps({"key": f"k{n}", "input": f"question {n}", "expected": n}) for n in range(10_000))
    version = import_file(dataset, scoped.member, "big.jsonl", text)
    assert version.item_count == 10_000 and version_items(version).count() == 10_000


# --- Items from runs ---------------------------------------------------------------------


def test_item_from_run_takes_input_output_and_origin(scoped, dataset):
    run = make_run(scoped.project)
    version = item_from_run(dataset=dataset, actor=scoped.member, run=run)
    item = version_items(version).get()
    assert item.key == f"run-{run.pk}" and item.source_run_id == run.pk
    assert item.input == "Where is my order #1042?" and item.expected == run.output
    assert item.metadata == {
        "run_id": run.pk,
        "trace_id": run.trace_id,
        "agent": "support-bot",
        "agent_version": "1.4.0",
        "status": "succeeded",
        "models": ["mistral-large-2512"],
    }
    assert version.note == f"added run {run.pk} (support: where is my order)"


def test_item_from_run_with_expected_given_and_added_again_replaces(scoped, dataset):
    run = make_run(scoped.project)
    item_from_run(dataset=dataset, actor=scoped.member, run=run, expected="Friday")
    again = item_from_run(dataset=dataset, actor=scoped.member, run=run, expected=None)
    assert again.item_count == 1 and version_items(again).get().expected is None
    assert version_items(DatasetVersion.objects.get(dataset=dataset, number=1)).get().expected == "Friday"


def test_item_from_run_refuses_another_projects_run_and_a_run_without_input(scoped, dataset, other_tenant):
    foreign = make_run(other_tenant.project)
    with pytest.raises(NotFound):
        item_from_run(dataset=dataset, actor=scoped.member, run=foreign)
    empty = make_run(scoped.project, input=None)
    assert "no input" in refusal(lambda: item_from_run(dataset=dataset, actor=scoped.member, run=empty)).message
    assert not DatasetItem.objects.filter(dataset=dataset).exists()


# --- Concurrency -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_imports_get_distinct_versions(tenant):
    with organization_scope(tenant.organization):
        dataset = dataset_create(project=tenant.project, actor=None, name="concurrent")
    barrier = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def run_import(name: str) -> None:
        try:
            text = "\n".join(json.dumps({"key": f"{name}-{n}", "input": n}) for n in range(2_000))
            with organization_scope(tenant.organization):
                barrier.wait(timeout=10)
                outcomes[name] = items_import(
                    dataset=dataset, actor=None, filename=f"{name}.jsonl", content=text.encode()
                )
        except Exception as exc:  # reported by the assertion below
            outcomes[name] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run_import, args=(name,)) for name in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    versions = sorted(outcomes.values(), key=lambda version: version.number)
    assert all(isinstance(version, DatasetVersion) for version in versions), outcomes
    assert [(version.number, version.item_count) for version in versions] == [(1, 2_000), (2, 4_000)]
    with organization_scope(tenant.organization):
        assert Dataset.objects.get(pk=dataset.pk).latest_version == 2
        assert DatasetItem.objects.filter(dataset=dataset).count() == 4_000
