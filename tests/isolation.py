"""The tenant-isolation checks every API resource inherits (NetBox-style).

A resource's test class inherits the checks of the operations it has
(``TenantIsolationChecks`` for all of them) and gets tests that another
organization's object is a 404 on read, update and delete, that lists exclude it,
and that an ``organization`` field in a request body is refused (400 naming it).
"""

from __future__ import annotations

import pytest


class _IsolationBase:
    """Subclasses define:
    - ``make_object(tenant)``: create one object of the resource in ``tenant``; return it
    - ``detail_url(url_tenant, obj)`` and ``list_url(tenant)``: URLs naming ``url_tenant``'s
      organization (and project); the checks try the caller's own organization with the
      foreign object's id, and the foreign organization's URL itself
    - ``created_organization_id(response)``: the organization of the object a create made
    - ``update_method`` / ``update_body``: a change request for the detail URL
    - ``create_body``: a valid create request for the list URL
    - ``list_ids(response)``: ids found in a list response
    - ``as_key``: True to call with an API key of the tenant's project instead of a session
    """

    update_method = "patch"
    update_body: dict = {}
    create_body: dict = {}
    as_key = False

    @pytest.fixture
    def caller(self, tenant, client_for, key_client):
        """A client acting for ``tenant`` (its owner, or an API key of its project)."""
        if self.as_key:
            return key_client(tenant.project)
        return client_for(tenant.owner)

    def list_ids(self, response) -> set:
        body = response.json()
        items = body["results"] if isinstance(body, dict) and "results" in body else body
        return {item["id"] for item in items}

    # Hooks with sensible defaults.
    def delete_body(self, obj):
        return None

    def list_id(self, obj):
        return obj.pk

    def snapshot(self, obj):
        """What must not change when a foreign caller tries to update or delete."""
        model = type(obj)
        row = model._base_manager.filter(pk=obj.pk).values().first()
        return row


class ReadIsolation(_IsolationBase):
    def test_other_organizations_object_is_not_found_on_read(self, caller, tenant, other_tenant):
        foreign = self.make_object(other_tenant)
        for url_tenant in (tenant, other_tenant):
            response = caller.get(self.detail_url(url_tenant, foreign))
            assert response.status_code == 404, response.content
            assert response.json()["error"]["code"] == "not_found"


class UpdateIsolation(_IsolationBase):
    def test_other_organizations_object_is_not_found_on_update(self, caller, tenant, other_tenant):
        foreign = self.make_object(other_tenant)
        before = self.snapshot(foreign)
        for url_tenant in (tenant, other_tenant):
            response = getattr(caller, self.update_method)(
                self.detail_url(url_tenant, foreign), self.update_body, format="json"
            )
            assert response.status_code == 404, response.content
        assert self.snapshot(foreign) == before


class DeleteIsolation(_IsolationBase):
    def test_other_organizations_object_is_not_found_on_delete(self, caller, tenant, other_tenant):
        foreign = self.make_object(other_tenant)
        before = self.snapshot(foreign)
        for url_tenant in (tenant, other_tenant):
            response = caller.delete(self.detail_url(url_tenant, foreign), self.delete_body(foreign), format="json")
            assert response.status_code == 404, response.content
        assert self.snapshot(foreign) == before


class ListIsolation(_IsolationBase):
    def test_list_excludes_other_organizations_objects(self, caller, tenant, other_tenant):
        mine = self.make_object(tenant)
        foreign = self.make_object(other_tenant)
        response = caller.get(self.list_url(tenant))
        assert response.status_code == 200, response.content
        ids = self.list_ids(response)
        assert caller.get(self.list_url(other_tenant)).status_code == 404
        assert self.list_id(mine) in ids
        assert self.list_id(foreign) not in ids


class CreateIsolation(_IsolationBase):
    def test_organization_in_body_is_refused_on_create(self, caller, tenant, other_tenant):
        body = {
            **self.create_body,
            "organization": other_tenant.organization.pk,
            "organization_id": other_tenant.organization.pk,
        }
        refused = caller.post(self.list_url(tenant), body, format="json")
        assert refused.status_code == 400, refused.content
        assert refused.json()["error"]["message"].startswith("unknown fields 'organization', 'organization_id':")
        # The same body without them creates the object, in the URL's organization.
        response = caller.post(self.list_url(tenant), self.create_body, format="json")
        assert response.status_code in (200, 201, 202), response.content  # 202: it starts work
        assert self.created_organization_id(response) == tenant.organization.pk


class TenantIsolationChecks(ReadIsolation, UpdateIsolation, DeleteIsolation, ListIsolation, CreateIsolation):
    """All the checks, for a resource with every operation."""
