"""Ledger categories (LLM, tool by unit, GPU, evaluation), judge calls in the ledger,
and the carbon factor catalog with its first rows.

The factor rows are literal here (a migration never imports seed code); their sources
are the ones docs/billing.md ("Carbon") cites. Existing ledger rows: GPU jobs' rows
become category ``gpu``, model calls' rows get the unit ``token``, and every run with a
row of no model (where tool steps were counted) is marked for the ledger task, which
moves its tool steps to category ``tool`` by applying the difference as usual.
"""

from datetime import UTC, datetime
from decimal import Decimal

import django.db.models.deletion
import django.db.models.manager
import django.utils.timezone
from django.db import migrations, models

SEEDED_AT = datetime(2026, 1, 1, tzinfo=UTC)
EPOCH = (
    "Epoch AI, 'How much energy does ChatGPT use?' (J. You, 2025-02-07): about 0.3 Wh for a typical "
    "GPT-4o query of ~500 output tokens on H100s, i.e. ~0.6 Wh per 1k tokens; cited from memory on 2026-11-25 without network access, unverified"
)
SCALED = (
    "estimate: the Epoch AI figure (0.6 Wh per 1k tokens for a GPT-4o-class model) scaled by the "
    "model's smaller size; not published by the provider; cited from memory on 2026-11-25 without network access, unverified"
)
MISTRAL_LCA = (
    "Mistral AI, life-cycle analysis of Mistral Large 2 (2025-07-22): 1.14 g CO2e marginal per "
    "400-token answer; at the platform default grid (473 g/kWh) that is ~6 Wh per 1k tokens, an "
    "upper bound as it includes more than inference energy; cited from memory on 2026-11-25 without network access, unverified"
)
NVIDIA = "NVIDIA data sheet, maximum board power (TDP) of the {board}; cited from memory on 2026-11-25 without network access, unverified"
EMBER = (
    "Ember, Global Electricity Review 2024: world average 2023 carbon intensity of electricity "
    "~473 g CO2e/kWh; cited from memory on 2026-11-25 without network access, unverified"
)
EMBER_US = (
    "Ember, US electricity 2024: PJM region (US east, AWS us-east-1 where Hugging Face Jobs and "
    "Modal run by default) ~370 g CO2e/kWh in 2023; cited from memory on 2026-11-25 without network access, unverified"
)

# (kind, pattern, match, region, value, source)
FACTORS = [
    ("model", "*", "exact", "", "0.6", EPOCH),
    ("model", "mistral-large", "prefix", "", "6.0", MISTRAL_LCA),
    ("model", "mistral-medium", "prefix", "", "0.6", SCALED),
    ("model", "mistral-small", "prefix", "", "0.15", SCALED),
    ("model", "ministral", "prefix", "", "0.05", SCALED),
    ("model", "gpt-4o-mini", "prefix", "", "0.15", SCALED),
    ("model", "gpt-4o", "prefix", "", "0.6", EPOCH),
    ("gpu", "t4", "exact", "", "70", NVIDIA.format(board="Tesla T4 (70 W)")),
    ("gpu", "l4", "exact", "", "72", NVIDIA.format(board="L4 (72 W)")),
    ("gpu", "a10g", "exact", "", "300", NVIDIA.format(board="A10G (300 W, AWS G5)")),
    ("gpu", "a100", "exact", "", "400", NVIDIA.format(board="A100 80GB SXM (400 W)")),
    ("gpu", "h100", "exact", "", "700", NVIDIA.format(board="H100 SXM (700 W)")),
    ("gpu", "h200", "exact", "", "700", NVIDIA.format(board="H200 SXM (700 W)")),
    ("grid", "*", "exact", "world average", "473", EMBER),
    ("grid", "hf_jobs", "exact", "us-east (PJM)", "370", EMBER_US),
    ("grid", "modal", "exact", "us-east (PJM)", "370", EMBER_US),
]


def create_factor_rows(EnergyFactor) -> None:
    """Create the rows of ``FACTORS`` that are missing (billing.seed runs it too, for the
    test suite, whose transactional tests empty every table)."""
    for kind, pattern, match, region, value, source in FACTORS:
        EnergyFactor.objects.get_or_create(
            kind=kind,
            pattern=pattern,
            match=match,
            effective_from=SEEDED_AT,
            defaults={"region": region, "value": Decimal(value), "source": source, "created_at": SEEDED_AT},
        )


def seed_factors(apps, schema_editor):
    create_factor_rows(apps.get_model("billing", "EnergyFactor"))


def unseed_factors(apps, schema_editor):
    EnergyFactor = apps.get_model("billing", "EnergyFactor")
    EnergyFactor.objects.filter(effective_from=SEEDED_AT, pattern__in=[row[1] for row in FACTORS]).delete()


CLASSIFY = [
    "UPDATE billing_usagedaily SET category = 'gpu', unit = 'hour' WHERE agent_name = 'gpu-job' AND model LIKE 'gpu:%'",
    "UPDATE billing_usagedaily SET unit = 'token' WHERE category = 'llm' AND model <> ''",
    "UPDATE billing_runusage SET unit = 'token' WHERE category = 'llm' AND model <> ''",
    "INSERT INTO billing_ledgerbacklog (run_id, organization_id, marked_at) "
    "SELECT DISTINCT run_id, organization_id, now() FROM billing_runusage WHERE model = '' "
    "ON CONFLICT (run_id) DO NOTHING",
]


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0005_invitation_email_delivery"),
        ("billing", "0008_usage_daily_names"),
    ]

    operations = [
        migrations.CreateModel(
            name="EnergyFactor",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("model", "Model energy (Wh per 1k tokens)"),
                            ("gpu", "GPU board power (W)"),
                            ("grid", "Grid intensity (g CO2e per kWh)"),
                        ],
                        max_length=8,
                    ),
                ),
                ("pattern", models.CharField(help_text="Model, hardware or backend kind; * for any.", max_length=200)),
                (
                    "match",
                    models.CharField(
                        choices=[("exact", "Exact name"), ("prefix", "Name prefix")], default="exact", max_length=8
                    ),
                ),
                (
                    "region",
                    models.CharField(blank=True, help_text="For a grid: the region it stands for.", max_length=64),
                ),
                ("value", models.DecimalField(decimal_places=6, max_digits=14)),
                (
                    "source",
                    models.CharField(help_text="Where the number comes from, and when it was read.", max_length=400),
                ),
                ("effective_from", models.DateTimeField(default=django.utils.timezone.now)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                "ordering": ["kind", "pattern", "-effective_from"],
            },
        ),
        migrations.CreateModel(
            name="EvaluationUsage",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("day", models.DateField()),
                ("evaluator", models.CharField(blank=True, help_text="The evaluator's name.", max_length=64)),
                ("source", models.CharField(blank=True, help_text="experiment, online or try.", max_length=16)),
                ("experiment_id", models.BigIntegerField(blank=True, null=True)),
                ("run_id", models.BigIntegerField(blank=True, help_text="The run judged, if any.", null=True)),
                ("model", models.CharField(max_length=200)),
                ("input_tokens", models.BigIntegerField(default=0)),
                ("cached_input_tokens", models.BigIntegerField(default=0)),
                ("output_tokens", models.BigIntegerField(default=0)),
                ("cost", models.DecimalField(decimal_places=9, default=0, max_digits=18)),
                ("unpriced", models.BooleanField(default=False)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            managers=[
                ("objects", django.db.models.manager.Manager()),
                ("dangerously_unscoped_objects", django.db.models.manager.Manager()),
            ],
        ),
        migrations.RemoveConstraint(
            model_name="runusage",
            name="run_usage_unique",
        ),
        migrations.RemoveConstraint(
            model_name="usagedaily",
            name="usage_daily_unique",
        ),
        migrations.AddField(
            model_name="runusage",
            name="category",
            field=models.CharField(
                choices=[("llm", "LLM calls"), ("tool", "Tools"), ("gpu", "GPU jobs"), ("evaluation", "Evaluation")],
                default="llm",
                max_length=12,
            ),
        ),
        migrations.AddField(
            model_name="runusage",
            name="unit",
            field=models.CharField(
                blank=True,
                help_text="What the spend is counted in: token, call, character, second, hour.",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="usagedaily",
            name="category",
            field=models.CharField(
                choices=[("llm", "LLM calls"), ("tool", "Tools"), ("gpu", "GPU jobs"), ("evaluation", "Evaluation")],
                default="llm",
                max_length=12,
            ),
        ),
        migrations.AddField(
            model_name="usagedaily",
            name="unit",
            field=models.CharField(
                blank=True,
                help_text="What the spend is counted in: token, call, character, second, hour.",
                max_length=16,
            ),
        ),
        migrations.AddConstraint(
            model_name="runusage",
            constraint=models.UniqueConstraint(
                fields=("run_id", "day", "model", "category", "unit"), name="run_usage_unique"
            ),
        ),
        migrations.AddConstraint(
            model_name="usagedaily",
            constraint=models.UniqueConstraint(
                fields=("project", "day", "agent_name", "model", "api_key", "end_user_id", "category", "unit"),
                name="usage_daily_unique",
                nulls_distinct=False,
            ),
        ),
        migrations.AddConstraint(
            model_name="energyfactor",
            constraint=models.UniqueConstraint(
                fields=("kind", "pattern", "match", "effective_from"), name="energy_factor_unique"
            ),
        ),
        migrations.AddConstraint(
            model_name="energyfactor",
            constraint=models.CheckConstraint(condition=models.Q(("value__gte", 0)), name="energy_factor_not_negative"),
        ),
        migrations.AddField(
            model_name="evaluationusage",
            name="organization",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="%(app_label)s_%(class)s_set",
                to="agentops.organization",
            ),
        ),
        migrations.AddField(
            model_name="evaluationusage",
            name="price",
            field=models.ForeignKey(
                blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name="+", to="billing.price"
            ),
        ),
        migrations.AddField(
            model_name="evaluationusage",
            name="project",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="agentops.project"
            ),
        ),
        migrations.AddIndex(
            model_name="evaluationusage",
            index=models.Index(fields=["project", "day"], name="evaluation_usage_project_day"),
        ),
        migrations.AddIndex(
            model_name="evaluationusage",
            index=models.Index(fields=["experiment_id"], name="evaluation_usage_experiment"),
        ),
        migrations.RunSQL(CLASSIFY, reverse_sql=migrations.RunSQL.noop),
        migrations.RunPython(seed_factors, unseed_factors),
    ]
