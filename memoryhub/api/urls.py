from django.urls import path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import AllowAny

from memoryhub.api import views

urlpatterns = [
    path("ingest/documents", views.DocumentUpsertView.as_view(), name="ingest-document-upsert"),
    # <path:> because resource ids may contain slashes (clients percent-encode the rest).
    path("ingest/documents/<path:resource_id>", views.DocumentView.as_view(), name="ingest-document"),
    path("ingest/status", views.ProgressView.as_view(), name="ingest-progress"),
    path(
        "schema",
        SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[AllowAny]),
        name="api-schema",
    ),
]
