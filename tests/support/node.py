"""Node 22 and the official MCP conformance suite, from the npm registry, cached per version.

`conformance_tools()` installs `node@22` and `@modelcontextprotocol/conformance@<version>`
with the machine's npm into ``~/.cache/memoryhub/conformance-<version>/`` the first
time (about 25 s) and reuses that folder afterwards. An exclusive file lock makes
parallel test processes wait for one install instead of racing; the install goes
to a staging folder that is renamed into place only once it works, so a killed
install never leaves a half-made cache behind.

The machine's own `node` (20 here) is never used to run the suite: it needs 22,
and `node@22` from the registry brings its own binary.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.conftest import poll

# Newest release with the 2026-07-28 scenarios (server-stateless, http-header-validation,
# caching, input-required-result-*) on top of everything 0.1.16 runs.
CONFORMANCE_VERSION: Final = "0.2.0-alpha.12"
NODE_MAJOR: Final = 22
_PACKAGE: Final = "@modelcontextprotocol/conformance"
_READY_MARKER: Final = ".memoryhub-ready.json"
_INSTALL_TIMEOUT: Final = 600.0
_LOCK_TIMEOUT: Final = 900.0


class NodeToolsUnavailable(RuntimeError):
    """npm is missing, or the install or its check failed; the message says what to do."""


@dataclass(frozen=True)
class ConformanceTools:
    root: Path
    version: str
    node: Path
    entry_point: Path  # the suite's dist/index.js

    @property
    def node_version(self) -> str:
        return subprocess.run(
            [str(self.node), "--version"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    def command(self, *args: str) -> list[str]:
        return [str(self.node), str(self.entry_point), *args]

    def env(self) -> dict[str, str]:
        """The environment to run the suite in: Node 22 first on PATH, no colour codes."""
        env = dict(os.environ)
        env["PATH"] = f"{self.node.parent}{os.pathsep}{env.get('PATH', '')}"
        env["NO_COLOR"] = "1"
        env["FORCE_COLOR"] = "0"
        return env

    def run(self, args: Sequence[str], *, timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memoryhub"


def conformance_tools(version: str = CONFORMANCE_VERSION) -> ConformanceTools:
    """The installed suite, installing it first if this machine has no copy yet."""
    root = cache_dir() / f"conformance-{version}"
    tools = _ready(root, version)
    if tools is not None:
        return tools
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        missing = " and ".join(name for name, path in (("npm", npm), ("node", node)) if path is None)
        raise NodeToolsUnavailable(
            f"{missing} not on PATH. The MCP conformance test installs Node {NODE_MAJOR} and "
            f"{_PACKAGE}@{version} from the npm registry into {root}, once, and needs npm (and any "
            "Node to run npm itself) for that: on Debian, apt-get install nodejs npm."
        )
    root.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(root.parent / f"conformance-{version}.lock"):
        tools = _ready(root, version)  # another process may have finished while we waited
        if tools is not None:
            return tools
        return _install(npm, root, version)


def _ready(root: Path, version: str) -> ConformanceTools | None:
    marker = root / _READY_MARKER
    if not marker.is_file():
        return None
    tools = _tools_in(root, version)
    if not (tools.node.is_file() and tools.entry_point.is_file()):
        return None
    return tools


def _tools_in(root: Path, version: str) -> ConformanceTools:
    modules = root / "node_modules"
    return ConformanceTools(
        root=root,
        version=version,
        node=modules / "node" / "bin" / "node",
        entry_point=modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js",
    )


def _install(npm: str, root: Path, version: str) -> ConformanceTools:
    staging = root.parent / f".conformance-{version}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        # A package.json of its own keeps npm from walking up to some parent project.
        (staging / "package.json").write_text(
            json.dumps({"name": "memoryhub-conformance-tools", "private": True}) + "\n"
        )
        command = [
            npm,
            "install",
            "--no-audit",
            "--no-fund",
            "--save-exact",
            f"node@{NODE_MAJOR}",
            f"{_PACKAGE}@{version}",
        ]
        env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_loglevel": "error"}
        try:
            done = subprocess.run(
                command,
                cwd=staging,
                capture_output=True,
                text=True,
                timeout=_INSTALL_TIMEOUT,
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise NodeToolsUnavailable(
                f"`{' '.join(command[1:])}` did not finish within {_INSTALL_TIMEOUT:.0f} s (in {staging})"
            ) from exc
        if done.returncode != 0:
            raise NodeToolsUnavailable(
                f"`npm {' '.join(command[1:])}` failed with exit code {done.returncode}:\n"
                + _tail(done.stderr or done.stdout)
            )
        tools = _tools_in(staging, version)
        _check(tools)
        (staging / _READY_MARKER).write_text(
            json.dumps({"conformance": version, "node": tools.node_version, "installed_at": time.time()}) + "\n"
        )
        shutil.rmtree(root, ignore_errors=True)  # an older, unfinished copy
        staging.rename(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _tools_in(root, version)


def _check(tools: ConformanceTools) -> None:
    if not tools.node.is_file():
        raise NodeToolsUnavailable(f"npm finished but left no Node binary at {tools.node}")
    if not tools.entry_point.is_file():
        raise NodeToolsUnavailable(f"npm finished but left no conformance suite at {tools.entry_point}")
    node_version = tools.node_version
    if not node_version.startswith(f"v{NODE_MAJOR}."):
        raise NodeToolsUnavailable(f"expected Node {NODE_MAJOR} from the registry, got {node_version}")
    reported = tools.run(["--version"], timeout=60).stdout.strip()
    if reported != tools.version:
        raise NodeToolsUnavailable(f"the suite reports version {reported!r}, expected {tools.version!r}")


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "a+") as handle:

        def locked() -> bool:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        try:
            poll(locked, timeout=_LOCK_TIMEOUT, interval=0.2, what=f"another process's install ({lock_path})")
        except AssertionError:
            raise NodeToolsUnavailable(
                f"waited {_LOCK_TIMEOUT:.0f} s for another process's install ({lock_path})"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
