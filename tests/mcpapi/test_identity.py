"""No tool may take an identity argument; the server refuses to start if one does."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpapi import schemas, tools
from mcpapi.catalog import CATALOG, ToolSpec
from mcpapi.connection import ENDPOINTS
from mcpapi.identity import (
    IDENTITY_FIELD_NAMES,
    IdentityFieldError,
    assert_no_identity_fields,
    identity_fields_in_schema,
    is_identity_field,
)
from mcpapi.server import build_server

from .fakes import MemoryStore


def _offending(name: str, input_schema: dict[str, Any]) -> ToolSpec:
    return ToolSpec(
        name=name,
        title=name,
        description="offending",
        input_schema=input_schema,
        output_schema=schemas.WHOAMI_OUTPUT,
        handler=tools.whoami,
        read_only=True,
    )


def test_the_registered_tools_take_no_identity() -> None:
    assert_no_identity_fields(spec.tool for spec in CATALOG)
    for spec in CATALOG:
        assert identity_fields_in_schema(spec.input_schema) == []


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_startup_fails_when_a_tool_takes_an_identity(endpoint: str) -> None:
    offending = _offending(
        "memory_export",
        {"type": "object", "properties": {"onBehalfOf": {"type": "string"}}},
    )
    with pytest.raises(
        IdentityFieldError, match="memory_export: /properties/onBehalfOf"
    ):
        build_server(
            client_factory=MemoryStore().factory,
            endpoint=endpoint,
            tools=[*CATALOG, offending],
        )  # type: ignore[arg-type]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_startup_fails_when_a_tool_has_no_entry_in_the_scope_table(endpoint: str) -> None:
    unscoped = _offending("memory_export", {"type": "object", "properties": {"since": {"type": "string"}}})
    with pytest.raises(ValueError, match="memory_export"):
        build_server(client_factory=MemoryStore().factory, endpoint=endpoint, tools=[*CATALOG, unscoped])


def test_the_check_works_on_any_sdk_tool() -> None:
    tool = types.Tool(
        name="t",
        input_schema={
            "type": "object",
            "properties": {"tenant_id": {"type": "string"}},
        },
    )
    with pytest.raises(IdentityFieldError, match="tenant_id"):
        assert_no_identity_fields([tool])


NESTED = [
    {
        "type": "object",
        "properties": {
            "filter": {"type": "object", "properties": {"user": {"type": "string"}}}
        },
    },
    {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"properties": {"Actor": {}}}}
        },
    },
    {"type": "object", "anyOf": [{"properties": {"impersonate": {}}}]},
    {"type": "object", "allOf": [{"oneOf": [{"properties": {"acting-as": {}}}]}]},
    {
        "type": "object",
        "$defs": {"Who": {"properties": {"workspace": {}}}},
        "properties": {"w": {"$ref": "#/$defs/Who"}},
    },
    {"type": "object", "additionalProperties": {"properties": {"owner_id": {}}}},
    {"type": "object", "patternProperties": {"^role$": {}}},
    {"type": "object", "required": ["asUser"]},
    {"type": "object", "if": {"properties": {"principal": {}}}, "then": {}},
    {
        "type": "object",
        "properties": {"x": {"prefixItems": [{"properties": {"SUB": {}}}]}},
    },
    {"type": "object", "dependentSchemas": {"q": {"properties": {"author": {}}}}},
]


@pytest.mark.parametrize("schema", NESTED)
def test_it_finds_identity_fields_anywhere(schema: dict[str, Any]) -> None:
    assert identity_fields_in_schema(schema) != []


def test_it_ignores_data_and_definition_names() -> None:
    schema = {
        "type": "object",
        "properties": {
            "kind": {
                "enum": ["user", "agent"],
                "default": "user",
                "description": "the user",
            }
        },
        "$defs": {"User": {"type": "string"}},
    }
    assert identity_fields_in_schema(schema) == []


@pytest.mark.parametrize(
    "name",
    [
        "user",
        "User_ID",
        "userId",
        "user-ids",
        "tenant",
        "tenant_id",
        "workspace",
        "role",
        "roles",
        "sub",
        "subject",
        "on_behalf_of",
        "onBehalfOf",
        "principal",
        "impersonate",
        "as_user",
        "author",
        "Owners",
        "actor",
        "acting_as",
        "actingAs",
        "username",
    ],
)
def test_it_recognises_spellings(name: str) -> None:
    assert is_identity_field(name)


@pytest.mark.parametrize(
    "name",
    [
        "query",
        "limit",
        "as_of",
        "created_after",
        "created_before",
        "resource_ids",
        "agents",
        "task",
        "task_tags",
        "content",
        "session_id",
        "resource",
        "idempotency_key",
        "receipt_id",
        "status",
        "subtask",
    ],
)
def test_it_leaves_the_contract_fields_alone(name: str) -> None:
    assert not is_identity_field(name)


def _respell(name: str, separators: list[str], upper: list[bool]) -> str:
    out = []
    for index, char in enumerate(name):
        out.append(char.upper() if upper[index % len(upper)] else char)
        if index < len(name) - 1:
            out.append(separators[index % len(separators)])
    return "".join(out)


@given(
    name=st.sampled_from(sorted(IDENTITY_FIELD_NAMES)),
    separators=st.lists(
        st.sampled_from(["", "", "", "_", "-"]), min_size=1, max_size=5
    ),
    upper=st.lists(st.booleans(), min_size=1, max_size=5),
    suffix=st.sampled_from(["", "_id", "Id", "-ids", "s"]),
)
def test_any_respelling_is_caught(
    name: str, separators: list[str], upper: list[bool], suffix: str
) -> None:
    field = _respell(name, separators, upper) + suffix
    assert identity_fields_in_schema(
        {"type": "object", "properties": {field: {"type": "string"}}}
    )
