"""The price table: what a million tokens of a model cost. The billing issue grows it
into a versioned catalog with organization overrides; the cost function in
``billing.services`` is the seam that stays."""

from django.db import models
from django.utils import timezone


class ModelPrice(models.Model):
    """The price of one model (or family of models) in USD per million tokens."""

    class Match(models.TextChoices):
        EXACT = "exact", "Exact name"
        PREFIX = "prefix", "Name prefix"
        REGEX = "regex", "Regular expression"

    pattern = models.CharField(max_length=200, help_text="Model name, prefix or regular expression.")
    match = models.CharField(max_length=8, choices=Match.choices, default=Match.EXACT)
    priority = models.IntegerField(
        default=0, help_text="Higher wins when several patterns match; exact names win over prefixes and regexes."
    )
    provider = models.CharField(max_length=64, blank=True)
    input_per_million = models.DecimalField(max_digits=12, decimal_places=6)
    cached_input_per_million = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    output_per_million = models.DecimalField(max_digits=12, decimal_places=6)
    currency = models.CharField(max_length=3, default="USD")
    source = models.CharField(max_length=300, blank=True, help_text="Where the price was read, and when.")
    effective_from = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-priority", "pattern"]
        constraints = [
            models.UniqueConstraint(fields=["pattern", "match", "effective_from"], name="model_price_unique")
        ]

    def __str__(self) -> str:
        return f"{self.pattern} ({self.match})"
