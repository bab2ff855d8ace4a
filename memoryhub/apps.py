from django.apps import AppConfig


class MemoryhubConfig(AppConfig):
    name = "memoryhub"
    verbose_name = "memoryhub"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The MCP result budget is known by name to every process, so a receipt
        # replayed from a page is cut as the MCP read was (services.search.budget_named).
        from memoryhub.mcp_adapter import render  # noqa: F401
