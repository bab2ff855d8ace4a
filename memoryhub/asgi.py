"""The ASGI application: Django for pages and APIs; /mcp* goes to the MCP gateway
(see mcpapi.gateway), which also owns the lifespan messages Django refuses."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_app = get_asgi_application()

from memoryhub.mcp_adapter.wiring import build_asgi_application  # noqa: E402

application = build_asgi_application(django_app)
