"""URLs of the authorisation server and the pages around it.

The toolkit's endpoints live in its `oauth2_provider` namespace (its metadata
view reverses them there). Only what we use is mounted: no implicit, password,
device or introspection endpoints, and no application-management pages.
"""

from django.contrib.auth.views import LogoutView
from django.urls import include, path
from oauth2_provider import views as toolkit

from memoryhub.oauth import exchange
from memoryhub.oauth import views as oauth_views
from memoryhub.oauth.policy import ADMIN_API_PATH, MCP_READONLY_PATH

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
    path(".well-known/oauth-protected-resource/api/admin",
         oauth_views.ProtectedResourceMetadataView.as_view(path=ADMIN_API_PATH),
         name="oauth-resource-metadata-admin-api"),
    path("o/authorize/", oauth_views.AuthorizeView.as_view(), name="authorize"),
    path("o/token/", oauth_views.TokenView.as_view(), name="token"),
    # RFC 8693 token exchange for edge processes (memoryhub.oauth.exchange).
    path("o/token/exchange/", exchange.token_exchange, name="token-exchange"),
    path("o/revoke_token/", toolkit.RevokeTokenView.as_view(), name="revoke-token"),
    path("o/register/", oauth_views.RegisterClientView.as_view(), name="dcr-register"),
    path("o/register/<str:client_id>/", oauth_views.ManageRegisteredClientView.as_view(),
         name="dcr-register-management"),
]

urlpatterns = [
    path("", include((authorization_server, "oauth2_provider"))),
    path("accounts/login/", oauth_views.login, name="login"),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
]
