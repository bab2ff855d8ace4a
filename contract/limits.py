"""The request and response limits of contracts 000 and 001, defined once.

mcpapi's tool schemas advertise and enforce them (`mcpapi.schemas`, `mcpapi.budget`);
the memory domain enforces the same numbers on every path that reaches it, the web
console, the ingestion API and tasks included (`memoryhub.services.arguments`). This
module imports nothing, so an edge process without the domain has it too.

Lengths are in characters (Unicode code points, JSON Schema's maxLength unit), so the
32 KiB content limit is 32,768 characters. Item-length bounds inside arrays, and the
bounds on `idempotency_key` and `receipt_id`, are ours: the contract leaves them open
and the body limit alone would let one array item take 256 KiB.
"""

from __future__ import annotations

from typing import Final

QUERY_MAX_CHARS: Final = 2000
LIMIT_MIN: Final = 1
LIMIT_MAX: Final = 50
LIMIT_DEFAULT: Final = 10
RESOURCE_IDS_MAX_ITEMS: Final = 32
AGENTS_MAX_ITEMS: Final = 16
TASK_MAX_CHARS: Final = 200
TASK_TAGS_MAX_ITEMS: Final = 8
CONTENT_MAX_CHARS: Final = 32 * 1024
SESSION_ID_MAX_CHARS: Final = 128
RESOURCE_MAX_CHARS: Final = 512
IDEMPOTENCY_KEY_MAX_CHARS: Final = 256
RECEIPT_ID_MAX_CHARS: Final = 256
AGENT_NAME_MAX_CHARS: Final = 256
TASK_TAG_MAX_CHARS: Final = 64

# Response budgets (contract 001): a fragment's value, a whole search result.
FRAGMENT_VALUE_MAX_BYTES: Final = 4 * 1024
RESULT_MAX_BYTES: Final = 128 * 1024
