"""The README's "Set up a workspace without a browser" script, read from
README.md and run for real by the shell (each `python manage.py` a process of
its own on the test database); then search, through the service, finds the
ingested text for the person whose role may read the collection and not for
the one whose role may not."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from django.db import connection

from memoryhub import access
from memoryhub.models import Tenant, User
from memoryhub.services.search import fragments_search
from tests.support.processes import database_url

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## Set up a workspace without a browser"


def readme_script() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index(HEADING):]
    block = re.search(r"^```sh\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)
    assert block is not None, "the section has no sh block"
    return block.group(1)


def environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env.update(DATABASE_URL=database_url(connection.settings_dict), PYTHONPATH=str(ROOT),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               ADMIN_PASSWORD="a long enough admin passphrase", MEMBER_PASSWORD="a long enough member passphrase")
    return env


def found(username: str, query: str) -> list[str]:
    user = User.objects.get(tenant__slug="initech", username=username)
    result = fragments_search(caller=access.caller_for_user(user=user, client_id="test"), query=query)
    return [hit.fragment.value for hit in result.hits]


def test_the_readme_script_sets_up_a_workspace_that_search_obeys(transactional_db, tmp_path):
    script = readme_script()
    assert script.count("python manage.py") >= 15
    (tmp_path / "setup.sh").write_text(script, encoding="utf-8")
    (tmp_path / "manage.py").symlink_to(ROOT / "manage.py")
    completed = subprocess.run(["sh", "setup.sh"], cwd=tmp_path, env=environment(), capture_output=True, text=True,
                               timeout=900)
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert "1 documents: 1 created" in completed.stdout
    assert "runbooks: 1 live, 0 retired; read by engineering" in completed.stdout

    tenant = Tenant.objects.get(slug="initech")
    assert User.objects.get(tenant=tenant, username="peter").membership.is_admin
    assert not User.objects.get(tenant=tenant, username="milton").membership.is_admin
    for name in ("triage-bot.json", "wiki-source.json"):
        credentials = json.loads((tmp_path / name).read_text())
        assert credentials["client_id"] and credentials["client_secret"]
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600

    query = "When do deploys freeze?"
    assert any("Deploys freeze on Fridays" in value for value in found("peter", query))
    assert not any("Deploys freeze" in value for value in found("milton", query))


def test_a_refused_command_exits_with_status_1_and_says_why(transactional_db, tmp_path):
    completed = subprocess.run([sys.executable, str(ROOT / "manage.py"), "role", "nowhere", "ops", "create",
                                "--json"], cwd=tmp_path, env=environment(), capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 1
    assert json.loads(completed.stdout) == {"error": {"code": "not_found", "message": "No workspace named 'nowhere'.",
                                                      "field": "workspace"}}
    assert "No workspace named 'nowhere'." in completed.stderr
