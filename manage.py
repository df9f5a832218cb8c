#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    if sys.argv[1:] == ["generate_encryption_key"]:
        # The key ENCRYPTION_KEYS needs, made before anything is configured: with DEBUG off
        # the settings refuse to load without ENCRYPTION_KEYS and SECRET_KEY, so going
        # through them would ask for the very key this prints (the command's own function,
        # which reads no setting).
        from agentops.crypto import generate_key

        print(generate_key())
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    from agentops.bootstrap import check_external_services

    check_external_services(command=sys.argv[1] if len(sys.argv) > 1 else "help")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018 - load the settings now, to report their errors plainly
    except ImproperlyConfigured as exc:
        from agentops.embedded import fail

        fail(f"configuration error: {exc}")

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
