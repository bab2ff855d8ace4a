"""Writing an export as JSON Lines for a command: to standard output, or to a
file written whole or not at all (a `.partial` file renamed at the end, mode
0600: an export holds a person's memory or a workspace's reads)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from typing import Any


def json_lines_write(items: Iterable[dict[str, Any]], output: str, *, count: str, ascii_only: bool) -> int:
    """Write `items` to `output` ('-': standard output); how many were of kind `count`.
    OSError for the file; whatever `items` raises passes through, and no file is left."""
    partial = f"{output}.partial"
    handle = sys.stdout if output == "-" else os.fdopen(  # noqa: SIM115 - closed below
        os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w",
        encoding="ascii" if ascii_only else "utf-8")
    written = 0
    try:
        for item in items:
            handle.write(json.dumps(item, sort_keys=True, ensure_ascii=ascii_only) + "\n")
            written += item["kind"] == count
        if handle is not sys.stdout:
            handle.close()
            os.replace(partial, output)
    finally:
        if handle is not sys.stdout:
            handle.close()
            if os.path.exists(partial):
                os.unlink(partial)
    return written
