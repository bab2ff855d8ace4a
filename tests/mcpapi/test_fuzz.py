"""Malformed JSON-RPC at POST /mcp with a valid token: always answered, never a crash, nothing written.

Every fuzzed request is invalid by construction (bad bytes, a broken envelope, wrong
parameter types, an argument past its bound, ...) and is sent with a fresh, valid token
at each protocol revision the server accepts. For each one:

- the status is below 500 and the body holds no Python traceback;
- the answer arrives within the client's timeout (an httpx2 timeout raises, failing the test);
- the body is a JSON-RPC error, or a tool result with `isError: true`; only a message that
  is owed no answer (a notification, a posted response) may get an empty `202`;
- the memory service saw no write from that caller (`WriteLedger`).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpapi import schemas
from tests.support.deployments import McpDeployment

MODERN = "2026-07-28"
WIRES = (MODERN, "2025-11-25", "2025-06-18")
CLIENT_TIMEOUT = httpx2.Timeout(15.0)
FUZZ = settings(
    max_examples=60,
    deadline=None,
    # function_scoped_fixture: a real deployment's tests are transactional (emptied after the
    # test, not after each example); every example mints a principal of its own.
    suppress_health_check=[
        HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
        HealthCheck.function_scoped_fixture,
    ],
)
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "0"},
}
TOOLS = ("memory_search", "memory_write", "memory_receipt", "whoami")
# Methods that could succeed if a fuzzed name happened to spell one.
KNOWN_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/roots/list_changed",
        "subscriptions/listen",
    }
)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\.py\", line \d+")
_NEST = "__fuzz_nested__"


# --- what is being fuzzed, and how writes are counted ------------------------------------


class WriteLedger(Protocol):
    def writes_by(self, subject: str) -> int:
        """How many writes from `subject` reached memory (a database deployment counts rows)."""
        ...


@dataclass(frozen=True)
class FuzzTarget:
    url: str
    mint: Callable[[str], str]  # subject -> a valid token for a fresh principal
    ledger: WriteLedger
    max_body_bytes: int


@pytest.fixture(scope="module")
def fuzz_target(deployment: McpDeployment) -> FuzzTarget:
    """Each deployment in turn (tests/mcpapi/conftest.py): the fake-backed gateway counts the
    writes its MemoryClient saw; the single-process app and the edge count rows in the test
    database (fragments, proposals, receipts, idempotency records) by the fuzzing principal."""
    return FuzzTarget(
        url=deployment.url(),
        mint=lambda subject: deployment.token(subject=subject),
        ledger=deployment,
        max_body_bytes=deployment.max_body_bytes,
    )


@pytest.fixture(scope="module")
def http() -> Iterator[httpx2.Client]:
    with httpx2.Client(timeout=CLIENT_TIMEOUT) as client:
        yield client


# --- sending and judging -------------------------------------------------------------------


def _header_safe(value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[\x21-\x7e]{1,200}", value) is not None


def headers_for(wire: str, message: Any, token: str, *, routing: bool = True) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": wire,
        "Authorization": f"Bearer {token}",
    }
    if wire == MODERN and routing and isinstance(message, dict):
        method = message.get("method")
        if _header_safe(method):
            headers["Mcp-Method"] = method
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if method == "tools/call" and _header_safe(name):
            headers["Mcp-Name"] = name
    return headers


def encode(message: Any, *, ascii_only: bool = True, nest: int = 0) -> bytes:
    """JSON for `message`. `ascii_only` escapes everything (lone surrogates become `\\udXXX`);
    otherwise text goes out as UTF-8 and a lone surrogate as the bytes no decoder accepts.
    The string `_NEST` is replaced by `nest` levels of arrays."""
    text = json.dumps(message, ensure_ascii=ascii_only)
    if nest:
        text = text.replace(json.dumps(_NEST), "[" * nest + "]" * nest)
    return text.encode("utf-8", "surrogatepass")


def owes_no_answer(message: Any) -> bool:
    """A notification (no `id` at all) or a posted response: `202` and no body is the answer."""
    if not isinstance(message, dict):
        return False
    if "method" not in message and ("result" in message or "error" in message):
        return True
    return "id" not in message and isinstance(message.get("method"), str)


def assert_contained(response: httpx2.Response, message: Any) -> None:
    shown = f"{response.status_code} {response.text[:600]!r}"
    assert response.status_code < 500, shown
    assert not _TRACEBACK.search(response.text), shown
    if response.status_code == 202:
        assert response.content == b"", shown
        assert owes_no_answer(message), f"a message owed an answer got an empty 202: {shown}"
        return
    assert response.headers.get("content-type", "").startswith("application/json"), shown
    payload = response.json()
    assert isinstance(payload, dict) and payload.get("jsonrpc") == "2.0", shown
    if "error" in payload:
        error = payload["error"]
        assert isinstance(error, dict), shown
        assert isinstance(error.get("code"), int) and not isinstance(error["code"], bool), shown
        assert isinstance(error.get("message"), str), shown
        return
    result = payload.get("result")
    assert isinstance(result, dict) and result.get("isError") is True, f"an invalid request succeeded: {shown}"


def send(
    target: FuzzTarget, http: httpx2.Client, wire: str, message: Any, body: bytes, *, routing: bool = True
) -> None:
    """POST `body` as a fresh caller and check the answer and the ledger."""
    subject = f"fuzz-{uuid.uuid4().hex[:16]}"
    token = target.mint(subject)
    response = http.post(target.url, content=body, headers=headers_for(wire, message, token, routing=routing))
    assert_contained(response, message)
    assert target.ledger.writes_by(subject) == 0, f"an invalid request was written: {body[:300]!r}"


# --- strategies ----------------------------------------------------------------------------

# Code points that have broken text handling somewhere: NUL, bidi controls, BOM, line
# separators, astral emoji (and a ZWJ sequence), non-characters, lone and paired surrogates.
ODD_CHARACTERS = [
    "\x00",
    "\x7f",
    "\u200e",
    "\u200f",
    "\u202e",
    "\u2066",
    "\ufeff",
    "\u2028",
    "\U0001f600",
    "\U0001f469\u200d\U0001f469\u200d\U0001f467",
    "\uffff",
    "\U0010ffff",
    "\ud800",
    "\udfff",
    "\udbff\udfff",
    '"',
    "\\",
]
SINGLE_CHARACTERS = st.sampled_from(["x", "é", "\x00", "\u202e", "\U0001f600", "\ud800", "\udc00", "\uffff"])
texts = st.lists(st.one_of(st.characters(), st.sampled_from(ODD_CHARACTERS)), max_size=12).map("".join)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(), texts)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=10,
)
non_strings = json_values.filter(lambda value: not isinstance(value, str))
unknown_methods = texts.filter(lambda method: method not in KNOWN_METHODS)
# Anything but a string or a (non-boolean) integer; integral floats (1.0) included.
bad_ids = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(),
    st.sampled_from([1.0, -0.0, 1e400]),
    st.lists(json_scalars, max_size=2),
    st.dictionaries(texts, json_scalars, max_size=2),
)
DELETE = object()


def base_call(wire: str, tool: str, arguments: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if wire == MODERN:
        params["_meta"] = META
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


VALID_ARGUMENTS: dict[str, dict[str, Any]] = {
    "memory_search": {"query": "fuzz"},
    "memory_write": {"content": "a fact worth keeping"},
    "memory_receipt": {"receipt_id": "rcpt-fuzz"},
}
# (tool, field, bound, kind): kind "chars" for strings, "items" for arrays.
BOUNDS = [
    ("memory_search", "query", schemas.QUERY_MAX_CHARS, "chars"),
    ("memory_search", "task", schemas.TASK_MAX_CHARS, "chars"),
    ("memory_search", "resource_ids", schemas.RESOURCE_IDS_MAX_ITEMS, "items"),
    ("memory_search", "agents", schemas.AGENTS_MAX_ITEMS, "items"),
    ("memory_search", "task_tags", schemas.TASK_TAGS_MAX_ITEMS, "items"),
    ("memory_write", "content", schemas.CONTENT_MAX_CHARS, "chars"),
    ("memory_write", "session_id", schemas.SESSION_ID_MAX_CHARS, "chars"),
    ("memory_write", "resource", schemas.RESOURCE_MAX_CHARS, "chars"),
    ("memory_write", "idempotency_key", schemas.IDEMPOTENCY_KEY_MAX_CHARS, "chars"),
    ("memory_receipt", "receipt_id", schemas.RECEIPT_ID_MAX_CHARS, "chars"),
]
PROPERTIES = {
    "memory_search": set(schemas.SEARCH_INPUT["properties"]),
    "memory_write": set(schemas.WRITE_INPUT["properties"]),
    "memory_receipt": set(schemas.RECEIPT_INPUT["properties"]),
}


@st.composite
def broken_envelopes(draw: st.DrawFn, wire: str) -> dict[str, Any]:
    """A memory_write with valid arguments inside an envelope that is not a valid request."""
    message = base_call(wire, "memory_write", dict(VALID_ARGUMENTS["memory_write"]))
    key = draw(st.sampled_from(["jsonrpc", "id", "method", "params"]))
    replacement = draw(
        {
            "jsonrpc": st.one_of(st.just(DELETE), json_values.filter(lambda value: value != "2.0")),
            "id": st.one_of(st.just(DELETE), bad_ids),
            "method": st.one_of(st.just(DELETE), non_strings, unknown_methods),
            "params": st.one_of(st.just(DELETE), json_values.filter(lambda value: not isinstance(value, dict))),
        }[key]
    )
    if replacement is DELETE:
        del message[key]
    else:
        message[key] = replacement
    return message


@st.composite
def broken_calls(draw: st.DrawFn, wire: str) -> tuple[dict[str, Any], int]:
    """A tools/call whose name, arguments or one argument is invalid; and a nesting depth
    for an unexpected argument (0: none)."""
    tool = draw(st.sampled_from(sorted(VALID_ARGUMENTS)))
    arguments: Any = dict(VALID_ARGUMENTS[tool])
    message = base_call(wire, tool, arguments)
    params = message["params"]
    nest = 0
    how = draw(
        st.sampled_from(
            [
                "name",
                "arguments",
                "missing",
                "wrong_type",
                "unexpected",
                "nested",
                "past_bound",
                "at_bound",
                "limit",
                "date",
            ]
        )
    )
    if how == "name":
        params["name"] = draw(st.one_of(non_strings, texts.filter(lambda name: name not in TOOLS)))
    elif how == "arguments":
        params["arguments"] = draw(json_values.filter(lambda value: not isinstance(value, dict)))
    elif how == "missing":
        params["arguments"] = draw(
            st.dictionaries(texts.filter(lambda k: k not in PROPERTIES[tool]), json_values, max_size=3)
        )
    elif how == "wrong_type":
        required = schemas_required(tool)
        arguments[draw(st.sampled_from(required))] = draw(non_strings)
    elif how in ("unexpected", "nested"):
        key = draw(texts.filter(lambda k: k not in PROPERTIES[tool]))
        if how == "nested":
            arguments[key] = _NEST
            nest = draw(st.integers(min_value=1, max_value=3000))
        else:
            arguments[key] = draw(json_values)
    elif how in ("past_bound", "at_bound"):
        _, field, bound, kind = draw(st.sampled_from([b for b in BOUNDS if b[0] == tool]))
        size = bound + draw(st.integers(1, 2)) if how == "past_bound" else bound - draw(st.integers(0, 1))
        character = draw(SINGLE_CHARACTERS)
        arguments[field] = [character] * size if kind == "items" else character * size
        if how == "at_bound":
            # Within its bound the field is fine, so break the call elsewhere.
            arguments[draw(texts.filter(lambda k: k not in PROPERTIES[tool]))] = True
    elif how == "limit":
        params["name"] = "memory_search"
        params["arguments"] = {
            "query": "fuzz",
            "limit": draw(
                st.one_of(
                    st.integers().filter(lambda n: not schemas.LIMIT_MIN <= n <= schemas.LIMIT_MAX),
                    st.floats().filter(lambda f: not f.is_integer()),
                    st.sampled_from([True, False, None, "10", [10], 1e400, -1e400]),
                )
            ),
        }
    else:  # date
        params["name"] = "memory_search"
        params["arguments"] = {
            "query": "fuzz",
            draw(st.sampled_from(sorted(schemas.DATE_TIME_FIELDS))): draw(
                st.one_of(
                    non_strings,
                    texts.map(lambda text: "x" + text),
                    st.sampled_from(
                        [
                            "2026-02-30T00:00:00Z",
                            "2026-01-01T25:00:00Z",
                            "2026-01-01T00:00:60Z",
                            "2026-01-01T00:00:00",
                            "2026-01-01",
                            "2026-01-01T00:00:00+99:99",
                            "٢٠٢٦-٠١-٠١T00:00:00Z",
                            "2026-01-01T00:00:00Z\x00",
                        ]
                    ),
                )
            ),
        }
    return message, nest


def schemas_required(tool: str) -> list[str]:
    schema = {
        "memory_search": schemas.SEARCH_INPUT,
        "memory_write": schemas.WRITE_INPUT,
        "memory_receipt": schemas.RECEIPT_INPUT,
    }[tool]
    return list(schema["required"])


@st.composite
def unparseable_bodies(draw: st.DrawFn, wire: str) -> bytes:
    """Bytes that are not one JSON object: noise, cut-off JSON, bad UTF-8, non-objects, batches."""
    valid = encode(base_call(wire, "memory_write", dict(VALID_ARGUMENTS["memory_write"])))
    how = draw(st.sampled_from(["noise", "truncated", "bad_utf8", "not_object", "batch"]))
    if how == "noise":
        return draw(st.binary(max_size=300))
    if how == "truncated":
        return valid[: draw(st.integers(0, len(valid) - 1))]
    if how == "bad_utf8":
        at = valid.index(b"a fact")
        junk = draw(
            st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf", b"\x80"])
        )
        return valid[:at] + junk + valid[at:]
    if how == "not_object":
        return encode(draw(json_values.filter(lambda value: not isinstance(value, dict))))
    return b"[" + valid + b"," + valid + b"]"


# --- the fuzz tests ------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
@FUZZ
@given(data=st.data())
def test_unparseable_bodies_get_a_json_rpc_error(
    fuzz_target: FuzzTarget, http: httpx2.Client, wire: str, data: st.DataObject
) -> None:
    body = data.draw(unparseable_bodies(wire))
    send(fuzz_target, http, wire, None, body)


@pytest.mark.parametrize("wire", WIRES)
@FUZZ
@given(data=st.data())
def test_broken_envelopes_are_refused_and_never_written(
    fuzz_target: FuzzTarget, http: httpx2.Client, wire: str, data: st.DataObject
) -> None:
    message = data.draw(broken_envelopes(wire))
    body = encode(message, ascii_only=data.draw(st.booleans()))
    send(fuzz_target, http, wire, message, body, routing=data.draw(st.sampled_from([True, True, True, False])))


@pytest.mark.parametrize("wire", WIRES)
@settings(FUZZ, max_examples=100)
@given(data=st.data())
def test_broken_tool_calls_are_refused_and_never_written(
    fuzz_target: FuzzTarget, http: httpx2.Client, wire: str, data: st.DataObject
) -> None:
    message, nest = data.draw(broken_calls(wire))
    body = encode(message, ascii_only=data.draw(st.booleans()), nest=nest)
    send(fuzz_target, http, wire, message, body)


# --- boundaries and edge cases, every time ---------------------------------------------------


def _padded_invalid_write(wire: str, size: int) -> tuple[dict[str, Any], bytes]:
    message = base_call(wire, "memory_write", {"content": "a fact worth keeping", "unexpected": True})
    body = encode(message)
    return message, body + b" " * (size - len(body))


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("streamed", [False, True], ids=["content-length", "chunked"])
def test_bodies_at_and_past_the_size_limit(
    fuzz_target: FuzzTarget, http: httpx2.Client, wire: str, streamed: bool
) -> None:
    limit = fuzz_target.max_body_bytes
    for size, refused in ((limit - 1, False), (limit, False), (limit + 1, True)):
        message, body = _padded_invalid_write(wire, size)
        assert len(body) == size
        subject = f"fuzz-{uuid.uuid4().hex[:16]}"
        content: Any = iter([body[: size // 2], body[size // 2 :]]) if streamed else body
        response = http.post(
            fuzz_target.url, content=content, headers=headers_for(wire, message, fuzz_target.mint(subject))
        )
        assert_contained(response, message)
        assert (response.status_code == 413) is refused, (size, response.status_code, response.text[:300])
        assert fuzz_target.ledger.writes_by(subject) == 0


@pytest.mark.parametrize("wire", WIRES)
def test_a_tool_call_without_an_id_runs_nothing(fuzz_target: FuzzTarget, http: httpx2.Client, wire: str) -> None:
    message = base_call(wire, "memory_write", {"content": "a fact worth keeping"})
    del message["id"]
    send(fuzz_target, http, wire, message, encode(message))


LONE_SURROGATES = ["\ud800", "\udfff", "x\udbffy", "\udc00\ud800", "fact \ud83d"]


def _every_case(cases: dict[str, Callable[[], None]]) -> None:
    """Runs every case and fails once, naming each case that failed and why."""
    problems = []
    for name, case in cases.items():
        try:
            case()
        except AssertionError as exc:
            problems.append(f"{name}: {str(exc).splitlines()[0]}")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.mark.parametrize("wire", WIRES)
def test_content_with_a_lone_surrogate_never_reaches_memory(
    fuzz_target: FuzzTarget, http: httpx2.Client, wire: str
) -> None:
    """`"\\ud800"` is valid JSON syntax but no Unicode text: it cannot be stored as UTF-8
    (PostgreSQL refuses it) nor clipped for a later search (budget.clip_utf8 encodes)."""

    def case(content: str) -> Callable[[], None]:
        message = base_call(wire, "memory_write", {"content": content})
        return lambda: send(fuzz_target, http, wire, message, encode(message))

    _every_case({ascii(content): case(content) for content in LONE_SURROGATES})


@pytest.mark.parametrize("wire", WIRES)
def test_escaped_surrogate_pairs_are_ordinary_text(fuzz_target: FuzzTarget, http: httpx2.Client, wire: str) -> None:
    """The control for the test above: an escaped pair is an emoji and is stored."""
    subject = f"fuzz-{uuid.uuid4().hex[:16]}"
    message = base_call(wire, "memory_write", {"content": "likes \U0001f600 and \u202eRTL\u202c, \ufeff\uffff too"})
    body = encode(message)
    assert b"\\ud83d\\ude00" in body
    response = http.post(fuzz_target.url, content=body, headers=headers_for(wire, message, fuzz_target.mint(subject)))
    assert response.status_code == 200, response.text
    assert response.json()["result"]["isError"] is False, response.text
    assert fuzz_target.ledger.writes_by(subject) == 1


NUL_ARGUMENTS = {
    "memory_write content": ("memory_write", {"content": "NUL\x00 inside"}, "content"),
    "memory_write resource": ("memory_write", {"content": "a fact", "resource": "doc\x00"}, "resource"),
    "memory_search query": ("memory_search", {"query": "\x00"}, "query"),
    "memory_search resource_ids": ("memory_search", {"query": "q", "resource_ids": ["a", "b\x00"]}, "resource_ids.1"),
    "memory_receipt receipt_id": ("memory_receipt", {"receipt_id": "rcpt\x00"}, "receipt_id"),
}


@pytest.mark.parametrize("wire", WIRES)
def test_a_nul_character_is_a_tool_error_naming_the_field(
    fuzz_target: FuzzTarget, http: httpx2.Client, wire: str
) -> None:
    """`"\\u0000"` is valid JSON and valid Unicode, but PostgreSQL text cannot store it: every
    string argument carrying one is refused before the memory service is called."""

    def case(tool: str, arguments: dict[str, Any], field: str) -> Callable[[], None]:
        def check() -> None:
            subject = f"fuzz-{uuid.uuid4().hex[:16]}"
            message = base_call(wire, tool, arguments)
            headers = headers_for(wire, message, fuzz_target.mint(subject))
            response = http.post(fuzz_target.url, content=encode(message), headers=headers)
            shown = f"{response.status_code} {response.text[:300]!r}"
            assert response.status_code == 200, shown
            result = response.json()["result"]
            assert result["isError"] is True, shown
            # The argument check's wording: the memory service was never asked.
            text = result["content"][0]["text"]
            assert text.startswith(f"Invalid arguments for {tool}: "), shown
            assert f"{field} contains a NUL character" in text, shown
            assert fuzz_target.ledger.writes_by(subject) == 0, shown

        return check

    _every_case({name: case(*spec) for name, spec in NUL_ARGUMENTS.items()})


# Envelopes the handshake-era path hands to the SDK's pydantic models.
MALFORMED_ENVELOPES = {
    "jsonrpc 1.0": {"jsonrpc": "1.0", "id": 1, "method": "tools/call"},
    "jsonrpc missing": {"id": 1, "method": "tools/call"},
    "method missing": {"jsonrpc": "2.0", "id": 1},
    "params a list": {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": [1]},
    "id a float": {"jsonrpc": "2.0", "id": 1.5, "method": "tools/call"},
    "id null": {"jsonrpc": "2.0", "id": None, "method": "tools/call"},
    "id an object": {"jsonrpc": "2.0", "id": {}, "method": "tools/call"},
    # A string id is echoed back: one that is no text would make the answer unreadable.
    "id with a lone surrogate": {"jsonrpc": "2.0", "id": "a\ud800", "method": "tools/call"},
    "id with a NUL": {"jsonrpc": "2.0", "id": "a\x00", "method": "tools/call"},
}


@pytest.mark.parametrize("wire", WIRES)
def test_a_malformed_envelope_is_an_invalid_request_without_internals(
    fuzz_target: FuzzTarget, http: httpx2.Client, wire: str
) -> None:
    """JSON-RPC 2.0 section 5 (and MCP: ids are strings or integers, never null): an invalid
    Request object gets -32600, and the message names no library, model or input echo."""

    def case(envelope: dict[str, Any]) -> Callable[[], None]:
        message = dict(envelope)
        if "params" not in message and message.get("method") == "tools/call":
            message["params"] = {"name": "memory_write", "arguments": {"content": "a fact worth keeping"}}
            if wire == MODERN:
                message["params"]["_meta"] = META

        def check() -> None:
            subject = f"fuzz-{uuid.uuid4().hex[:16]}"
            headers = headers_for(wire, message, fuzz_target.mint(subject))
            response = http.post(fuzz_target.url, content=encode(message), headers=headers)
            shown = f"{response.status_code} {response.text[:300]!r}"
            assert response.status_code == 400, shown
            assert response.json()["error"]["code"] == -32600, shown
            assert response.json()["id"] in (None, 1), shown  # never an id that is no text
            assert not re.search(r"pydantic|validation errors? for|input_value|input_type", response.text), shown
            assert fuzz_target.ledger.writes_by(subject) == 0, shown

        return check

    _every_case({name: case(envelope) for name, envelope in MALFORMED_ENVELOPES.items()})
