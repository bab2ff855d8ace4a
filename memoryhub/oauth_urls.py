"""URLs of the authorisation server and the pages around it.

The toolkit's endpoints live in its `oauth2_provider` namespace (its metadata
view reverses them there). Only what we use is mounted: no implicit, password,
device or introspection endpoints, and no application-management pages.
"""

from django.contrib.auth.views import LogoutView
from django.urls import include, path
from oauth2_provider import views as toolkit

from memoryhub import oauth_views, token_exchange
from memoryhub.oauth import MCP_READONLY_PATH
from memoryhub.views import agents

authorization_server = [
    path(".well-known/oauth-authorization-server", toolkit.OAuthServerMetadataView.as_view(),
         name="oauth-server-metadata"),
    # RFC 9728: the path form for each resource, and the root form for /mcp.
    path(".well-known/oauth-protected-resource", oauth_views.ProtectedResourceMetadataView.as_view(),
         name="oauth-resource-metadata"),
    path(".well-known/oauth-protected-resource/mcp", oauth_views.ProtectedResourceMetadataView.as_view(),
         name="oauth-resource-metadata-mcp"),
    path(".well-known/oauth-protected-resource/mcp/readonly",
         oauth_views.ProtectedResourceMetadataView.as_view(path=MCP_READONLY_PATH),
         name="oauth-resource-metadata-mcp-readonly"),
    path("o/authorize/", oauth_views.AuthorizeView.as_view(), name="authorize"),
    path("o/token/", toolkit.TokenView.as_view(), name="token"),
    # RFC 8693 token exchange for edge processes (memoryhub.token_exchange).
    path("o/token/exchange/", token_exchange.token_exchange, name="token-exchange"),
    path("o/revoke_token/", toolkit.RevokeTokenView.as_view(), name="revoke-token"),
    path("o/register/", oauth_views.RegisterClientView.as_view(), name="dcr-register"),
    path("o/register/<str:client_id>/", oauth_views.ManageRegisteredClientView.as_view(),
         name="dcr-register-management"),
]

urlpatterns = [
    path("", include((authorization_server, "oauth2_provider"))),
    path("accounts/login/", oauth_views.login, name="login"),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
    path("account/apps/", oauth_views.connected_apps_page, name="connected_apps"),
    path("account/apps/<int:application_id>/disconnect/", oauth_views.disconnect_app, name="disconnect_app"),
    path("workspace/agents/", agents.agent_list, name="agent_list"),
    path("workspace/agents/add/", agents.agent_add, name="agent_add"),
    path("workspace/agents/<slug:name>/rotate/", agents.agent_rotate, name="agent_rotate"),
    path("workspace/agents/<slug:name>/revoke/", agents.agent_remove, name="agent_revoke"),
]
