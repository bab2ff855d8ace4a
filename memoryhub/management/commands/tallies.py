from django.core.management.base import BaseCommand, CommandError

from memoryhub import access
from memoryhub.services import tallies


class Command(BaseCommand):
    help = ("Say whether the search's fragment tallies (live fragments and their lengths per collection or owner) "
            "agree with the fragments, and fail when they do not; with --recount, count them again. Needed only "
            "after a change no trigger sees: a TRUNCATE of the fragments alone, triggers disabled (a data-only "
            "restore, session_replication_role = replica), or a migration that changes search_length.")

    def add_arguments(self, parser):
        parser.add_argument("--recount", action="store_true",
                            help="Count every home's live fragments again (writes of fragments wait meanwhile).")

    def handle(self, *args, recount, **options):
        if recount:
            homes = tallies.tallies_recount(caller=access.OPERATOR)
            self.stdout.write(f"Recounted: {homes} homes hold live fragments.")
            return
        drift = tallies.tallies_drift(caller=access.OPERATOR)
        if not drift:
            self.stdout.write("The tallies agree with the fragments.")
            return
        for home in drift:
            self.stdout.write(f"workspace {home.tenant_id}, {home.home}: live fragments, words, measured: "
                              f"counted {home.counted}, tallied {home.tallied}")
        raise CommandError(f"{len(drift)} homes' tallies disagree with their fragments; "
                           "run `manage.py tallies --recount`.")
