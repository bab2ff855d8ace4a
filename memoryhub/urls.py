from django.contrib import admin
from django.urls import include, path

from memoryhub.pages.urls import health_urls, people_urls, workspace_urls

urlpatterns = [
    *health_urls,
    path("admin/", admin.site.urls),
    path("reviews/", include("reviews.urls")),
    path("workspace/", include((workspace_urls, "workspace"))),
    path("", include(people_urls)),
    # REST: the ingestion API for connected sources, the admin API for a workspace's
    # admins, and their OpenAPI schema at /api/schema.
    path("api/", include("memoryhub.api.urls")),
    # The memory service's internal API for edge processes (off unless MEMORYHUB_INTERNAL_API).
    path("internal/", include("memoryhub.mcp_adapter.internal_api")),
    # OAuth: discovery, /o/…, sign-in.
    path("", include("memoryhub.oauth.urls")),
]

# The pages of an error (DEBUG off), in the site's frame with a reason and a way back.
handler400 = "memoryhub.pages.errors.bad_request"
handler403 = "memoryhub.pages.errors.forbidden"
handler404 = "memoryhub.pages.errors.not_found"
handler500 = "memoryhub.pages.errors.server_error"
