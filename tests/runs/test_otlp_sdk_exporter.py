"""The real OpenTelemetry Python SDK exporting an agent run to a live server, read back
through the selectors and the REST API: tree, kinds, models, tokens and cost.

Protobuf goes through the SDK's own ``OTLPSpanExporter`` (OTLP/HTTP). That exporter only
speaks protobuf, so for OTLP/JSON the same spans are encoded by the SDK's encoder
(``encode_spans``), turned into JSON with ``google.protobuf.json_format`` and their ids
into hex as OTLP/JSON requires, and posted with ``requests``.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
import requests
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, format_trace_id

from agentops.scoping import organization_scope
from runs import selectors
from runs.models import Run
from tests.runs.test_otlp_endpoint import otlp_json

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "mistral-large-2512"  # 0.50 USD per million input tokens, 1.50 per million output
CHATS = [(12_000, 800), (15_500, 1_200)]  # (input, output) tokens of the two model calls


class RecordingExporter(SpanExporter):
    """The SDK's exporter, remembering what each export returned."""

    def __init__(self, exporter: SpanExporter):
        self.exporter = exporter
        self.results: list[SpanExportResult] = []

    def export(self, spans):
        result = self.exporter.export(spans)
        self.results.append(result)
        return result

    def shutdown(self):
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def run_agent(provider: TracerProvider) -> str:
    """A support agent answering one question: it calls the model, a tool, the model
    again. Returns the trace id."""
    tracer = provider.get_tracer("support-agent", "1.0.0")
    chat_attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "mistral_ai"}
    with tracer.start_as_current_span(
        "invoke_agent support",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "support",
            "gen_ai.conversation.id": "conversation-7",
        },
    ) as root:
        with tracer.start_as_current_span(
            f"chat {MODEL}",
            kind=SpanKind.CLIENT,
            attributes={
                **chat_attributes,
                "gen_ai.request.model": MODEL,
                "gen_ai.usage.input_tokens": CHATS[0][0],
                "gen_ai.usage.output_tokens": CHATS[0][1],
                "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "Order 42?"}]}]',
                "gen_ai.output.messages": (
                    '[{"role": "assistant", "finish_reason": "tool_calls", "parts": [{"type": "tool_call", '
                    '"id": "call_1", "name": "lookup_order", "arguments": {"order": 42}}]}]'
                ),
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool lookup_order",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup_order",
                "gen_ai.tool.call.id": "call_1",
                "gen_ai.tool.call.arguments": '{"order": 42}',
                "gen_ai.tool.call.result": '{"status": "shipped"}',
            },
        ):
            pass
        with tracer.start_as_current_span(
            f"chat {MODEL}",
            kind=SpanKind.CLIENT,
            attributes={
                **chat_attributes,
                "gen_ai.request.model": MODEL,
                "gen_ai.usage.input_tokens": CHATS[1][0],
                "gen_ai.usage.output_tokens": CHATS[1][1],
            },
        ):
            pass
    return format_trace_id(root.get_span_context().trace_id)


def export_with_the_sdk_exporter(url: str, key: str) -> str:
    exporter = RecordingExporter(OTLPSpanExporter(endpoint=url, headers={"Authorization": f"Bearer {key}"}))
    provider = TracerProvider(resource=Resource.create({"service.name": "support-service"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace_id = run_agent(provider)
    assert provider.force_flush(30_000)
    provider.shutdown()
    assert exporter.results and all(result is SpanExportResult.SUCCESS for result in exporter.results)
    return trace_id


def export_as_otlp_json(url: str, key: str) -> str:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "support-service"}))
    provider.add_span_processor(BatchSpanProcessor(memory))
    trace_id = run_agent(provider)
    provider.force_flush(30_000)
    body = otlp_json(encode_spans(memory.get_finished_spans()))
    response = requests.post(
        url, data=body, headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"}, timeout=30
    )
    assert (response.status_code, response.headers["Content-Type"], response.json()) == (200, "application/json", {})
    provider.shutdown()
    return trace_id


@pytest.mark.parametrize("export", [export_with_the_sdk_exporter, export_as_otlp_json], ids=["protobuf", "json"])
def test_a_run_sent_by_the_opentelemetry_sdk_reads_back_with_tree_kinds_models_tokens_and_cost(
    live_server, tenant, make_api_key, export
):
    _, ingest_key = make_api_key(tenant.project, ["ingest"])
    _, read_key = make_api_key(tenant.project, ["read"])

    trace_id = export(f"{live_server.url}/api/v1/otlp/v1/traces", ingest_key)

    input_tokens, output_tokens = sum(c[0] for c in CHATS), sum(c[1] for c in CHATS)
    expected_cost = (Decimal(input_tokens) * Decimal("0.50") + Decimal(output_tokens) * Decimal("1.50")) / 10**6
    assert expected_cost == Decimal("0.01675")

    # Through the selectors.
    with organization_scope(tenant.organization):
        run = selectors.run_list(project=tenant.project, filters=selectors.RunFilters(trace_id=trace_id)).get()
        (root,) = selectors.step_tree(run=run)
        transcript = selectors.transcript(run=run)
        (tool_call,) = selectors.tool_call_list(run=run)
        run = Run.objects.get(pk=run.pk)  # with the payloads the list defers
    assert (run.name, run.agent_name, run.session_id, run.status) == (
        "invoke_agent support",
        "support",
        "conversation-7",
        "succeeded",
    )
    assert (run.step_count, run.llm_call_count, run.input_tokens, run.output_tokens) == (
        4,
        2,
        input_tokens,
        output_tokens,
    )
    assert (run.total_cost, run.unpriced_step_count, run.models_used) == (expected_cost, 0, [MODEL])
    assert (root.step.kind, root.step.name) == ("agent", "invoke_agent support")
    assert [(child.step.kind, child.step.name, child.step.model) for child in root.children] == [
        ("llm", f"chat {MODEL}", MODEL),
        ("tool", "execute_tool lookup_order", ""),
        ("llm", f"chat {MODEL}", MODEL),
    ]
    assert [(c.step.input_tokens, c.step.output_tokens) for c in root.children if c.step.kind == "llm"] == CHATS
    assert [c.step.cost for c in root.children] == [Decimal("0.0072"), None, Decimal("0.00955")]
    # The tool's answer, sent only on its tool span, is the transcript's tool message.
    assert [(m.role, m.content) for m in transcript] == [
        ("user", "Order 42?"),
        ("assistant", None),
        ("tool", {"status": "shipped"}),
    ]
    assert (transcript[2].tool_call_id, transcript[2].name) == ("call_1", "lookup_order")
    assert transcript[1].tool_calls == [{"id": "call_1", "name": "lookup_order", "arguments": {"order": 42}}]
    assert (tool_call.tool_name, tool_call.arguments, tool_call.result) == (
        "lookup_order",
        {"order": 42},
        {"status": "shipped"},
    )

    # Through the REST API, as CI scripts read it.
    headers = {"Authorization": f"Bearer {read_key}"}
    base = f"{live_server.url}/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}"
    listed = requests.get(f"{base}/runs/", params={"trace_id": trace_id}, headers=headers, timeout=30)
    assert listed.status_code == 200
    (item,) = listed.json()["results"]
    assert (item["id"], item["status"], item["step_count"]) == (run.pk, "succeeded", 4)
    assert (item["input_tokens"], item["output_tokens"], item["total_cost"]) == (
        input_tokens,
        output_tokens,
        "0.016750000",
    )
    steps = requests.get(f"{base}/runs/{run.pk}/steps/", headers=headers, timeout=30).json()
    root_span = steps[0]["span_id"]
    assert [(s["kind"], s["parent_id"] == root_span, s["model"], s["cost"]) for s in steps] == [
        ("agent", False, "", None),
        ("llm", True, MODEL, "0.007200000"),
        ("tool", True, "", None),
        ("llm", True, MODEL, "0.009550000"),
    ]
