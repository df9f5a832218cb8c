"""The price catalog in the staff console: saving a published price adds a version
(billing/catalog.py), so the steps priced with the old one keep pointing at it."""

import re

from django import forms
from django.contrib import admin

from agentops.pages import client_ip
from billing.catalog import price_create, price_delete, price_update
from billing.models import EnergyFactor, Price


class PriceForm(forms.ModelForm):
    class Meta:
        model = Price
        fields = [
            "kind",
            "pattern",
            "match",
            "priority",
            "provider",
            "organization",
            "input_per_million",
            "cached_input_per_million",
            "cache_write_per_million",
            "output_per_million",
            "reasoning_output_per_million",
            "tiers",
            "unit",
            "unit_price",
            "hourly",
            "currency",
            "source",
            "effective_from",
            "status",
        ]
        help_texts = {
            "effective_from": "Editing a published price adds a version: from now, unless you change this date.",
        }

    def clean_tiers(self):
        return self.cleaned_data.get("tiers") or []

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        required = {
            Price.Kind.LLM: ["input_per_million", "output_per_million"],
            Price.Kind.TOOL: ["unit", "unit_price"],
            Price.Kind.GPU: ["hourly"],
        }.get(kind, [])
        for name in required:
            if data.get(name) in (None, ""):
                self.add_error(name, f"Required for a {Price.Kind(kind).label} price.")
        if data.get("match") == Price.Match.REGEX and data.get("pattern"):
            try:
                re.compile(data["pattern"])
            except re.error as error:
                self.add_error("pattern", f"Not a valid regular expression: {error}.")
        return data


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    form = PriceForm
    list_display = [
        "pattern",
        "kind",
        "match",
        "priority",
        "provider",
        "organization",
        "status",
        "input_per_million",
        "cached_input_per_million",
        "cache_write_per_million",
        "output_per_million",
        "reasoning_output_per_million",
        "unit",
        "unit_price",
        "hourly",
        "effective_from",
        "source",
    ]
    list_filter = ["kind", "status", "provider", ("organization", admin.RelatedOnlyFieldListFilter), "match"]
    search_fields = ["pattern", "provider", "organization__name", "organization__slug", "source"]
    raw_id_fields = ["organization"]
    readonly_fields = ["created_by", "created_at"]
    date_hierarchy = "effective_from"

    def save_model(self, request, obj, form, change):
        # The services save ``obj`` itself (a new version gets a new id on this same
        # object), so the admin's message and redirect name the row really saved.
        if not change:
            price_create(price=obj, actor=request.user, ip=client_ip(request))
            return
        price_update(price=obj, actor=request.user, ip=client_ip(request))

    def delete_model(self, request, obj):
        price_delete(price=obj, actor=request.user, ip=client_ip(request))

    def delete_queryset(self, request, queryset):
        for price in queryset:
            price_delete(price=price, actor=request.user, ip=client_ip(request))


@admin.register(EnergyFactor)
class EnergyFactorAdmin(admin.ModelAdmin):
    """The carbon factor catalog (docs/billing.md, "Carbon"): add a version with a later
    ``effective_from`` rather than editing one that past days were estimated with."""

    list_display = ("kind", "pattern", "match", "region", "value", "effective_from", "source")
    list_filter = ("kind",)
    search_fields = ("pattern", "source")
