from memoryhub.management.answers import WorkspaceCommand
from memoryhub.services.agents import agent_revoke


class Command(WorkspaceCommand):
    help = "Revoke an agent: its credentials and every token it holds stop working now."

    def add_operation_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, name, **options):
        agent = agent_revoke(caller=self.caller(options), name=name)
        self.answer(options, {"name": agent.name, "revoked": True},
                    f"agent {agent.name} in {options['workspace']} revoked")
