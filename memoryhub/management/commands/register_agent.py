from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from memoryhub.errors import MemoryhubError
from memoryhub.management.acting import acting_caller, add_acting_argument
from memoryhub.services.agents import AgentCredentials, agent_register
from memoryhub.services.roles import role_create


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
    help = "Register a headless agent (roles that do not exist yet are created); prints its client id and secret once."

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument("name")
        parser.add_argument("--scopes", default="memory.read", help="Space- or comma-separated scopes.")
        parser.add_argument("--roles", default="", help="Comma-separated role names.")
        add_acting_argument(parser)

    def handle(self, *args, workspace, name, scopes, roles, acting_as, **options):
        caller = acting_caller(workspace, acting_as)
        wanted = [r.strip() for r in roles.split(",") if r.strip()]
        try:
            with transaction.atomic():
                for role in wanted:
                    role_create(caller=caller, name=role, exist_ok=True)
                creds = agent_register(caller=caller, name=name, roles=wanted,
                                       scopes=[s for s in scopes.replace(",", " ").split() if s])
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        print_agent_credentials(self, creds, workspace)
