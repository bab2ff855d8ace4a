from django.contrib import admin
from django.urls import include, path

from memoryhub.views import health

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("reviews/", include("reviews.urls")),
    # OAuth: discovery, /o/…, sign-in, connected apps, workspace agents.
    path("", include("memoryhub.oauth_urls")),
]
