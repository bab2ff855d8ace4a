"""The official `mcp` client against each deployment (tests/mcpapi/conftest.py), at every accepted revision."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError

from mcpapi.connection import FULL_ENDPOINT, READONLY_ENDPOINT
from tests.support.deployments import McpDeployment
from tests.support.mcp_client import connect

from .live import RunningServer

pytestmark = pytest.mark.anyio

ALL_TOOLS = ["memory_receipt", "memory_search", "memory_write", "whoami"]






CONNECTIONS = [
    ("user", FULL_ENDPOINT, ALL_TOOLS),
    ("user", READONLY_ENDPOINT, ["memory_receipt", "memory_search", "whoami"]),
    ("agent", FULL_ENDPOINT, ["memory_search", "memory_write", "whoami"]),
    ("agent", READONLY_ENDPOINT, ["memory_search", "whoami"]),
]


@pytest.mark.parametrize(("kind", "endpoint", "expected"), CONNECTIONS)
async def test_it_lists_tools_per_connection(
    deployment: McpDeployment,
    revision: str,
    kind: str,
    endpoint: str,
    expected: list[str],
) -> None:
    token = deployment.token(kind=kind, endpoint=endpoint)  # type: ignore[arg-type]
    async with connect(deployment.url(endpoint), token, revision) as client:  # type: ignore[arg-type]
        listed = await client.list_tools()
        whoami = await client.call_tool("whoami", {})
    assert sorted(tool.name for tool in listed.tools) == expected
    assert whoami.structured_content is not None
    assert whoami.structured_content["tools_available"] == expected


async def test_it_lists_a_tool_the_token_lacks_the_scope_for(
    deployment: McpDeployment, revision: str
) -> None:
    token = deployment.token(scopes=("memory.read",))
    async with connect(deployment.url(), token, revision) as client:
        listed = await client.list_tools()
    assert sorted(tool.name for tool in listed.tools) == ALL_TOOLS


async def test_listed_schemas_carry_the_limits(
    deployment: McpDeployment, revision: str
) -> None:
    async with connect(deployment.url(), deployment.token(), revision) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    search = tools["memory_search"].input_schema["properties"]
    assert search["query"]["maxLength"] == 2000 and search["query"]["minLength"] == 1
    assert (
        search["limit"]["minimum"],
        search["limit"]["maximum"],
        search["limit"]["default"],
    ) == (1, 50, 10)
    assert search["as_of"]["format"] == "date-time"
    assert search["resource_ids"]["maxItems"] == 32
    assert search["agents"]["maxItems"] == 16
    assert search["task"]["maxLength"] == 200
    assert search["task_tags"]["maxItems"] == 8
    assert tools["memory_search"].input_schema["required"] == ["query"]
    write = tools["memory_write"].input_schema["properties"]
    assert write["content"]["maxLength"] == 32768
    assert write["session_id"]["maxLength"] == 128
    assert write["resource"]["maxLength"] == 512
    assert "idempotency_key" in write
    assert tools["memory_receipt"].input_schema["required"] == ["receipt_id"]
    assert tools["whoami"].input_schema["properties"] == {}
    assert all(tool.description and tool.output_schema for tool in tools.values())
    assert set(tools["memory_search"].output_schema["properties"]) >= {  # type: ignore[index]
        "fragments",
        "receipt_id",
        "as_of",
        "abstained",
        "truncated",
        "notice",
    }


async def test_it_calls_each_tool(deployment: McpDeployment, revision: str) -> None:
    token = deployment.token(
        scopes=("memory.read", "memory.write", "memory.audit", "openid")
    )
    async with connect(deployment.url(), token, revision) as client:
        written = await client.call_tool(
            "memory_write", {"content": "The release train leaves on Tuesdays"}
        )
        found = await client.call_tool("memory_search", {"query": "release train"})
        assert found.structured_content is not None
        receipt = await client.call_tool(
            "memory_receipt", {"receipt_id": found.structured_content["receipt_id"]}
        )
        whoami = await client.call_tool("whoami", {})

    assert not written.is_error and written.structured_content is not None
    assert written.structured_content["outcome"] == "Stored 1 new fact."
    assert not found.is_error
    fragment_id = written.structured_content["results"][0]["fragment_id"]
    assert [f["id"] for f in found.structured_content["fragments"]] == [fragment_id]
    assert found.content[0].type == "text" and fragment_id in found.content[0].text
    assert not receipt.is_error and receipt.structured_content is not None
    assert receipt.structured_content["served_then"] == [fragment_id]
    assert whoami.structured_content is not None
    assert whoami.structured_content["principal_kind"] == "user"
    assert whoami.structured_content["scopes"] == [
        "memory.audit",
        "memory.read",
        "memory.write",
    ]
    assert whoami.structured_content["read_pool_ready"] == "ready"
    assert whoami.structured_content["tenant"] == deployment.identity(token)[1]


async def test_a_dropped_write_is_an_ordinary_result(
    deployment: McpDeployment, revision: str
) -> None:
    async with connect(deployment.url(), deployment.token(), revision) as client:
        result = await client.call_tool(
            "memory_write", {"content": "db password=hunter2"}
        )
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["dropped"] == 1
    assert result.structured_content["results"][0]["reason"] == "privacy_drop"


async def test_an_agent_write_is_parked_for_review(
    deployment: McpDeployment, revision: str
) -> None:
    async with connect(
        deployment.url(), deployment.token(kind="agent"), revision
    ) as client:
        result = await client.call_tool(
            "memory_write", {"content": "Build 42 is green"}
        )
    assert result.structured_content is not None
    assert result.structured_content["review_state"] == "pending"


async def test_write_is_an_unknown_tool_on_the_readonly_endpoint(
    deployment: McpDeployment, revision: str
) -> None:
    token = deployment.token(endpoint=READONLY_ENDPOINT)
    async with connect(deployment.url(READONLY_ENDPOINT), token, revision) as client:
        with pytest.raises(MCPError, match="Unknown tool: memory_write"):
            await client.call_tool("memory_write", {"content": "x"})


async def test_receipt_is_an_unknown_tool_for_agents(
    deployment: McpDeployment, revision: str
) -> None:
    async with connect(
        deployment.url(), deployment.token(kind="agent"), revision
    ) as client:
        with pytest.raises(MCPError, match="Unknown tool: memory_receipt"):
            await client.call_tool("memory_receipt", {"receipt_id": "rcpt-1"})


async def test_a_call_without_the_scope_gets_a_scope_challenge(
    deployment: McpDeployment, revision: str
) -> None:
    async with connect(
        deployment.url(), deployment.token(scopes=("memory.read",)), revision
    ) as client:
        with pytest.raises(MCPError, match="insufficient_scope"):
            await client.call_tool("memory_write", {"content": "x"})


async def test_it_validates_receipt_ownership(
    deployment: McpDeployment, revision: str
) -> None:
    async with connect(deployment.url(), deployment.token(), revision) as owner:
        search = await owner.call_tool("memory_search", {"query": "anything"})
    assert search.structured_content is not None
    async with connect(deployment.url(), deployment.token(), revision) as outsider:
        result = await outsider.call_tool(
            "memory_receipt", {"receipt_id": search.structured_content["receipt_id"]}
        )
    assert result.is_error
    # Another person's receipt answers like an id that does not exist.
    assert result.content[0].text == (  # type: ignore[union-attr]
        "No receipt with this id is yours to replay; you can reopen only receipts of your own reads. (not_found)"
    )


async def test_a_failing_client_never_leaks_internals(
    mcp_server: RunningServer, revision: str
) -> None:
    async with connect(mcp_server.url(), mcp_server.token(), revision) as client:
        failed = await client.call_tool("memory_search", {"query": "__explode__"})
        malformed = await client.call_tool("memory_search", {"query": "__malformed__"})
    assert failed.is_error and malformed.is_error
    text = failed.content[0].text  # type: ignore[union-attr]
    assert "secret internals" not in text and "Traceback" not in text
    assert "malformed result" in malformed.content[0].text  # type: ignore[union-attr]
