from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from memoryhub.runtime.backup import BackupFailed, restore


class Command(BaseCommand):
    help = ("Replace the database with a backup written by `manage.py backup`. Stop the server and the "
            "workers first: every table is dropped and recreated, in one transaction.")

    def add_arguments(self, parser):
        parser.add_argument("path")
        parser.add_argument("--yes", action="store_true", help="Do not ask for confirmation.")

    def handle(self, *args, path: str, yes: bool, **options):
        if not yes:
            answer = input(f"Replace everything in the database with {path}? Type 'restore' to go on: ")
            if answer.strip() != "restore":
                raise CommandError("Nothing was restored.")
        try:
            restore(Path(path))
        except BackupFailed as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"restored from {path}")
