"""Seeing it: Prometheus metrics at /metrics (loopback or a token only) that
move with traffic, and one JSON log line per request carrying its request id."""

from __future__ import annotations

import json
import logging
import re

import httpx2
import pytest
from django.test import Client

from memoryhub.observability import JsonFormatter
from memoryhub.services.ingest import fragment_ingest
from tests.conftest import signed_in
from tests.mcpapi.rpc_http import call_tool
from tests.support.tokens import person_mcp_token

SAMPLE = re.compile(r"^(?P<name>[a-z_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>[-0-9.e+]+)$")


def scrape(url: str) -> dict[str, float]:
    response = httpx2.get(f"{url}/metrics", timeout=30, trust_env=False)
    assert response.status_code == 200, response.text
    found = {}
    for line in response.text.splitlines():
        match = SAMPLE.match(line)
        if match:
            found[f"{match['name']}{{{match['labels'] or ''}}}"] = float(match["value"])
    return found


def token_for(user, base_url: str) -> str:
    return person_mcp_token(user, scope="memory.read memory.write", name="obs", base_url=base_url)[0]


def test_the_counts_move_with_traffic(live_people, asgi_server):
    url = asgi_server.url
    fragment_ingest(source=live_people.wiki, value="The on-call handbook lives in the wiki.")
    before = scrape(url)
    token = token_for(live_people.bruno, url)
    assert call_tool(f"{url}/mcp", token, "memory_search", {"query": "on-call handbook"}).status_code == 200
    assert call_tool(f"{url}/mcp", "not-a-token", "whoami", {}).status_code == 401
    assert httpx2.get(f"{url}/accounts/login/", timeout=30, trust_env=False).status_code == 200
    after = scrape(url)

    def moved(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert moved('memoryhub_mcp_tool_seconds_count{outcome="ok",tool="memory_search"}') == 1
    assert moved('memoryhub_token_verifications_total{outcome="valid"}') == 1
    assert moved('memoryhub_token_verifications_total{outcome="invalid"}') == 1
    assert moved('memoryhub_mcp_requests_total{endpoint="/mcp",status="401"}') == 1
    # Both requests were timed whole, and both tokens' checks; only the valid one reached the rate limit.
    assert moved('memoryhub_mcp_request_seconds_count{endpoint="/mcp"}') == 2
    assert moved('memoryhub_mcp_step_seconds_count{step="token"}') == 2
    assert moved('memoryhub_mcp_step_seconds_count{step="rate_limit"}') == 1
    assert moved('memoryhub_mcp_step_seconds_sum{step="token"}') > 0
    for step in ("embedding", "prologue", "index_query", "row_check", "serving", "receipt"):
        assert moved(f'memoryhub_search_phase_seconds_count{{phase="{step}"}}') == 1, step
    assert moved('memoryhub_http_seconds_count{group="accounts",status="200"}') >= 1
    assert "memoryhub_pending_enrichment{}" in after and "memoryhub_task_queue_depth{}" in after
    assert "memoryhub_enforcement_alarms_total{}" in after and "memoryhub_rate_limited_total{}" in after


def test_metrics_answer_loopback_or_the_token_only(db, settings):
    settings.MEMORYHUB_METRICS_TOKEN = "a-scrape-token-of-some-length"
    assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 404
    assert Client().get("/metrics", HTTP_X_FORWARDED_FOR="10.1.2.3").status_code == 404
    assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 404
    allowed = Client(REMOTE_ADDR="10.1.2.3").get("/metrics",
                                                 HTTP_AUTHORIZATION="Bearer a-scrape-token-of-some-length")
    assert allowed.status_code == 200 and b"memoryhub_search_phase_seconds" in allowed.content
    assert Client().get("/metrics").status_code == 200  # loopback


def test_one_json_line_per_request_with_its_request_id(people, caplog):
    caplog.set_level(logging.INFO, logger="memoryhub.requests")
    response = signed_in(people.bruno).get("/memory/", HTTP_X_REQUEST_ID="req-abcdef123")
    assert response["X-Request-Id"] == "req-abcdef123"
    record = next(r for r in caplog.records if r.name == "memoryhub.requests")
    line = json.loads(JsonFormatter().format(record))
    assert line["request_id"] == "req-abcdef123"
    assert (line["method"], line["group"], line["status"], line["principal_kind"]) == ("GET", "memory", 200, "user")
    assert line["duration_ms"] >= 0


@pytest.mark.parametrize("presented", ["", "short", "has spaces in it", "x" * 65, "semi;colon-1234"])
def test_an_unusable_request_id_is_replaced(db, presented):
    response = Client().get("/healthz", HTTP_X_REQUEST_ID=presented)
    assert re.fullmatch(r"[0-9a-f]{32}", response["X-Request-Id"])


def test_an_mcp_answer_names_its_request(live_people, asgi_server):
    token = token_for(live_people.bruno, asgi_server.url)
    response = call_tool(f"{asgi_server.url}/mcp", token, "whoami", {})
    assert re.fullmatch(r"[0-9a-f]{32}", response.headers["x-request-id"])
