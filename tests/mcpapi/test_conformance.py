"""The official MCP conformance suite against /mcp, at every protocol revision the server accepts.

`@modelcontextprotocol/conformance` (pinned in tests/support/node.py, run on Node 22 from
the npm registry) plays the client. It cannot send a bearer token, so it talks to a small
reverse proxy in this process that adds one and forwards everything else untouched; the
server keeps authenticating every request.

Every scenario the suite has for a revision runs. A failure must be listed, with its
reason, in conformance-baseline.yml (scenarios needing sample tools, resources or prompts
the server deliberately lacks); a listed entry that passes fails the test too, so the
baseline never outlives its reason. The suite's own verdict (`--expected-failures`, its
exit code) is checked against ours, which is computed from the `checks.json` it writes.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcpapi.connection import FULL_ENDPOINT
from tests.edge.live import edge_stack
from tests.support.deployments import RealDeployment, single_process
from tests.support.node import ConformanceTools, NodeToolsUnavailable, conformance_tools
from tests.support.proxy import bearer_proxy

# The database mark makes pytest-django create the test database even when this module runs
# alone; the targets' principals and tokens are written outside any test's transaction.
pytestmark = [pytest.mark.slow, pytest.mark.django_db]

# The revisions the server accepts: two on the initialize handshake, one stateless.
REVISIONS = ("2025-06-18", "2025-11-25", "2026-07-28")
BASELINE = Path(__file__).with_name("conformance-baseline.yml")
SUITE_TIMEOUT = 600.0
# One run sends roughly 150 requests in a few seconds with one token.
SUITE_RATE_PER_MINUTE = 600_000
SUITE_RATE_BURST = 10_000


# --- the server under test ------------------------------------------------------------


@pytest.fixture(scope="module", params=["app", "edge"])
def conformance_target(
    request: pytest.FixtureRequest, django_db_setup: Any, django_db_blocker: Any
) -> Iterator[tuple[str, str]]:
    """(base_url, bearer token) of the server the suite tests: the one place that picks it.

    Each deployment of the product in turn, on the test database: "app" is memoryhub.asgi
    in its own uvicorn process, as the first README command runs it; "edge" is an edge
    process (no database, no secret) in front of a memory-service process. `base_url` is
    the origin the deployment knows itself by: its tokens are for `base_url + "/mcp"` and
    it accepts that origin in an Origin header. The token is one of the authorisation
    server's access tokens for a person in a workspace. Authentication stays on; only
    the rate limit is raised, because one run sends ~150 requests with one token.
    """
    from django.db import connection

    rate = {"MEMORYHUB_RATE_PER_MINUTE": str(SUITE_RATE_PER_MINUTE), "MEMORYHUB_RATE_BURST": str(SUITE_RATE_BURST)}
    database = dict(connection.settings_dict)
    if request.param == "app":
        with single_process(database, django_db_blocker, gateway_env=rate) as app:
            yield app.base_url, app.token(expires_in=3600)
    else:
        with edge_stack(database, gateway_env=rate) as stack:
            edge = RealDeployment(name="edge", base_url=stack.edge_url, db_blocker=django_db_blocker)
            yield edge.base_url, edge.token(expires_in=3600)


@pytest.fixture(scope="module")
def suite_url(conformance_target: tuple[str, str]) -> Iterator[str]:
    base_url, token = conformance_target
    with bearer_proxy(base_url, token) as proxy:
        yield proxy + FULL_ENDPOINT


@pytest.fixture(scope="session")
def suite_tools() -> ConformanceTools:
    try:
        return conformance_tools()
    except NodeToolsUnavailable as exc:
        problem = str(exc)
    pytest.fail(f"The MCP conformance suite is unavailable (this test never skips): {problem}", pytrace=False)


# --- the baseline ------------------------------------------------------------------------

_ENTRY = re.compile(r"^\s+-\s+(?P<entry>[^\s#]+)\s*(?:#\s*(?P<reason>\S.*?))?\s*$")


@dataclass(frozen=True)
class Baseline:
    reasons: dict[str, str]  # entry ("scenario" or "scenario:check-id") -> reason

    @property
    def scenarios(self) -> set[str]:
        return {entry for entry in self.reasons if ":" not in entry}

    def checks(self, scenario: str) -> set[str]:
        prefix = scenario + ":"
        return {entry[len(prefix) :] for entry in self.reasons if entry.startswith(prefix)}


def load_baseline(path: Path = BASELINE) -> Baseline:
    reasons: dict[str, str] = {}
    section = None
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            section = line.split(":", 1)[0].strip()
            assert section in ("server", "client"), f"{path.name}:{number}: unexpected key {section!r}"
            continue
        match = _ENTRY.match(line)
        assert match, f"{path.name}:{number}: not a `- entry  # reason` line: {line!r}"
        if section != "server":
            continue
        entry, reason = match["entry"], match["reason"]
        assert reason, f"{path.name}:{number}: {entry} has no `# reason`"
        assert entry not in reasons, f"{path.name}:{number}: {entry} is listed twice"
        reasons[entry] = reason
    return Baseline(reasons)


# --- running the suite and judging it ------------------------------------------------------

_RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")
_SUMMARY_LINE = re.compile(r"^[✓✗] (?P<scenario>\S+): \d+ passed, \d+ failed")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_BAD = ("FAILURE", "WARNING")  # the suite's baseline logic counts warnings as failures
_SEVERITY = {"FAILURE": 3, "WARNING": 2, "SUCCESS": 1}


@dataclass
class SuiteRun:
    revision: str
    returncode: int
    output: str
    checks: dict[str, list[dict[str, Any]]]  # scenario -> its checks, as checks.json has them
    expected: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)

    def describe(self) -> str:
        lines = [f"conformance suite at {self.revision} (exit code {self.returncode})"]
        if self.unexpected:
            lines.append("Failures not in conformance-baseline.yml (fix the server, never baseline a bug):")
            lines += [f"  ✗ {item}" for item in self.unexpected]
        if self.stale:
            lines.append("Baselined but passing (delete these entries from conformance-baseline.yml):")
            lines += [f"  ✓ {item}" for item in self.stale]
        return "\n".join(lines)


def run_suite(tools: ConformanceTools, url: str, revision: str, out_dir: Path) -> SuiteRun:
    args = [
        "server",
        "--url",
        url,
        "--suite",
        "all",
        "--spec-version",
        revision,
        "--expected-failures",
        str(BASELINE),
        "--output-dir",
        str(out_dir),
    ]
    try:
        done = tools.run(args, timeout=SUITE_TIMEOUT, cwd=out_dir)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the conformance suite at {revision} did not finish within {SUITE_TIMEOUT:.0f} s: {exc}")
    output = _ANSI.sub("", done.stdout + done.stderr)
    checks: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(out_dir.glob("*/checks.json")):
        match = _RESULT_DIR.match(path.parent.name)
        assert match, f"unexpected result folder {path.parent.name}"
        checks[match["scenario"]] = json.loads(path.read_text())
    # A scenario that crashed is in the summary but wrote no checks.json.
    for line in output.splitlines():
        summary = _SUMMARY_LINE.match(line.strip())
        if summary and summary["scenario"] not in checks:
            checks[summary["scenario"]] = [
                {"id": summary["scenario"], "status": "FAILURE", "errorMessage": "the scenario crashed; see output"}
            ]
    return judge(SuiteRun(revision=revision, returncode=done.returncode, output=output, checks=checks))


def judge(run: SuiteRun, baseline: Baseline | None = None) -> SuiteRun:
    """The suite's --expected-failures rules, with the failing checks' messages kept."""
    baseline = baseline or load_baseline()
    for scenario, checks in sorted(run.checks.items()):
        bad = [check for check in checks if check["status"] in _BAD]
        if scenario in baseline.scenarios:
            (run.expected if bad else run.stale).append(scenario)
            continue
        excused = baseline.checks(scenario)
        verdicts = _collapse(checks)
        for check in verdicts.values():
            if check["status"] not in _BAD:
                continue
            name = f"{scenario}:{check['id']}"
            if check["id"] in excused:
                run.expected.append(name)
            else:
                message = check.get("errorMessage") or (check.get("details") or {}).get("message") or ""
                run.unexpected.append(f"{name} [{check['status']}] {message}".strip())
        for check_id in sorted(excused):
            if verdicts.get(check_id, {}).get("status") == "SUCCESS":
                run.stale.append(f"{scenario}:{check_id}")
    return run


def _collapse(checks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One verdict per check id, the most severe occurrence winning (INFO never counts)."""
    verdicts: dict[str, dict[str, Any]] = {}
    for check in checks:
        if check["status"] == "INFO":
            continue
        current = verdicts.get(check["id"])
        if current is None or _SEVERITY.get(check["status"], 0) >= _SEVERITY.get(current["status"], 0):
            verdicts[check["id"]] = check
    return verdicts


class SuiteRuns:
    """Runs the suite once per revision, on first use, and keeps the results for the module."""

    def __init__(self, tools: ConformanceTools, url: str, root: Path) -> None:
        self._tools, self._url, self._root = tools, url, root
        self._runs: dict[str, SuiteRun] = {}

    def __getitem__(self, revision: str) -> SuiteRun:
        if revision not in self._runs:
            out_dir = self._root / revision
            out_dir.mkdir(parents=True)
            self._runs[revision] = run_suite(self._tools, self._url, revision, out_dir)
        return self._runs[revision]


@pytest.fixture(scope="module")
def suite_runs(suite_tools: ConformanceTools, suite_url: str, tmp_path_factory: pytest.TempPathFactory) -> SuiteRuns:
    return SuiteRuns(suite_tools, suite_url, tmp_path_factory.mktemp("conformance"))


# --- the tests -------------------------------------------------------------------------------


def test_the_target_refuses_requests_without_a_token(conformance_target: tuple[str, str]) -> None:
    """The proxy supplies the credential; the server under test still demands one."""
    base_url, _ = conformance_target
    response = httpx2.post(
        base_url + FULL_ENDPOINT,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
        timeout=10,
    )
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer ")


def test_the_baseline_names_real_scenarios_with_reasons(suite_tools: ConformanceTools) -> None:
    baseline = load_baseline()
    assert baseline.reasons, "conformance-baseline.yml lists nothing"
    listed = suite_tools.run(["list", "--server"], timeout=120)
    assert listed.returncode == 0, listed.stderr
    known = set(re.findall(r"^\s+- (\S+) \[", listed.stdout, flags=re.MULTILINE))
    assert known, listed.stdout
    named = {entry.split(":", 1)[0] for entry in baseline.reasons}
    assert named <= known, f"not server scenarios of this suite version: {sorted(named - known)}"
    both = {entry.split(":", 1)[0] for entry in baseline.reasons if ":" in entry} & baseline.scenarios
    assert not both, f"listed whole and per check (the suite rejects that): {sorted(both)}"


def test_the_verdict_follows_the_suites_baseline_rules() -> None:
    """Unlisted failures and warnings fail; listed ones pass; listed ones that pass are stale."""
    baseline = Baseline({"wholly-missing": "r", "wholly-passing": "r", "mixed:excused": "r", "mixed:now-passing": "r"})
    checks = {
        "wholly-missing": [{"id": "a", "status": "FAILURE"}],
        "wholly-passing": [{"id": "a", "status": "SUCCESS"}],
        "mixed": [
            {"id": "excused", "status": "FAILURE"},
            {"id": "now-passing", "status": "SUCCESS"},
            {"id": "repeated", "status": "SUCCESS"},
            {"id": "repeated", "status": "WARNING", "errorMessage": "a SHOULD"},
            {"id": "note", "status": "INFO"},
        ],
        "clean": [{"id": "a", "status": "SUCCESS"}, {"id": "b", "status": "SKIPPED"}],
        "broken": [{"id": "b", "status": "FAILURE", "errorMessage": "boom"}],
    }
    run = judge(SuiteRun(revision="x", returncode=1, output="", checks=checks), baseline)
    assert run.expected == ["mixed:excused", "wholly-missing"]
    assert run.unexpected == ["broken:b [FAILURE] boom", "mixed:repeated [WARNING] a SHOULD"]
    assert run.stale == ["mixed:now-passing", "wholly-passing"]


@pytest.mark.parametrize("revision", REVISIONS)
def test_the_server_passes_the_conformance_suite(suite_runs: SuiteRuns, revision: str) -> None:
    run = suite_runs[revision]
    assert len(run.checks) >= 20, f"the suite ran too few scenarios:\n{run.output[-4000:]}"
    assert "tools-list" in run.checks, run.output[-4000:]
    if run.unexpected or run.stale:
        pytest.fail(run.describe(), pytrace=False)
    # Our reading of checks.json and the suite's own --expected-failures verdict must agree.
    if run.returncode != 0:
        pytest.fail(f"{run.describe()}\nbut the suite's own verdict is a failure:\n{run.output[-4000:]}", pytrace=False)


def test_every_baseline_entry_still_fails_somewhere(suite_runs: SuiteRuns) -> None:
    """An entry that fails at no revision (it passes, or never runs) is dead weight."""
    baseline = load_baseline()
    failing = {item for revision in REVISIONS for item in suite_runs[revision].expected}
    unused = sorted(set(baseline.reasons) - failing)
    if unused:
        pytest.fail(f"entries in conformance-baseline.yml that no revision needed: {unused}", pytrace=False)
