"""mcpapi stays importable without Django and never reaches into the domain."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import mcpapi

PACKAGE = Path(mcpapi.__file__).resolve().parent
FORBIDDEN_ROOTS = (
    "django",
    "memoryhub",
    "rest_framework",
    "oauth2_provider",
    "reviews",
)


def _imported_modules(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_no_module_imports_django_or_the_domain() -> None:
    offenders = [
        f"{path.name}: {name}"
        for path in sorted(PACKAGE.glob("*.py"))
        for name in _imported_modules(path)
        if name.split(".")[0] in FORBIDDEN_ROOTS
    ]
    assert offenders == []


def test_it_imports_with_no_django_configured() -> None:
    code = (
        "import sys\n"
        "import mcpapi.gateway, mcpapi.server, mcpapi.tools, mcpapi.client\n"
        f"loaded = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN_ROOTS!r})\n"
        "assert not loaded, loaded\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(PACKAGE.parent)
    completed = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
