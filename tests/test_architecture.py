"""The architecture, enforced: which package may import which, no import cycles
(function-local imports included), and interfaces that reach the database only
through the services.

The graph is read from the source with `ast`, so an import inside a function
counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("contract", "mcpapi", "memoryhub", "reviews")

# The memory domain: models, the authority, the services, the tasks and what they stand on.
DOMAIN = (
    "memoryhub.models", "memoryhub.access", "memoryhub.errors", "memoryhub.embeddings", "memoryhub.tasks",
    "memoryhub.celery", "memoryhub.services",
)
# Where the domain and the MCP layer meet.
ADAPTER = "memoryhub.mcp_adapter"
# Interfaces: they parse input, call one service and render.
INTERFACES = (
    "memoryhub.pages", "reviews", "memoryhub.api", "memoryhub.management", "memoryhub.tasks",
    "memoryhub.mcp_adapter", "memoryhub.oauth.views",
)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the module imported (resolved to one of ours when it is ours)
    line: int
    local: bool  # inside a function


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def source_files() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


MODULES = {module_name(path): path for path in source_files()}


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: str) -> list[Import]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[Import] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                found.extend(Import(module, alias.name, child.lineno, inner) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                target = _resolve(module, child, path.name == "__init__.py")
                for alias in child.names:
                    # `from memoryhub.services import search` imports a module.
                    candidate = f"{target}.{alias.name}"
                    found.append(Import(module, candidate if candidate in MODULES else target, child.lineno, inner))
            visit(child, inner)

    visit(tree, False)
    return found


ALL_IMPORTS = [item for module in MODULES for item in imports_of(module)]


def within(module: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def violations(importers: tuple[str, ...] | str, forbidden: tuple[str, ...] | str,
               allowed: tuple[str, ...] = ()) -> list[str]:
    return [
        f"{item.module}:{item.line} imports {item.target}"
        for item in ALL_IMPORTS
        if within(item.module, importers) and within(item.target, forbidden) and not within(item.target, allowed)
    ]


def test_the_graph_is_read():
    # The rules below mean nothing if the walk finds nothing.
    assert len(MODULES) > 60
    assert any(item.local for item in ALL_IMPORTS), "function-local imports are part of the graph"


def test_the_domain_imports_nothing_from_mcpapi():
    assert violations(DOMAIN, "mcpapi") == []


def test_mcpapi_imports_nothing_from_django_or_the_domain():
    assert violations("mcpapi", ("django", "memoryhub", "reviews", "rest_framework", "oauth2_provider")) == []


def test_only_the_adapter_imports_mcpapi():
    importers = sorted({item.module for item in ALL_IMPORTS
                        if within(item.target, "mcpapi") and not within(item.module, "mcpapi")})
    assert importers and all(within(module, ADAPTER) for module in importers), importers


def test_the_contract_module_imports_nothing_of_ours_or_any_library():
    """The contract's data and the receipt chain's format and verifier: only
    the standard library, so an auditor can run the verifier on its own."""
    imported = {item.target for item in ALL_IMPORTS
                if within(item.module, "contract") and item.module != "contract.receipt_chain"}
    assert imported <= {"__future__", "typing", "contract"}, imported
    verifier = {item.target.split(".")[0] for item in ALL_IMPORTS if item.module == "contract.receipt_chain"}
    assert verifier <= set(sys.stdlib_module_names) | {"__future__"}, verifier


def test_services_do_not_reach_up_to_interfaces():
    assert violations(DOMAIN, INTERFACES, allowed=("memoryhub.tasks", "memoryhub.celery")) == []


def test_no_import_cycles_function_local_imports_included():
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for item in ALL_IMPORTS:
        if item.target in MODULES and item.target != item.module:
            graph[item.module].add(item.target)
    cycles = [component for component in strongly_connected(graph) if len(component) > 1]
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(sorted(c)) for c in cycles)


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components


def test_the_cycle_check_finds_a_cycle():
    components = strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert {"a", "b", "c"} in components and {"d"} in components


def orm_queries(module: str) -> list[str]:
    """Places where a module runs a query itself (`Model.objects…`)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{module}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "objects"]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if within(m, INTERFACES)))
def test_interfaces_reach_the_database_only_through_services(module):
    """No view, console page, API view, command, task or adapter queries the
    ORM to decide or to write: it calls a service (which asks memoryhub.access)."""
    assert orm_queries(module) == []


def test_one_tasks_module():
    with_tasks = sorted(m for m in MODULES if "shared_task" in MODULES[m].read_text() and m != "memoryhub.celery")
    assert with_tasks == ["memoryhub.tasks"]
