from django.contrib import admin
from django.urls import include, path

from memoryhub.views import health, pages, workspace

# People's own pages.
page_urls = [
    path("", pages.home, name="home"),
    path("memory/", pages.my_memory, name="my_memory"),
    path("memory/<uuid:fragment_id>/", pages.fragment_detail, name="fragment_detail"),
    path("memory/<uuid:fragment_id>/forget/", pages.fragment_forget, name="fragment_forget"),
    path("receipts/", pages.receipt_list, name="receipt_list"),
    path("receipts/<str:receipt_id>/", pages.receipt_detail, name="receipt_detail"),
]

# Workspace administration (admins of the workspace only; agents: memoryhub.oauth_urls).
workspace_urls = [
    path("", workspace.overview, name="overview"),
    path("members/", workspace.members, name="members"),
    path("members/add/", workspace.member_add, name="member_add"),
    path("members/<int:user_id>/", workspace.member_update, name="member_update"),
    path("roles/add/", workspace.role_add, name="role_add"),
    path("roles/<int:role_id>/delete/", workspace.role_delete, name="role_delete"),
    path("collections/", workspace.collections, name="collections"),
    path("collections/add/", workspace.collection_add, name="collection_add"),
    path("access/", workspace.access_rules, name="access"),
    path("access/grant/", workspace.access_grant, name="access_grant"),
    path("access/<int:rule_id>/revoke/", workspace.access_revoke, name="access_revoke"),
    path("sources/", workspace.sources, name="sources"),
    path("sources/add/", workspace.source_add, name="source_add"),
    path("settings/", workspace.workspace_settings, name="settings"),
]

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("reviews/", include("reviews.urls")),
    path("workspace/", include((workspace_urls, "workspace"))),
    path("", include(page_urls)),
    # REST: the ingestion API for connected sources, and its OpenAPI schema at /api/schema.
    path("api/", include("memoryhub.api.urls")),
    # The memory service's internal API for edge processes (off unless MEMORYHUB_INTERNAL_API).
    path("internal/", include("memoryhub.internal_api")),
    # OAuth: discovery, /o/…, sign-in, connected apps, workspace agents.
    path("", include("memoryhub.oauth_urls")),
]
