from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from memoryhub.runtime.backup import BackupFailed, backup


class Command(BaseCommand):
    help = "Write the whole database to PATH (pg_dump's custom format), for `manage.py restore PATH`."

    def add_arguments(self, parser):
        parser.add_argument("path")

    def handle(self, *args, path: str, **options):
        try:
            size = backup(Path(path))
        except BackupFailed as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"backup written to {path} ({size} bytes)")
