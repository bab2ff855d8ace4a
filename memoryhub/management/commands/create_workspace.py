from django.core.management.base import BaseCommand, CommandError

from memoryhub.access import OPERATOR
from memoryhub.errors import MemoryhubError
from memoryhub.services.workspaces import workspace_create


class Command(BaseCommand):
    help = "Create a workspace (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args, slug: str, name: str, **options):
        try:
            tenant = workspace_create(caller=OPERATOR, slug=slug, name=name, exist_ok=True)
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"workspace {tenant.slug} ({tenant.id})")
