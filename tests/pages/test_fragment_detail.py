"""A fragment's page: its provenance and its history."""

from __future__ import annotations

from memoryhub.models import Fragment
from tests.conftest import signed_in
from tests.pages.helpers import remember, share


def test_it_shows_provenance_of_my_own_fact(people):
    out = remember(people.bruno, "The deploy freeze starts on Friday.", session_id="chat-42",
                   resource="https://wiki.acme.test/freeze")
    fragment_id = out.results[0].fragment_id
    response = signed_in(people.bruno).get(f"/memory/{fragment_id}/")
    assert response.status_code == 200
    text = response.content.decode()
    assert "The deploy freeze starts on Friday." in text
    assert "chat-42" in text and "https://wiki.acme.test/freeze" in text
    assert "You (private)" in text and "Forget this" in text


def test_it_shows_what_a_fact_replaced(people):
    first = remember(people.bruno, "The standup is at 9:30.").results[0].fragment_id
    second = remember(people.bruno, "The standup is at 10:00.").results[0]
    assert second.operation == "superseded"
    client = signed_in(people.bruno)
    assert "The standup is at 9:30." in client.get(f"/memory/{second.fragment_id}/").content.decode()
    old_page = client.get(f"/memory/{first}/").content.decode()
    assert "Superseded" in old_page and "Replaced by" in old_page
    assert "Forget this" not in old_page


def test_it_shows_shared_memory_the_person_may_read(people):
    fragment = share(people, "Rotate the on-call pager every Monday.")
    text = signed_in(people.bruno).get(f"/memory/{fragment.pk}/").content.decode()
    assert "Rotate the on-call pager" in text and "Collection runbooks" in text and "wiki" in text
    assert "Forget this" not in text


def test_it_validates_ownership(people):
    mine = remember(people.bruno, "My locker code is in the blue notebook.").results[0].fragment_id
    sales = share(people, "The Initech deal closes in June.", collection="accounts")
    # A teammate with the same roles, a member with other roles, a workspace admin and another
    # workspace's admin all get 404.
    assert signed_in(people.cleo).get(f"/memory/{mine}/").status_code == 404
    assert signed_in(people.carol).get(f"/memory/{mine}/").status_code == 404
    assert signed_in(people.ada).get(f"/memory/{mine}/").status_code == 404
    assert signed_in(people.olga).get(f"/memory/{mine}/").status_code == 404
    assert signed_in(people.bruno).get(f"/memory/{sales.pk}/").status_code == 404


def test_an_unknown_id_is_a_404(people):
    assert signed_in(people.bruno).get("/memory/00000000-0000-0000-0000-000000000000/").status_code == 404
    assert Fragment.objects.count() == 0


def test_it_says_what_confidence_and_the_times_mean(people):
    fragment_id = remember(people.bruno, "The deploy freeze starts on Friday.").results[0].fragment_id
    text = signed_in(people.bruno).get(f"/memory/{fragment_id}/").content.decode()
    assert "How sure the writer was" in text and "how closely a fact matched one search" in text
    assert "When it entered memory" in text and "<code>as_of</code>" in text
