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
