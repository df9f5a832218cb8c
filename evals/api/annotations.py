"""API of evaluations: annotation queues and the scores of a run.

Human scores need a person as their author, so posting them (and taking the next run
of a queue, which hands it to one reviewer) is for signed-in members only; API keys
may read queues and scores. Queues and runs are looked up in the URL's project, so
another tenant's id is a 404 like a missing one.
"""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from agentops import url_prefixes
from agentops.api.base import ProjectEndpoint
from agentops.api.serializers import InputSerializer
from agentops.errors import Forbidden, NotFound
from evals.models import AnnotationQueue, QueueEntry, Score
from evals.services import annotations
from runs import selectors as run_selectors
from runs.api.serializers import RunDetailSerializer

PERSON_NEEDED = (
    "human scores need a signed-in person as their author; API keys cannot {what} "
    "(report automated scores as an experiment's results instead)"
)


class QueueEvaluatorSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    config = serializers.JSONField()


class QueueSerializer(serializers.ModelSerializer):
    evaluators = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()
    created_by = serializers.SerializerMethodField()

    class Meta:
        model = AnnotationQueue
        fields = ["id", "name", "description", "evaluators", "progress", "created_by", "created_at"]

    def get_evaluators(self, queue) -> list[dict]:
        return QueueEvaluatorSerializer(queue.evaluators.order_by("name"), many=True).data

    def get_progress(self, queue) -> dict:
        return annotations.queue_progress(queue=queue)

    def get_created_by(self, queue) -> str | None:
        return queue.created_by.email if queue.created_by else None


class QueueCreateSerializer(InputSerializer):
    name = serializers.CharField(max_length=100)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    evaluators = serializers.ListField(
        child=serializers.CharField(max_length=64),
        help_text="The human evaluators people score with: their ids or names.",
    )


class QueueRunsSerializer(InputSerializer):
    run_ids = serializers.ListField(child=serializers.IntegerField(min_value=1), allow_empty=False)


class ScoreSerializer(serializers.ModelSerializer):
    author = serializers.SerializerMethodField(help_text="The email of the person who gave a human score.")
    evaluator_id = serializers.IntegerField(read_only=True, allow_null=True)
    run_id = serializers.IntegerField(read_only=True, allow_null=True)
    result_id = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta:
        model = Score
        fields = [
            "id",
            "run_id",
            "result_id",
            "name",
            "value",
            "passed",
            "source",
            "author",
            "evaluator_id",
            "reasoning",
            "details",
            "error",
            "created_at",
        ]
        read_only_fields = fields

    def get_author(self, score) -> str | None:
        return score.author.email if score.author_id and score.author else None


class ScoresSubmitSerializer(InputSerializer):
    scores = serializers.DictField(help_text="{evaluator name: value on its scale}")
    comment = serializers.CharField(required=False, allow_blank=True, default="")
    queue = serializers.IntegerField(
        required=False, help_text="The annotation queue the run was scored from: its entry is marked done."
    )


def _valid(serializer_class, data) -> dict:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _evaluator_ref(value: str):
    return int(value) if value.isdecimal() else value


class QueueEndpoint(ProjectEndpoint):
    queryset = AnnotationQueue.objects.all()

    def get_queue(self, queue_id: int) -> AnnotationQueue:
        queue = self.get_queryset().filter(pk=queue_id).select_related("created_by").first()
        if queue is None:
            raise NotFound("annotation queue not found")
        return queue

    def require_person(self, what: str) -> None:
        if self.access.api_key is not None:
            raise Forbidden(PERSON_NEEDED.format(what=what))


class QueueListView(QueueEndpoint):
    """The project's annotation queues with their progress; members create one."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    serializer_class = QueueSerializer
    pagination_class = None

    def get(self, request, org_slug, project_slug):
        queues = self.get_queryset().select_related("created_by").order_by("name")
        return Response(QueueSerializer(queues, many=True).data)

    @extend_schema(request=QueueCreateSerializer, responses={201: QueueSerializer})
    def post(self, request, org_slug, project_slug):
        data = _valid(QueueCreateSerializer, request.data)
        queue = annotations.queue_create(
            project=self.project,
            actor=self.access.actor,
            name=data["name"],
            description=data["description"],
            evaluator_ids=[_evaluator_ref(value) for value in data["evaluators"]],
            ip=self.client_ip,
        )
        return Response(QueueSerializer(queue).data, status=status.HTTP_201_CREATED)


class QueueDetailView(QueueEndpoint):
    """One annotation queue and its progress (done, skipped, pending, total)."""

    permissions = {"GET": "work:read"}
    serializer_class = QueueSerializer

    def get(self, request, org_slug, project_slug, queue_id):
        return Response(QueueSerializer(self.get_queue(queue_id)).data)


class QueueRunsView(QueueEndpoint):
    """Add runs of the project to a queue; runs already in it are left as they are."""

    permissions = {"POST": "work:write"}
    serializer_class = QueueRunsSerializer

    @extend_schema(request=QueueRunsSerializer, responses={200: dict})
    def post(self, request, org_slug, project_slug, queue_id):
        queue = self.get_queue(queue_id)
        data = _valid(QueueRunsSerializer, request.data)
        added = annotations.queue_add_runs(
            queue=queue, actor=self.access.actor, run_ids=data["run_ids"], ip=self.client_ip
        )
        return Response({"added": added, "queue": QueueSerializer(queue).data})


class QueueNextView(QueueEndpoint):
    """The next run for you to score in the queue (held for you for a few minutes, so
    other reviewers get other runs); `entry` is null when none is left."""

    permissions = {"GET": "work:write"}

    @extend_schema(responses={200: dict})
    def get(self, request, org_slug, project_slug, queue_id):
        self.require_person("take runs to score")
        queue = self.get_queue(queue_id)
        entry = annotations.next_entry(queue=queue, user=request.user)
        body = {"entry": None, "progress": annotations.queue_progress(queue=queue)}
        if entry is not None:
            body["entry"] = {
                "id": entry.pk,
                "status": entry.status,
                "created_at": entry.created_at,
                "run": RunDetailSerializer(entry.run).data,
                "scores": ScoreSerializer(
                    annotations.run_scores(run=entry.run).filter(author=request.user), many=True
                ).data,
            }
        return Response(body)


class RunScoresView(ProjectEndpoint):
    """All scores of a run, whatever their source (human ones with their author's
    email); POST gives your own human scores (a second time replaces yours)."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    serializer_class = ScoreSerializer
    queryset = Score.objects.all()
    pagination_class = None

    def get(self, request, org_slug, project_slug, run_id):
        run = run_selectors.run_detail(project=self.project, run_id=run_id)
        return Response(ScoreSerializer(annotations.run_scores(run=run), many=True).data)

    @extend_schema(request=ScoresSubmitSerializer, responses={201: ScoreSerializer(many=True)})
    def post(self, request, org_slug, project_slug, run_id):
        if self.access.api_key is not None:
            raise Forbidden(PERSON_NEEDED.format(what="post them"))
        run = run_selectors.run_detail(project=self.project, run_id=run_id)
        data = _valid(ScoresSubmitSerializer, request.data)
        entry = None
        if data.get("queue") is not None:
            entry = (
                QueueEntry.objects.filter(project=self.project, queue_id=data["queue"], run=run)
                .select_related("run", "queue")
                .first()
            )
            if entry is None:
                raise NotFound("this run is not in that annotation queue")
        saved = annotations.submit_scores(
            author=request.user,
            run=run,
            entry=entry,
            scores=data["scores"],
            comment=data["comment"],
            ip=self.client_ip,
        )
        scores = annotations.run_scores(run=run).filter(pk__in=[score.pk for score in saved])
        return Response(ScoreSerializer(scores, many=True).data, status=status.HTTP_201_CREATED)


project = url_prefixes.API_PROJECT
queue = f"{project}/annotation-queues/<int:queue_id>"

urlpatterns = [
    path(f"{project}/annotation-queues/", QueueListView.as_view(), name="api-annotation-queue-list"),
    path(f"{queue}/", QueueDetailView.as_view(), name="api-annotation-queue-detail"),
    path(f"{queue}/runs/", QueueRunsView.as_view(), name="api-annotation-queue-runs"),
    path(f"{queue}/next/", QueueNextView.as_view(), name="api-annotation-queue-next"),
    path(f"{project}/runs/<int:run_id>/scores/", RunScoresView.as_view(), name="api-run-scores"),
]
