from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Load the embedder once (and build its fast-path model file if it has one)."

    def handle(self, *args, **options):
        from memoryhub.embeddings import get_embedder, prepare_embedder

        prepare_embedder()
        embedder = get_embedder()
        self.stdout.write(f"embedder ready: {embedder.name} ({embedder.dimensions} dimensions)")
