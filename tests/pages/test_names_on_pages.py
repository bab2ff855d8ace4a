"""A name typed on the admin pages is decided where the commands' and the REST
API's are (services.arguments.checked_name): the same names are stored the
same way, and the same ones are refused with the same words."""

from __future__ import annotations

import html
import re

import pytest

from memoryhub.models import Agent, Collection, Role, Source
from tests.conftest import signed_in

# Each creating page: its path, the rest of its form, and where what it creates is found.
PAGES = {
    "role": ("/workspace/roles/add/", {}, lambda tenant, name: Role.objects.filter(tenant=tenant, name=name)),
    "collection": ("/workspace/collections/add/", {},
                   lambda tenant, name: Collection.objects.filter(tenant=tenant, name=name)),
    "source": ("/workspace/sources/add/", {"kind": "documents"},
               lambda tenant, name: Source.objects.filter(tenant=tenant, agent__name=name)),
    "agent": ("/workspace/agents/add/", {"scopes": ["memory.read"]},
              lambda tenant, name: Agent.objects.filter(tenant=tenant, name=name, kind=Agent.Kind.ASSISTANT)),
}


def _counts(tenant) -> tuple[int, ...]:  # type: ignore[no-untyped-def]
    return (Role.objects.filter(tenant=tenant).count(), Collection.objects.filter(tenant=tenant).count(),
            Agent.objects.filter(tenant=tenant).count(), Source.objects.filter(tenant=tenant).count())


@pytest.mark.parametrize("page", list(PAGES))
def test_a_name_with_spaces_and_capitals_is_stored_as_the_api_stores_it(people, page):
    path, rest, found = PAGES[page]
    response = signed_in(people.ada).post(path, {"name": "  Night Shift  ", **rest})
    assert response.status_code in (200, 302), response.content.decode()[:500]
    assert found(people.acme, "night-shift").exists()


@pytest.mark.parametrize("page", list(PAGES))
@pytest.mark.parametrize("name", ["<script>x</script>", "\x1b[31mred\x1b[0m", "\u0435ngineering", "on call!"])
def test_a_name_that_would_lose_characters_is_refused_with_the_services_words(people, page, name):
    path, rest, _ = PAGES[page]
    before = _counts(people.acme)
    response = signed_in(people.ada).post(path, {"name": name, **rest})
    assert response.status_code == 400
    # The refusal names the name escaped (the field keeps what was typed, for mending).
    (refusal,) = re.findall(r'<p class="field-error" role="alert">(.*?)</p>', response.content.decode(), re.S)
    refusal = html.unescape(refusal)
    assert "needs a name of letters, digits, hyphens or underscores" in refusal, refusal
    assert refusal.isascii() and "\x1b" not in refusal, refusal
    assert _counts(people.acme) == before


@pytest.mark.parametrize("page", list(PAGES))
def test_a_names_length_is_the_services_limit(people, page):
    """64 characters are kept; one more is refused with the service's message."""
    path, rest, found = PAGES[page]
    admin = signed_in(people.ada)
    longest = "n" * 63 + "a"
    assert admin.post(path, {"name": longest, **rest}).status_code in (200, 302)
    assert found(people.acme, longest).exists()
    before = _counts(people.acme)
    refused = admin.post(path, {"name": "n" * 64 + "b", **rest})
    assert refused.status_code == 400
    assert "name is 65 characters long; the limit is 64." in html.unescape(refused.content.decode())
    assert _counts(people.acme) == before
