from django.contrib import admin

from billing.models import Price
from billing.services import prices_changed


@admin.register(Price)
class ModelPriceAdmin(admin.ModelAdmin):
    list_display = [
        "pattern",
        "match",
        "priority",
        "provider",
        "input_per_million",
        "cached_input_per_million",
        "output_per_million",
        "effective_from",
        "source",
    ]
    list_filter = ["provider", "match"]
    search_fields = ["pattern", "provider"]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        prices_changed()
