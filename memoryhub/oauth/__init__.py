"""memoryhub's OAuth 2.1 authorisation server: django-oauth-toolkit extended
through its seams (validator, server class, scopes backend, templates), the
pages around it (sign-in, consent), token verification for the resources we
serve, and the RFC 8693 exchange of the edge deployment. Who may hold which
token is memoryhub.access's."""
