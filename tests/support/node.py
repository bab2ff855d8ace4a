"""Node 22 and pinned npm packages from the npm registry, cached per set of versions.

`node_packages(folder, packages)` installs `node@22` and the pinned packages with the
machine's npm into ``~/.cache/memoryhub/<folder>/`` the first time and reuses that folder
afterwards. An exclusive file lock makes parallel test processes wait for one install
instead of racing; the install goes to a staging folder that is renamed into place only
once it works (and passes its check), so a killed install never leaves a half-made cache
behind. Two sets are pinned here:

- `conformance_tools()`: the official MCP conformance suite (tests/mcpapi/test_conformance.py);
- `client_tools()`: the MCP Inspector and mcp-remote, as the Connect page tells people to run
  them (tests/clients/).

The machine's own `node` (20 here) is never used to run them: they need 22, and `node@22`
from the registry brings its own binary.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.conftest import poll

# Newest release with the 2026-07-28 scenarios (server-stateless, http-header-validation,
# caching, input-required-result-*) on top of everything 0.1.16 runs.
CONFORMANCE_VERSION: Final = "0.2.0-alpha.12"
INSPECTOR_VERSION: Final = "2.12.0"
MCP_REMOTE_VERSION: Final = "0.15.1"
NODE_MAJOR: Final = 22
_CONFORMANCE: Final = "@modelcontextprotocol/conformance"
_INSPECTOR: Final = "@modelcontextprotocol/inspector"
_MCP_REMOTE: Final = "mcp-remote"
_READY_MARKER: Final = ".memoryhub-ready.json"
_INSTALL_TIMEOUT: Final = 600.0
_LOCK_TIMEOUT: Final = 900.0


class NodeToolsUnavailable(RuntimeError):
    """npm is missing, or the install or its check failed; the message says what to do."""


@dataclass(frozen=True)
class NodeTools:
    """A folder with node@22 and pinned packages in its node_modules."""

    root: Path
    packages: Mapping[str, str]  # name -> exact version

    @property
    def node(self) -> Path:
        return self.root / "node_modules" / "node" / "bin" / "node"

    def package_dir(self, name: str) -> Path:
        return self.root / "node_modules" / name

    @property
    def node_version(self) -> str:
        return subprocess.run(
            [str(self.node), "--version"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment with Node 22 first on PATH, no colour codes, and npm kept offline:
        `npx <package>` run in `root` finds the pinned copy and never fetches another."""
        env = dict(os.environ if base is None else base)
        env["PATH"] = f"{self.node.parent}{os.pathsep}{env.get('PATH', os.defpath)}"
        env.update(NO_COLOR="1", FORCE_COLOR="0", npm_config_offline="true", npm_config_update_notifier="false",
                   npm_config_loglevel="error")
        return env

    def installed_version(self, name: str) -> str:
        return json.loads((self.package_dir(name) / "package.json").read_text())["version"]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memoryhub"


def node_packages(folder: str, packages: Mapping[str, str], *,
                  check: Callable[[NodeTools], None] = lambda tools: None) -> NodeTools:
    """The installed set, installing it first if this machine has no copy yet. `check` runs
    on a fresh install before it is put in place and raises NodeToolsUnavailable if it is wrong."""
    root = cache_dir() / folder
    tools = _ready(root, packages)
    if tools is not None:
        return tools
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        missing = " and ".join(name for name, path in (("npm", npm), ("node", node)) if path is None)
        wanted = ", ".join(f"{name}@{version}" for name, version in packages.items())
        raise NodeToolsUnavailable(
            f"{missing} not on PATH. These tests install Node {NODE_MAJOR} and {wanted} from the npm "
            f"registry into {root}, once, and need npm (and any Node to run npm itself) for that: "
            "on Debian, apt-get install nodejs npm."
        )
    root.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(root.parent / f"{folder}.lock"):
        tools = _ready(root, packages)  # another process may have finished while we waited
        if tools is not None:
            return tools
        return _install(npm, root, packages, check)


def _ready(root: Path, packages: Mapping[str, str]) -> NodeTools | None:
    tools = NodeTools(root=root, packages=dict(packages))
    if not (root / _READY_MARKER).is_file() or not tools.node.is_file():
        return None
    if any(not (tools.package_dir(name) / "package.json").is_file() for name in packages):
        return None
    return tools


def _install(npm: str, root: Path, packages: Mapping[str, str], check: Callable[[NodeTools], None]) -> NodeTools:
    staging = root.parent / f".{root.name}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        # A package.json of its own keeps npm from walking up to some parent project.
        (staging / "package.json").write_text(json.dumps({"name": f"memoryhub-{root.name}", "private": True}) + "\n")
        command = [npm, "install", "--no-audit", "--no-fund", "--save-exact", f"node@{NODE_MAJOR}",
                   *(f"{name}@{version}" for name, version in packages.items())]
        env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_loglevel": "error"}
        try:
            done = subprocess.run(command, cwd=staging, capture_output=True, text=True, timeout=_INSTALL_TIMEOUT,
                                  env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise NodeToolsUnavailable(
                f"`{' '.join(command[1:])}` did not finish within {_INSTALL_TIMEOUT:.0f} s (in {staging})"
            ) from exc
        if done.returncode != 0:
            raise NodeToolsUnavailable(
                f"`npm {' '.join(command[1:])}` failed with exit code {done.returncode}:\n"
                + _tail(done.stderr or done.stdout)
            )
        tools = NodeTools(root=staging, packages=dict(packages))
        _check(tools)
        check(tools)
        (staging / _READY_MARKER).write_text(
            json.dumps({"packages": dict(packages), "node": tools.node_version, "installed_at": time.time()}) + "\n"
        )
        shutil.rmtree(root, ignore_errors=True)  # an older, unfinished copy
        staging.rename(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return NodeTools(root=root, packages=dict(packages))


def _check(tools: NodeTools) -> None:
    if not tools.node.is_file():
        raise NodeToolsUnavailable(f"npm finished but left no Node binary at {tools.node}")
    node_version = tools.node_version
    if not node_version.startswith(f"v{NODE_MAJOR}."):
        raise NodeToolsUnavailable(f"expected Node {NODE_MAJOR} from the registry, got {node_version}")
    for name, version in tools.packages.items():
        if not (tools.package_dir(name) / "package.json").is_file():
            raise NodeToolsUnavailable(f"npm finished but left no {name} in {tools.root}")
        if tools.installed_version(name) != version:
            raise NodeToolsUnavailable(f"{name} is {tools.installed_version(name)}, expected {version}")


# --- the conformance suite -------------------------------------------------------------


@dataclass(frozen=True)
class ConformanceTools:
    root: Path
    version: str
    node: Path
    entry_point: Path  # the suite's dist/index.js
    tools: NodeTools

    @property
    def node_version(self) -> str:
        return self.tools.node_version

    def command(self, *args: str) -> list[str]:
        return [str(self.node), str(self.entry_point), *args]

    def env(self) -> dict[str, str]:
        """The environment to run the suite in: Node 22 first on PATH, no colour codes."""
        return self.tools.env()

    def run(self, args: Sequence[str], *, timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(*args), capture_output=True, text=True, timeout=timeout, env=self.env(),
                              cwd=cwd, stdin=subprocess.DEVNULL)


def _conformance(tools: NodeTools, version: str) -> ConformanceTools:
    return ConformanceTools(root=tools.root, version=version, node=tools.node,
                            entry_point=tools.package_dir(_CONFORMANCE) / "dist" / "index.js", tools=tools)


def conformance_tools(version: str = CONFORMANCE_VERSION) -> ConformanceTools:
    """The installed suite, installing it first if this machine has no copy yet."""

    def check(tools: NodeTools) -> None:
        suite = _conformance(tools, version)
        if not suite.entry_point.is_file():
            raise NodeToolsUnavailable(f"npm finished but left no conformance suite at {suite.entry_point}")
        reported = suite.run(["--version"], timeout=60).stdout.strip()
        if reported != version:
            raise NodeToolsUnavailable(f"the suite reports version {reported!r}, expected {version!r}")

    return _conformance(node_packages(f"conformance-{version}", {_CONFORMANCE: version}, check=check), version)


# --- the clients people connect with ----------------------------------------------------------


def client_tools() -> NodeTools:
    """The MCP Inspector and mcp-remote at their pinned versions. Run them as the Connect page
    says (`npx -y <package> …`) with `cwd=tools.root` and `env=tools.env()`: npx then runs these
    copies on Node 22, offline."""

    def check(tools: NodeTools) -> None:
        done = subprocess.run(["npx", "-y", _INSPECTOR, "--version"], cwd=tools.root, env=tools.env(),
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if done.stdout.strip() != INSPECTOR_VERSION:
            raise NodeToolsUnavailable(f"`npx {_INSPECTOR} --version` said {done.stdout!r} {_tail(done.stderr)}")

    if shutil.which("npx") is None:
        raise NodeToolsUnavailable("npx not on PATH: the client tests run the Connect page's `npx` commands "
                                   "(on Debian, apt-get install npm)")
    return node_packages(f"mcp-clients-inspector-{INSPECTOR_VERSION}-remote-{MCP_REMOTE_VERSION}",
                         {_INSPECTOR: INSPECTOR_VERSION, _MCP_REMOTE: MCP_REMOTE_VERSION}, check=check)


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
