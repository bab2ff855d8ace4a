from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.models import Agent
from memoryhub.services.workspaces import agent_revoke, tenant_get


class Command(BaseCommand):
    help = "Revoke an agent: its credentials and every token it holds stop working now."

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument("name")

    def handle(self, *args, workspace, name, **options):
        try:
            agent = Agent.objects.get(tenant=tenant_get(slug=workspace), name=name)
        except Agent.DoesNotExist:
            raise CommandError(f"No agent named {name!r} in {workspace}.") from None
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        agent_revoke(agent=agent)
        self.stdout.write(f"agent {agent.name} in {workspace} revoked")
