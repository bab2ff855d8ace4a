from memoryhub.access import OPERATOR
from memoryhub.management.answers import AnsweringCommand
from memoryhub.services.workspaces import workspace_create


class Command(AnsweringCommand):
    help = "Create a workspace (idempotent)."

    def add_operation_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args, slug: str, name: str, **options):
        tenant = workspace_create(caller=OPERATOR, slug=slug, name=name, exist_ok=True)
        self.answer(options, {"workspace": tenant.slug, "name": tenant.name, "id": str(tenant.id)},
                    f"workspace {tenant.slug} ({tenant.id})")
