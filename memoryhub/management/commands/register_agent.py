from typing import Any

from django.conf import settings
from django.db import transaction

from memoryhub.management.answers import AnsweringCommand, WorkspaceCommand
from memoryhub.services.agents import AgentCredentials, agent_register
from memoryhub.services.roles import role_create


def answer_agent_credentials(command: AnsweringCommand, options: dict[str, Any], credentials: AgentCredentials) -> None:
    """What an operator hands to the agent: its id and secret (shown once), where
    to get a token, and which resource to ask for."""
    base = settings.BASE_URL.rstrip("/")
    agent = credentials.agent
    result = {"name": agent.name, "scopes": agent.scopes.split(), "roles": sorted(r.name for r in agent.roles.all()),
              "client_id": credentials.client_id, "client_secret": credentials.client_secret,
              "token_endpoint": f"{base}/o/token/", "resource": f"{base}/mcp",
              "readonly_resource": f"{base}/mcp/readonly"}
    command.answer(options, result, [
        f"agent {agent.name} in {options['workspace']} (scopes: {agent.scopes})",
        f"client_id:     {credentials.client_id}",
        f"client_secret: {credentials.client_secret}   (shown once; store it now)",
        f"token endpoint: {base}/o/token/  (grant_type=client_credentials, tokens last 60 minutes)",
        f"resource:       {base}/mcp  (or {base}/mcp/readonly)",
    ])


class Command(WorkspaceCommand):
    help = "Register a headless agent (roles that do not exist yet are created); prints its client id and secret once."

    def add_operation_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--scopes", default="memory.read", help="Space- or comma-separated scopes.")
        parser.add_argument("--roles", default="", help="Comma-separated role names.")

    def handle(self, *args, name, scopes, roles, **options):
        caller = self.caller(options)
        wanted = [r.strip() for r in roles.split(",") if r.strip()]
        with transaction.atomic():
            for role in wanted:
                role_create(caller=caller, name=role, exist_ok=True)
            creds = agent_register(caller=caller, name=name, roles=wanted,
                                   scopes=[s for s in scopes.replace(",", " ").split() if s])
        answer_agent_credentials(self, options, creds)
