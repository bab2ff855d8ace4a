import json

from django.core.management.base import BaseCommand, CommandError

from memoryhub.errors import MemoryhubError
from memoryhub.management.acting import acting_caller, add_acting_argument
from memoryhub.services.receipt_chain import checkpoint_item, checkpoint_sign


class Command(BaseCommand):
    help = ("Sign the workspace's receipt chain head now and print the checkpoint as one JSON line, "
            "ready to publish (nothing is signed when no receipt was added since the last one).")

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        add_acting_argument(parser)

    def handle(self, *args, workspace, acting_as, **options):
        try:
            checkpoint = checkpoint_sign(caller=acting_caller(workspace, acting_as))
        except MemoryhubError as exc:
            raise CommandError(exc.message) from exc
        if checkpoint is None:
            self.stderr.write("No receipt was added since the last checkpoint: nothing signed.")
            return
        self.stdout.write(json.dumps(checkpoint_item(checkpoint), sort_keys=True))
