"""Scopes (decision 3) and which one each operation needs.

One table for every interface that asks: the MCP catalog (which tool needs
which scope, for its challenges), and the memory domain's own check
(`memoryhub.access.require_scope`), which the in-process client and the
internal API both go through. `whoami` needs none.
"""

from __future__ import annotations

from typing import Final

MEMORY_READ: Final = "memory.read"
MEMORY_WRITE: Final = "memory.write"
MEMORY_AUDIT: Final = "memory.audit"
MEMORY_SCOPES: Final = (MEMORY_READ, MEMORY_WRITE, MEMORY_AUDIT)

# operation (the MCP tool's name) -> the scope it needs, or None.
OPERATION_SCOPES: Final[dict[str, str | None]] = {
    "memory_search": MEMORY_READ,
    "memory_write": MEMORY_WRITE,
    "memory_receipt": MEMORY_AUDIT,
    "whoami": None,
}
