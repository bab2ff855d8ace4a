"""The demo workspace the serve command starts with, made with the same
administration commands an operator uses. Idempotent."""

import io
import json
import os
import secrets

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from memoryhub import access
from memoryhub.services.access_rules import access_rule_grant
from memoryhub.services.agents import agents_list
from memoryhub.services.collections import collection_create
from memoryhub.services.demo import demo_memory_seed
from memoryhub.services.workspaces import workspace_get

WORKSPACE = "demo"
PEOPLE = [
    # username, roles, admin
    ("ada", "engineering,leads", True),
    ("bruno", "engineering", False),
    ("chloe", "sales", False),
]
COLLECTIONS = {
    "runbooks": ("Engineering runbooks", ["engineering"]),
    "incidents": ("Incident notes", ["engineering", "leads"]),
    "accounts": ("Customer accounts", ["sales", "leads"]),
    "handbook": ("Company handbook", ["engineering", "sales", "leads"]),
}


class Command(BaseCommand):
    help = "Create or refresh the demo workspace; prints how to log in."

    def handle(self, *args, **options):
        credentials_file = settings.DATA_DIR / "demo-credentials.json"
        saved = json.loads(credentials_file.read_text()) if credentials_file.exists() else {}
        password = saved.get("password") or secrets.token_urlsafe(12)

        quiet = io.StringIO()
        call_command("create_workspace", WORKSPACE, name="Demo workspace", stdout=quiet)
        env_before = os.environ.get("MEMORYHUB_PASSWORD")
        os.environ["MEMORYHUB_PASSWORD"] = password
        try:
            for username, roles, admin in PEOPLE:
                call_command("add_person", WORKSPACE, username, roles=roles, admin=admin,
                             email=f"{username}@demo.invalid", stdout=quiet)
        finally:
            if env_before is None:
                os.environ.pop("MEMORYHUB_PASSWORD", None)
            else:
                os.environ["MEMORYHUB_PASSWORD"] = env_before

        tenant = workspace_get(slug=WORKSPACE)
        system = access.system_caller(tenant=tenant)
        for name, (description, roles) in COLLECTIONS.items():
            collection_create(caller=system, name=name, description=description, exist_ok=True)
            for role in roles:
                access_rule_grant(caller=system, role=role, collection=name, exist_ok=True)

        if not any(agent.name == "triage-bot" for agent in agents_list(caller=system)):
            out = io.StringIO()
            call_command("register_agent", WORKSPACE, "triage-bot", scopes="memory.read memory.write",
                         roles="engineering", stdout=out)
            lines = dict(
                line.split(":", 1) for line in out.getvalue().splitlines() if line.startswith("client_")
            )
            saved["agent"] = {
                "client_id": lines["client_id"].strip(),
                "client_secret": lines["client_secret"].split()[0].strip(),
            }

        created = demo_memory_seed(caller=system)

        saved["password"] = password
        credentials_file.write_text(json.dumps(saved, indent=2))
        credentials_file.chmod(0o600)
        self.stdout.write(f"demo workspace ready ({created} new fragments)")
        for username, _, admin in PEOPLE:
            self.stdout.write(f"  workspace {WORKSPACE!r}  login {username!r:8} password {password!r}"
                              f"{'  (workspace admin)' if admin else ''}")
        self.stdout.write(f"  agent triage-bot credentials: {credentials_file}")
