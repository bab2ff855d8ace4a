from memoryhub.management.answers import WorkspaceCommand
from memoryhub.management.commands.register_agent import answer_agent_credentials
from memoryhub.services.agents import agent_rotate_secret


class Command(WorkspaceCommand):
    help = "Give an agent a new client secret (printed once); the old secret and its tokens stop working."

    def add_operation_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, name, **options):
        answer_agent_credentials(self, options, agent_rotate_secret(caller=self.caller(options), name=name))
