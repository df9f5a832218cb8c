"""The API's JSON parser (``DEFAULT_PARSER_CLASSES``): every JSON body of every endpoint
is read here, so no body can make a 500, whatever its depth, size or content.

- over ``API_MAX_BODY_BYTES``: 413 ``too_large``;
- not UTF-8, not JSON, nested deeper than ``agentops.jsonsafe.MAX_DEPTH`` levels, NaN or
  Infinity, a number no float holds, a NUL character or an unpaired surrogate in any
  string or key: 400 ``parse_error`` whose message names the problem and where it is.

DRF's own JSONParser lets a deep body raise RecursionError (a 500) and reads any size.
"""

from __future__ import annotations

import json

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import BaseParser

from agentops import jsonsafe

READ_CHUNK_BYTES = 1024 * 1024


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"
    default_detail = "the request is too large"


class JSONParser(BaseParser):
    """JSON read with a size limit, then ``load``-ed: strictly by ``jsonsafe.loads``."""

    media_type = "application/json"

    def max_bytes(self) -> int:
        return settings.API_MAX_BODY_BYTES

    def too_large(self, limit: int) -> PayloadTooLarge:
        return PayloadTooLarge(f"the body is over {limit} bytes")

    def parse(self, stream, media_type=None, parser_context=None):
        return self.load(self.read(stream, (parser_context or {}).get("request")))

    def read(self, stream, request) -> str:
        """The body as text, read no further than the limit."""
        limit = self.max_bytes()
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and declared.isdigit() and int(declared) > limit:
            raise self.too_large(limit)
        chunks, total = [], 0
        try:
            while stream is not None and total <= limit:
                chunk = stream.read(min(READ_CHUNK_BYTES, limit + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
        except OSError as exc:  # the client went away mid-body (UnreadablePostError)
            raise exceptions.ParseError(f"the body could not be read: {exc}") from None
        if total > limit:
            raise self.too_large(limit)
        raw = b"".join(chunks)
        if not raw:
            raise exceptions.ParseError("the body is empty")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise exceptions.ParseError(f"the body is not valid UTF-8 (byte {exc.start})") from None

    def load(self, text: str):
        try:
            return jsonsafe.loads(text)
        except jsonsafe.UnreadableJSON as exc:
            raise exceptions.ParseError(f"the JSON body is refused: {exc}") from None
        except ValueError as exc:
            message = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
            raise exceptions.ParseError(f"the body is not valid JSON: {message}{where}") from None
