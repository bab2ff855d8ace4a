"""The workspace overview, and the administration pages' navigation."""

from __future__ import annotations

import re

import pytest

from memoryhub.models import Source
from memoryhub.services.members import member_deactivate
from memoryhub.services.sources import source_revoke, source_set_enabled
from tests.conftest import signed_in
from tests.pages.helpers import propose


def test_it_summarises_my_workspace(people):
    propose(people.triage_bot, "A fact to review.")
    text = signed_in(people.ada).get("/workspace/").content.decode()
    assert "Acme Inc." in text and "4 members" in text and "1 proposal pending" in text
    assert "3 collections" in text and "2 sources" in text
    assert "/workspace/agents/" in text


def test_it_counts_only_who_can_sign_in_and_what_still_feeds(people):
    caller = people.caller(people.ada)
    member_deactivate(caller=caller, user_id=people.bruno.pk)
    names = [source.agent.name for source in Source.objects.filter(tenant=people.acme)]
    source_set_enabled(caller=caller, name=names[0], enabled=False)
    text = signed_in(people.ada).get("/workspace/").content.decode()
    assert "3 members (1 more deactivated or removed)" in text
    assert "1 source feeding shared memory, 1 disabled." in text
    source_revoke(caller=caller, name=names[1])
    text = signed_in(people.ada).get("/workspace/").content.decode()
    assert "0 sources feeding shared memory, 1 disabled." in text


def test_it_validates_ownership(people):
    assert signed_in(people.bruno).get("/workspace/").status_code == 403
    text = signed_in(people.olga).get("/workspace/").content.decode()
    assert "Globex" in text and "Acme" not in text.split("<main")[1]


@pytest.mark.parametrize(("path", "label"), [
    ("/workspace/", "Overview"),
    ("/workspace/members/", "Members &amp; roles"),
    ("/workspace/collections/", "Collections"),
    ("/workspace/access/", "Access rules"),
    ("/workspace/agents/", "Agents"),
    ("/workspace/sources/", "Sources"),
    ("/workspace/settings/", "Settings"),
])
def test_the_navigation_marks_the_page_one_is_on(people, path, label):
    text = signed_in(people.ada).get(path).content.decode()
    nav = text.split('aria-label="Workspace administration"')[1].split("</nav>")[0]
    assert re.findall(r'aria-current="page">([^<]+)<', nav) == [label]
