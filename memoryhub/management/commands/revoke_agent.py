from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.management.acting import acting_caller, add_acting_argument
from memoryhub.services.agents import agent_revoke


class Command(BaseCommand):
    help = "Revoke an agent: its credentials and every token it holds stop working now."

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument("name")
        add_acting_argument(parser)

    def handle(self, *args, workspace, name, acting_as, **options):
        try:
            agent = agent_revoke(caller=acting_caller(workspace, acting_as), name=name)
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"agent {agent.name} in {workspace} revoked")
