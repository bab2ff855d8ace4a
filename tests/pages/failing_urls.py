"""The project's URLconf plus views that fail, for the tests of the error pages.
Django reads handler500 and its kin from the root URLconf, so they are the project's."""

from django.http import HttpRequest, HttpResponse
from django.urls import path

from memoryhub.urls import handler403, handler404, handler500
from memoryhub.urls import urlpatterns as project_urls


class Broken(Exception):
    """A bug, as far as the handlers can tell."""


def broken_page(request: HttpRequest) -> HttpResponse:
    raise Broken("a page with a bug")


def broken_api(request: HttpRequest) -> HttpResponse:
    raise Broken("an API view with a bug")


urlpatterns = [
    path("broken/", broken_page),
    path("api/broken/", broken_api),
    *project_urls,
]

__all__ = ["handler403", "handler404", "handler500", "urlpatterns"]
