from django.urls import path

from memoryhub.pages import health, people, workspace

# People's own pages.
people_urls = [
    path("", people.home, name="home"),
    path("memory/", people.my_memory, name="my_memory"),
    path("memory/export/", people.memory_download, name="memory_download"),
    path("memory/<uuid:fragment_id>/", people.fragment_detail, name="fragment_detail"),
    path("memory/<uuid:fragment_id>/forget/", people.fragment_forget, name="fragment_forget"),
    path("receipts/", people.receipt_list, name="receipt_list"),
    path("receipts/<str:receipt_id>/", people.receipt_detail, name="receipt_detail"),
    path("connect/", people.connect_page, name="connect"),
    path("account/apps/", people.connected_apps_page, name="connected_apps"),
    path("account/password/", people.password_page, name="password_change"),
    path("account/apps/<int:application_id>/disconnect/", people.disconnect_app, name="disconnect_app"),
    path("account/apps/disconnect-all/", people.disconnect_all_apps, name="disconnect_all_apps"),
]

# Workspace administration (admins of the workspace only).
workspace_urls = [
    path("", workspace.overview, name="overview"),
    path("members/", workspace.members_page, name="members"),
    path("members/add/", workspace.member_add, name="member_add"),
    path("members/<int:user_id>/", workspace.member_update, name="member_update"),
    path("members/<int:user_id>/erase/", workspace.member_erase, name="member_erase"),
    path("members/<int:user_id>/password/", workspace.member_password, name="member_password"),
    path("members/<int:user_id>/<slug:action>/", workspace.member_lifecycle, name="member_lifecycle"),
    path("roles/add/", workspace.role_add, name="role_add"),
    path("roles/<int:role_id>/delete/", workspace.role_delete, name="role_delete"),
    path("collections/", workspace.collections_page, name="collections"),
    path("collections/add/", workspace.collection_add, name="collection_add"),
    path("collections/<int:collection_id>/<slug:action>/", workspace.collection_change, name="collection_change"),
    path("access/", workspace.access_page, name="access"),
    path("access/grant/", workspace.access_grant, name="access_grant"),
    path("access/<int:rule_id>/revoke/", workspace.access_revoke, name="access_revoke"),
    path("agents/", workspace.agents_page, name="agents"),
    path("agents/add/", workspace.agent_add, name="agent_add"),
    path("agents/<slug:name>/rotate/", workspace.agent_rotate, name="agent_rotate"),
    path("agents/<slug:name>/revoke/", workspace.agent_revoke, name="agent_revoke"),
    path("sources/", workspace.sources_page, name="sources"),
    path("sources/add/", workspace.source_add, name="source_add"),
    path("sources/<slug:name>/rotate/", workspace.source_rotate, name="source_rotate"),
    path("sources/<slug:name>/revoke/", workspace.source_revoke, name="source_revoke"),
    path("sources/<slug:name>/<slug:state>/", workspace.source_state, name="source_state"),
    path("receipts/", workspace.receipt_chain_page, name="receipt_chain"),
    path("receipts/checkpoint/", workspace.receipt_checkpoint, name="receipt_checkpoint"),
    path("settings/", workspace.settings_page, name="settings"),
]

health_urls = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics_view, name="metrics"),
]
