"""OpenAPI generation (drf-spectacular) for the API's own conventions."""

import re

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema


class PlatformAutoSchema(AutoSchema):
    """Operation ids from the view class (``ApiKeyListView`` + GET -> ``api_key_list_get``):
    one class per resource, so ids are unique and stable."""

    def get_operation_id(self):
        name = type(self.view).__name__.removesuffix("View")
        return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower() + "_" + self.method.lower()


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "agentops.api.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A project API key: `Authorization: Bearer ao_...`",
        }
