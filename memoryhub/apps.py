from django.apps import AppConfig


class MemoryhubConfig(AppConfig):
    name = "memoryhub"
    verbose_name = "memoryhub"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Celery's autodiscovery imports memoryhub.tasks only; ingestion's tasks live apart.
        from memoryhub import ingest_tasks  # noqa: F401
