from django.core.management.base import BaseCommand

from agentops.services.demo import demo_seed


class Command(BaseCommand):
    help = "Create the demo organization, project, user and API key, and print the credentials."

    def handle(self, *args, **options):
        self.stdout.write(format_credentials(demo_seed()))


def format_credentials(demo) -> str:
    return (
        "Demo data ready:\n"
        f"  user:     {demo.email}\n"
        f"  password: {demo.password}\n"
        f"  project:  {demo.organization}/{demo.project}\n"
        f"  API key:  {demo.api_key}"
    )
