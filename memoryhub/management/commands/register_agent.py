from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.services.workspaces import agent_register, tenant_get


class Command(BaseCommand):
    help = "Register a headless agent; prints its client id and secret once."

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument("name")
        parser.add_argument("--scopes", default="memory.read", help="Space- or comma-separated scopes.")
        parser.add_argument("--roles", default="", help="Comma-separated role names.")

    def handle(self, *args, workspace, name, scopes, roles, **options):
        try:
            creds = agent_register(
                tenant=tenant_get(slug=workspace), name=name,
                scopes=[s for s in scopes.replace(",", " ").split() if s],
                roles=[r for r in roles.split(",") if r.strip()],
            )
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"agent {creds.agent.name} in {workspace} (scopes: {creds.agent.scopes})")
        self.stdout.write(f"client_id:     {creds.client_id}")
        self.stdout.write(f"client_secret: {creds.client_secret}   (shown once; store it now)")
        self.stdout.write(f"token endpoint: {settings.BASE_URL}/o/token/  (grant_type=client_credentials)")
