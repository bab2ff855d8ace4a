from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.services.workspaces import AgentCredentials, agent_register, tenant_get


def print_agent_credentials(command: BaseCommand, credentials: AgentCredentials, workspace: str) -> None:
    """What an operator hands to the agent: its id and secret (shown once), where
    to get a token, and which resource to ask for."""
    base = settings.BASE_URL.rstrip("/")
    command.stdout.write(f"agent {credentials.agent.name} in {workspace} (scopes: {credentials.agent.scopes})")
    command.stdout.write(f"client_id:     {credentials.client_id}")
    command.stdout.write(f"client_secret: {credentials.client_secret}   (shown once; store it now)")
    command.stdout.write(f"token endpoint: {base}/o/token/  (grant_type=client_credentials, tokens last 60 minutes)")
    command.stdout.write(f"resource:       {base}/mcp  (or {base}/mcp/readonly)")


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
        print_agent_credentials(self, creds, workspace)
