from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.management.commands.register_agent import print_agent_credentials
from memoryhub.models import Agent
from memoryhub.services.workspaces import agent_rotate_secret, tenant_get


class Command(BaseCommand):
    help = "Give an agent a new client secret (printed once); the old secret and its tokens stop working."

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument("name")

    def handle(self, *args, workspace, name, **options):
        try:
            agent = Agent.objects.get(tenant=tenant_get(slug=workspace), name=name)
            creds = agent_rotate_secret(agent=agent)
        except Agent.DoesNotExist:
            raise CommandError(f"No agent named {name!r} in {workspace}.") from None
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        print_agent_credentials(self, creds, workspace)
