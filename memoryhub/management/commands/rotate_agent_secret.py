from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.management.acting import acting_caller, add_acting_argument
from memoryhub.management.commands.register_agent import print_agent_credentials
from memoryhub.services.agents import agent_rotate_secret


class Command(BaseCommand):
    help = "Give an agent a new client secret (printed once); the old secret and its tokens stop working."

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument("name")
        add_acting_argument(parser)

    def handle(self, *args, workspace, name, acting_as, **options):
        try:
            creds = agent_rotate_secret(caller=acting_caller(workspace, acting_as), name=name)
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        print_agent_credentials(self, creds, workspace)
