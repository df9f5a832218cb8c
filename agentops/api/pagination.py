from rest_framework.pagination import CursorPagination


class CreatedCursorPagination(CursorPagination):
    """Newest first, stable under inserts: the cursor never skips or repeats a row."""

    ordering = ("-created_at", "-id")
    page_size_query_param = "page_size"
    max_page_size = 500
