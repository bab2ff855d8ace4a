from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import AllowAny

from memoryhub.api import admin, views

# The REST admin API (memoryhub.api.admin), for a workspace's admins.
admin_urls = [
    path("members", admin.MembersView.as_view(), name="admin-members"),
    path("members/<int:user_id>", admin.MemberView.as_view(), name="admin-member"),
    path("members/<int:user_id>/deactivate", admin.MemberDeactivateView.as_view(), name="admin-member-deactivate"),
    path("members/<int:user_id>/reactivate", admin.MemberReactivateView.as_view(), name="admin-member-reactivate"),
    path("members/<int:user_id>/remove", admin.MemberRemoveView.as_view(), name="admin-member-remove"),
    path("roles", admin.RolesView.as_view(), name="admin-roles"),
    path("roles/<int:role_id>", admin.RoleView.as_view(), name="admin-role"),
    path("collections", admin.CollectionsView.as_view(), name="admin-collections"),
    path("collections/<int:collection_id>", admin.CollectionView.as_view(), name="admin-collection"),
    path("collections/<int:collection_id>/retire", admin.CollectionRetireView.as_view(),
         name="admin-collection-retire"),
    path("access-rules", admin.AccessRulesView.as_view(), name="admin-access-rules"),
    path("access-rules/<int:rule_id>", admin.AccessRuleView.as_view(), name="admin-access-rule"),
    path("sources", admin.SourcesView.as_view(), name="admin-sources"),
    path("sources/<str:name>/disable", admin.SourceDisableView.as_view(), name="admin-source-disable"),
    path("sources/<str:name>/enable", admin.SourceEnableView.as_view(), name="admin-source-enable"),
    path("sources/<str:name>/rotate", admin.SourceRotateView.as_view(), name="admin-source-rotate"),
    path("sources/<str:name>/revoke", admin.SourceRevokeView.as_view(), name="admin-source-revoke"),
    path("agents", admin.AgentsView.as_view(), name="admin-agents"),
    path("agents/<str:name>/rotate", admin.AgentRotateView.as_view(), name="admin-agent-rotate"),
    path("agents/<str:name>/revoke", admin.AgentRevokeView.as_view(), name="admin-agent-revoke"),
]

urlpatterns = [
    path("ingest/documents", views.DocumentUpsertView.as_view(), name="ingest-document-upsert"),
    # <path:> because resource ids may contain slashes (clients percent-encode the rest).
    path("ingest/documents/<path:resource_id>", views.DocumentView.as_view(), name="ingest-document"),
    path("ingest/status", views.ProgressView.as_view(), name="ingest-progress"),
    path("admin/", include(admin_urls)),
    path(
        "schema",
        SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[AllowAny]),
        name="api-schema",
    ),
]
