from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"

    def ready(self):
        # The staff console registers its admin pages (billing/admin.py holds the price
        # catalog's admin; the console is its own module).
        from billing import console  # noqa: F401
