#!/usr/bin/env python
"""Django's command-line utility. On the embedded defaults it starts the
project's own PostgreSQL and Redis for the command (shared with anything
else using them) and releases them afterwards."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")
    from memoryhub.runtime.commands import embedded_services_for_command

    with embedded_services_for_command():
        from django.core.management import execute_from_command_line

        execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
