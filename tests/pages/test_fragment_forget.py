"""Forget: a person retires one of their own facts now; history stays."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from memoryhub.models import Fragment
from tests.conftest import signed_in
from tests.pages.helpers import remember, search, share


def _fact(people, text="My bike is the red one by the door."):
    return remember(people.bruno, text).results[0].fragment_id


def test_it_asks_first(people):
    fragment_id = _fact(people)
    response = signed_in(people.bruno).get(f"/memory/{fragment_id}/forget/")
    assert response.status_code == 200
    assert b"Forget this fact?" in response.content
    assert Fragment.objects.get(pk=fragment_id).retired_at is None


def test_it_retires_the_fact_now_and_keeps_the_past(people):
    fragment_id = _fact(people)
    before = timezone.now()
    response = signed_in(people.bruno).post(f"/memory/{fragment_id}/forget/")
    assert response.status_code == 302 and response["Location"] == "/memory/"
    fragment = Fragment.objects.get(pk=fragment_id)
    assert fragment.retired_reason == Fragment.Retired.FORGOTTEN
    assert fragment.retired_at >= before
    assert search(people.bruno, "red bike by the door").hits == []
    past = search(people.bruno, "red bike by the door", as_of=before - dt.timedelta(microseconds=1))
    assert past.served_ids == [fragment_id]


def test_it_validates_ownership(people):
    fragment_id = _fact(people)
    for user in (people.ada, people.cleo, people.carol, people.olga):
        assert signed_in(user).post(f"/memory/{fragment_id}/forget/").status_code == 404
    assert signed_in(people.nomad).post(f"/memory/{fragment_id}/forget/").status_code == 403
    assert Fragment.objects.get(pk=fragment_id).retired_at is None


def test_shared_memory_cannot_be_forgotten_here(people):
    fragment = share(people, "Page the database team for replication lag.")
    assert signed_in(people.bruno).post(f"/memory/{fragment.pk}/forget/").status_code == 404
    assert Fragment.objects.get(pk=fragment.pk).retired_at is None


def test_forgetting_twice_says_so(people):
    fragment_id = _fact(people)
    client = signed_in(people.bruno)
    client.post(f"/memory/{fragment_id}/forget/")
    retired_at = Fragment.objects.get(pk=fragment_id).retired_at
    response = client.post(f"/memory/{fragment_id}/forget/", follow=True)
    assert b"already retired" in response.content
    assert Fragment.objects.get(pk=fragment_id).retired_at == retired_at


def test_it_needs_csrf(people):
    from django.test import Client

    fragment_id = _fact(people)
    client = Client(enforce_csrf_checks=True)
    client.force_login(people.bruno)
    assert client.post(f"/memory/{fragment_id}/forget/").status_code == 403
    assert Fragment.objects.get(pk=fragment_id).retired_at is None
