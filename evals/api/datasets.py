"""API of evaluations: datasets, their versions and items (docs/evaluations.md#datasets).

Every write goes through ``evals.services.datasets`` and answers the new version.
Datasets are looked up in the URL's project, so another tenant's is a 404 like a
missing one; so is another tenant's run given to ``items/from-run/``.
"""

from __future__ import annotations

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response

from agentops import url_prefixes
from agentops.api.base import ProjectEndpoint
from agentops.api.serializers import InputSerializer, refuse_unknown_fields
from agentops.errors import InvalidRequest, NotFound
from evals.models import Dataset, DatasetItem, DatasetVersion
from evals.services import datasets as services
from runs.models import Run


class DatasetSerializer(serializers.ModelSerializer):
    item_count = serializers.IntegerField(read_only=True, help_text="Items of the latest version.")

    class Meta:
        model = Dataset
        fields = ["id", "name", "description", "latest_version", "item_count", "created_at", "updated_at"]


class DatasetWriteSerializer(InputSerializer):
    name = serializers.CharField(max_length=services.MAX_NAME_LENGTH, required=False)
    description = serializers.CharField(required=False, allow_blank=True)


class DatasetCreateSerializer(DatasetWriteSerializer):
    name = serializers.CharField(max_length=services.MAX_NAME_LENGTH)


class VersionSerializer(serializers.ModelSerializer):
    created_by = serializers.SerializerMethodField()

    class Meta:
        model = DatasetVersion
        fields = ["dataset", "number", "item_count", "note", "created_by", "created_at"]

    def get_created_by(self, version) -> str | None:
        return version.created_by.email if version.created_by_id else None


class ItemSerializer(serializers.ModelSerializer):
    class Meta:
        model = DatasetItem
        fields = ["id", "key", "input", "expected", "metadata", "source_run", "added_in", "removed_in", "created_at"]


class ItemInputSerializer(InputSerializer):
    """The schema of one item to add (the service checks them, naming the item's index)."""

    key = serializers.CharField(required=False, help_text="Stable id across versions; generated when missing.")
    input = serializers.JSONField()
    expected = serializers.JSONField(required=False, allow_null=True)
    metadata = serializers.DictField(required=False)


class ItemsAddSerializer(InputSerializer):
    items = ItemInputSerializer(many=True)
    note = serializers.CharField(required=False, allow_blank=True)


class ItemsRemoveSerializer(InputSerializer):
    keys = serializers.ListField(child=serializers.CharField(max_length=services.MAX_KEY_LENGTH), allow_empty=False)


class FromRunSerializer(InputSerializer):
    run_id = serializers.IntegerField()
    expected = serializers.JSONField(
        required=False, allow_null=True, help_text="The expected output; the run's output when left out."
    )


def _valid(serializer_class, data) -> dict:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class VersionPagination(CursorPagination):
    ordering = ("-number",)
    page_size_query_param = "page_size"
    max_page_size = 500


class ItemPagination(CursorPagination):
    """In the order items were added: the order experiments go through them."""

    ordering = ("id",)
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


class DatasetEndpoint(ProjectEndpoint):
    queryset = Dataset.objects.all()

    def dataset(self) -> Dataset:
        return services.dataset_detail(project=self.project, dataset_id=self.kwargs["dataset_id"])

    def version_response(self, version: DatasetVersion, *, status_code=status.HTTP_201_CREATED) -> Response:
        return Response(VersionSerializer(version).data, status=status_code)


class DatasetListView(DatasetEndpoint):
    """The project's datasets by name, each with its latest version and item count;
    POST creates an empty one (its first items make version 1)."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    serializer_class = DatasetSerializer
    pagination_class = None

    def get(self, request, org_slug, project_slug):
        return Response(DatasetSerializer(services.dataset_list(project=self.project), many=True).data)

    @extend_schema(request=DatasetCreateSerializer, responses={201: DatasetSerializer})
    def post(self, request, org_slug, project_slug):
        data = _valid(DatasetCreateSerializer, request.data)
        dataset = services.dataset_create(project=self.project, actor=self.access.actor, ip=self.client_ip, **data)
        return Response(
            DatasetSerializer(services.dataset_detail(project=self.project, dataset_id=dataset.pk)).data,
            status=status.HTTP_201_CREATED,
        )


class DatasetDetailView(DatasetEndpoint):
    """One dataset; PATCH renames it or changes its description (items are unchanged)."""

    permissions = {"GET": "work:read", "PATCH": "work:write"}
    serializer_class = DatasetSerializer

    def get(self, request, org_slug, project_slug, dataset_id):
        return Response(DatasetSerializer(self.dataset()).data)

    @extend_schema(request=DatasetWriteSerializer, responses={200: DatasetSerializer})
    def patch(self, request, org_slug, project_slug, dataset_id):
        data = _valid(DatasetWriteSerializer, request.data)
        dataset = self.dataset()
        services.dataset_update(dataset=dataset, actor=self.access.actor, ip=self.client_ip, **data)
        return Response(DatasetSerializer(self.dataset()).data)


class DatasetVersionListView(DatasetEndpoint):
    """The dataset's versions, newest first: number, item count and what changed."""

    permissions = {"GET": "work:read"}
    serializer_class = VersionSerializer
    pagination_class = VersionPagination

    def get(self, request, org_slug, project_slug, dataset_id):
        versions = DatasetVersion.objects.filter(dataset=self.dataset()).select_related("created_by")
        page = self.paginate_queryset(versions)
        return self.get_paginated_response(VersionSerializer(page, many=True).data)


def _version_number(value: str | None) -> int | None:
    if value in (None, ""):
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise InvalidRequest("version must be a version number (1, 2, ...)")
    return number


class DatasetItemListView(DatasetEndpoint):
    """GET: the items of a version (`?version=N`, the latest by default), in the order
    they were added, cursor-paginated; the body also says which `version` it lists.

    POST: add items as a new version, answered with it (201). Either a JSON list of
    items `{key?, input, expected?, metadata?}` (or `{"items": [...], "note": "..."}`),
    where an item whose key is already in the dataset replaces it; or a multipart upload
    of a CSV or JSON Lines file in the field `file`, imported all or nothing."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    serializer_class = ItemSerializer
    pagination_class = ItemPagination

    @extend_schema(
        parameters=[
            OpenApiParameter("version", OpenApiTypes.INT, description="A version number; the latest by default.")
        ]
    )
    def get(self, request, org_slug, project_slug, dataset_id):
        dataset = self.dataset()
        version = services.version_get(dataset=dataset, number=_version_number(request.query_params.get("version")))
        items = services.version_items(version) if version else DatasetItem.objects.none()
        page = self.paginate_queryset(items)
        response = self.get_paginated_response(ItemSerializer(page, many=True).data)
        response.data["version"] = version.number if version else None
        return response

    @extend_schema(request=ItemsAddSerializer, responses={201: VersionSerializer})
    def post(self, request, org_slug, project_slug, dataset_id):
        dataset = self.dataset()
        upload = request.FILES.get("file")
        if upload is not None:
            if upload.size > services.MAX_IMPORT_BYTES:
                # Refused before reading it into memory.
                raise services.TooLarge(
                    f"the file is {upload.size / 1024 / 1024:.1f} MB; "
                    f"the limit is {services.MAX_IMPORT_BYTES // 1024 // 1024} MB"
                )
            version = services.items_import(
                dataset=dataset,
                actor=self.access.actor,
                filename=upload.name or "upload",
                content=upload.read(),
                ip=self.client_ip,
            )
            return self.version_response(version)
        body = request.data
        note = ""
        refuse_unknown_fields(body, ["items", "note"])
        if isinstance(body, dict) and "items" in body:
            items, note = body["items"], body.get("note") or ""
            if not isinstance(note, str):
                raise InvalidRequest("note must be text")
        elif isinstance(body, list):
            items = body
        else:
            raise InvalidRequest(
                'send a JSON list of items, {"items": [...]}, or a CSV or JSON Lines file in the multipart field "file"'
            )
        version = services.items_add(
            dataset=dataset, actor=self.access.actor, items=items, note=note, ip=self.client_ip
        )
        return self.version_response(version)


class DatasetItemRemoveView(DatasetEndpoint):
    """Remove items by key as a new version (earlier versions keep them); an unknown key
    is a 400 naming it, and nothing is removed."""

    permissions = {"POST": "work:write"}
    serializer_class = VersionSerializer

    @extend_schema(request=ItemsRemoveSerializer, responses={201: VersionSerializer})
    def post(self, request, org_slug, project_slug, dataset_id):
        data = _valid(ItemsRemoveSerializer, request.data)
        version = services.items_remove(
            dataset=self.dataset(), actor=self.access.actor, keys=data["keys"], ip=self.client_ip
        )
        return self.version_response(version)


class DatasetItemFromRunView(DatasetEndpoint):
    """Add a run of this project as an item (new version): its input, and its output as
    the expected output unless `expected` is given (`null`: none). Its key is
    `run-<id>`, so adding the same run again replaces the item."""

    permissions = {"POST": "work:write"}
    serializer_class = VersionSerializer

    @extend_schema(request=FromRunSerializer, responses={201: VersionSerializer})
    def post(self, request, org_slug, project_slug, dataset_id):
        data = _valid(FromRunSerializer, request.data)
        dataset = self.dataset()
        run = Run.objects.filter(project=self.project, pk=data["run_id"]).first()
        if run is None:
            raise NotFound("run not found")
        version = services.item_from_run(
            dataset=dataset,
            actor=self.access.actor,
            run=run,
            expected=data["expected"] if "expected" in data else ...,
            ip=self.client_ip,
        )
        return self.version_response(version)


project = url_prefixes.API_PROJECT
dataset = f"{project}/datasets/<int:dataset_id>"

urlpatterns = [
    path(f"{project}/datasets/", DatasetListView.as_view(), name="api-dataset-list"),
    path(f"{dataset}/", DatasetDetailView.as_view(), name="api-dataset-detail"),
    path(f"{dataset}/versions/", DatasetVersionListView.as_view(), name="api-dataset-versions"),
    path(f"{dataset}/items/", DatasetItemListView.as_view(), name="api-dataset-items"),
    path(f"{dataset}/items/remove/", DatasetItemRemoveView.as_view(), name="api-dataset-items-remove"),
    path(f"{dataset}/items/from-run/", DatasetItemFromRunView.as_view(), name="api-dataset-items-from-run"),
]
