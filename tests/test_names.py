"""services.arguments.checked_name: the one rule for the names of workspaces,
roles, collections, agents and sources, whichever interface they come from."""

from __future__ import annotations

import pytest

from memoryhub.errors import InvalidArgument
from memoryhub.services.arguments import checked_name


@pytest.mark.parametrize(("given", "stored"), [
    ("engineering", "engineering"), ("ENGINEERING", "engineering"), ("on-call", "on-call"), ("a_b", "a_b"),
    ("Run Books", "run-books"), ("  a   b ", "a-b"), ("a - b", "a-b"), ("x" * 64, "x" * 64),
])
def test_a_slug_is_stored_in_lower_case_with_spaces_as_hyphens(given, stored):
    assert checked_name(given, field="name", max_chars=64, what="A role") == stored


@pytest.mark.parametrize(("given", "could"), [
    ("<script>x</script>", "scriptxscript"), ("\x1b[31mred\x1b[0m", "31mred0m"), ("\u0435ngineering", "ngineering"),
    ("\u00c4ngel", "angel"), ("x!!", "x"), ("-x", "x"), ("x_", "x"), ("_x", "x"), ("a\u202eb", "ab"), ("\u2603", None),
    ("run\x1fbooks", "run-books"), ("run\tbooks", "run-books"), ("run\u00a0books", "run-books"),
    ("run\u3000books", "run-books"), ("\u212aate", "kate"),
])
def test_a_name_that_would_lose_characters_is_refused(given, could):
    with pytest.raises(InvalidArgument) as refused:
        checked_name(given, field="name", max_chars=64, what="A role")
    message = str(refused.value.message)
    assert refused.value.field == "name" and message.isascii()
    assert (f"could be '{could}'" in message) if could else ("could be" not in message)


@pytest.mark.parametrize("given", ["", "   ", None, "x" * 65, "nul\x00"])
def test_empty_too_long_or_unstorable_is_refused(given):
    with pytest.raises(InvalidArgument):
        checked_name(given, field="name", max_chars=64, what="A role")


@pytest.mark.parametrize(("given", "mixed"), [
    ("\u0430da", ["LATIN", "CYRILLIC"]), ("ad\u03bf", ["LATIN", "GREEK"]), ("\u0430\u03b1", ["CYRILLIC", "GREEK"]),
    ("ada", []), ("jos\u00e9", []), ("\u0430\u043d\u044f", []), ("\u03b1\u03bb\u03b5\u03be", []), ("ada.2", []),
    ("taro\u5c71\u7530", []), ("\u5c71\u7530\u3072\u308d", []),
])
def test_look_alike_scripts_are_found_only_when_mixed(given, mixed):
    from memoryhub.services.arguments import look_alike_scripts

    assert look_alike_scripts(given) == mixed



@pytest.mark.parametrize(("given", "why"), [
    ("\u0430da", "mixes Latin and Cyrillic letters"), ("\uff41da", "would read as 'ada'"),
    ("\U0001d5bada", "would read as 'ada'"), ("\u212aate", "would read as 'Kate'"), ("\u2113ee", "would read as 'lee'"),
    ("\u2170van", "would read as 'ivan'"), ("\u3164ada", "stand for others"),
])
def test_a_name_that_passes_for_another_is_found(given, why):
    from memoryhub.services.arguments import passes_for_another

    assert why in (passes_for_another(given) or "")


@pytest.mark.parametrize("given", ["ada", "jos\u00e9", "stra\u00dfe", "\u5c71\u7530", "ada.2", "\u0430\u043d\u044f"])
def test_an_ordinary_name_does_not(given):
    from memoryhub.services.arguments import passes_for_another

    assert passes_for_another(given) is None


@pytest.mark.parametrize(("given", "reads"), [
    ("\u0430\u0501\u0430", "ada"), ("\u0430\u0441\u0435", "ace"), ("ADA", "ada"), ("\u0392\u0395\u03a4\u0391", "beta"),
    ("jos\u00e9", "jos\u00e9"), ("\u0430\u043d\u044f", "a\u043d\u044f"),
])
def test_a_names_skeleton_reads_what_it_shows(given, reads):
    from memoryhub.services.arguments import name_skeleton

    assert name_skeleton(given) == reads


def test_a_login_name_is_looked_up_as_it_is_stored(people):
    """A decomposed accent finds the person stored composed, so adding them
    again is the same person, not a conflict."""
    from memoryhub.services.members import member_add, member_ensure, member_get

    admin = people.caller(people.ada)
    member_add(caller=admin, username="jos\u00e9", password=None)
    assert member_get(caller=admin, username="jose\u0301").user.username == "jos\u00e9"
    assert member_ensure(caller=admin, username="jose\u0301", password=None).user.username == "jos\u00e9"


@pytest.mark.django_db(transaction=True)
def test_two_names_that_read_the_same_added_at_once_are_not_both_members(live_people):
    """The names "ace" and "\u0430\u0441\u0435" (all Cyrillic) differ, so no unique index
    keeps both out: the second add waits for the first to commit, then finds
    that its name reads as a member's.
    """
    from memoryhub.errors import Conflict
    from memoryhub.models import User
    from memoryhub.services.members import member_add
    from tests.support.concurrency import one_held_open_then_another

    admin = live_people.caller(live_people.ada)
    first, second = one_held_open_then_another(
        lambda: member_add(caller=admin, username="ace", password=None),
        lambda: member_add(caller=admin, username="\u0430\u0441\u0435", password=None),
    )
    assert isinstance(first[0], User) and first[0].username == "ace"
    assert isinstance(second[0], Conflict) and "reads as 'ace'" in second[0].message, second
    assert list(User.objects.filter(tenant=live_people.acme, username__in=["ace", "\u0430\u0441\u0435"])
                .values_list("username", flat=True)) == ["ace"]


@pytest.mark.parametrize("name", ["bruno", "BRUNO", "\u0430\u0501\u0430"])
def test_a_taken_name_is_refused_before_its_password_is_judged(people, name):
    """Adding a member again says the name is taken (or reads as a member's),
    not that the password is too weak: the name is checked before the password
    is validated and hashed, and checked again in the workspace's turn."""
    from memoryhub.errors import Conflict, InvalidArgument
    from memoryhub.models import User
    from memoryhub.services.members import member_add

    admin = people.caller(people.ada)
    before = User.objects.count()
    with pytest.raises((Conflict, InvalidArgument)) as refused:
        member_add(caller=admin, username=name, password="x")
    assert refused.value.field == "username", refused.value.message
    assert "password" not in refused.value.message
    assert User.objects.count() == before
    with pytest.raises(InvalidArgument) as weak:  # a free name: the password is judged
        member_add(caller=admin, username="newcomer", password="x")
    assert weak.value.field == "password"
