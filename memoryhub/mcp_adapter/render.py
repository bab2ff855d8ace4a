"""Contract 000's tool outputs, rendered from the domain's results, and the
MCP result budget.

The budget is applied once, here, through the search itself
(`SEARCH_RESULT_BUDGET`, a `ResultBudget`): the search drops trailing hits
that do not fit before it writes its receipt, so the receipt records exactly
the fragments the client receives. The measure is the MCP layer's own
(`mcpapi.budget.tool_result_size`: the whole tool result as it goes on the
wire); `mcpapi` then refuses, never cuts, a result that would not fit.
"""

from __future__ import annotations

import math
from typing import Any, Final

from contract.limits import FRAGMENT_VALUE_MAX_BYTES, RESULT_MAX_BYTES
from mcpapi.budget import clip_utf8, tool_result_size
from memoryhub.services.receipts import ReceiptReplay
from memoryhub.services.search import Hit, SearchResult, budget_register, iso_instant
from memoryhub.services.write import WriteOutcome

iso = iso_instant


# --------------------------------------------------------------------------- memory_search


def fragment_output(hit: Hit) -> dict[str, Any]:
    fragment = hit.fragment
    value = clip_utf8(fragment.value, FRAGMENT_VALUE_MAX_BYTES)
    score = hit.score
    output = {
        "id": str(fragment.pk),
        "value": value,
        "value_truncated": value != fragment.value,
        "confidence": round(float(fragment.confidence), 4),
        "grounding_status": hit.provenance.grounding or fragment.grounding_status,
        "created_at": iso(fragment.created_at),
        "agents": list(hit.provenance.agents),
        "resources": [{"id": d.id, "title": d.title, "uri": d.uri} for d in hit.provenance.documents],
        "score": None if score is None or math.isnan(score) else round(score, 4),
    }
    if hit.provenance.grounding_note:
        output["grounding_note"] = hit.provenance.grounding_note
    return output


def search_output(result: SearchResult, *, hits: int | None = None) -> dict[str, Any]:
    """The memory_search output; `hits` renders only the first so many (truncated)."""
    shown = result.hits if hits is None else result.hits[:hits]
    return {
        "fragments": [fragment_output(hit) for hit in shown],
        "receipt_id": result.receipt_id,
        "as_of": iso(result.as_of),
        "abstained": result.abstained,
        "abstain_reason": result.abstain_reason,
        "truncated": result.truncated or len(shown) < len(result.hits),
        "notice": result.notice,
    }


class SearchResultBudget:
    """The contract's 128 KiB bound on a whole memory_search tool result."""

    name: Final = "mcp-tool-result"

    def __init__(self, max_bytes: int = RESULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes

    def fits(self, result: SearchResult, hits: int) -> bool:
        return tool_result_size(search_output(result, hits=hits)) <= self.max_bytes

    def fitting(self, result: SearchResult) -> int:
        if self.fits(result, len(result.hits)):
            return len(result.hits)
        # The most leading hits that fit: every prefix of a fitting prefix fits.
        low, high = 0, len(result.hits) - 1
        while low < high:
            middle = (low + high + 1) // 2
            if self.fits(result, middle):
                low = middle
            else:
                high = middle - 1
        return low


SEARCH_RESULT_BUDGET = budget_register(SearchResultBudget())


# --------------------------------------------------------------------------- memory_write


def write_output(outcome: WriteOutcome) -> dict[str, Any]:
    output: dict[str, Any] = {
        "outcome": outcome.summary,
        "results": [
            {"operation": r.operation, "fragment_id": r.fragment_id,
             "superseded_fragment_id": r.superseded_fragment_id, "reason": r.reason, "explanation": r.explanation}
            for r in outcome.results
        ],
        "review_state": outcome.review_state,
        "dropped": outcome.dropped,
        "drop_reasons": outcome.drop_reasons,
    }
    if outcome.proposal_id is not None:
        output["proposal_id"] = outcome.proposal_id
    return output


# --------------------------------------------------------------------------- memory_receipt


def receipt_output(replay: ReceiptReplay) -> dict[str, Any]:
    request = replay.request
    return {
        "receipt_id": replay.receipt.pk,
        "query": request.get("query", ""),
        "as_of": iso(replay.receipt.as_of),
        "agents": list(request.get("agents") or []),
        "roles": list(replay.receipt.roles or []),
        "reader": replay.reader,
        "served_then": replay.served_then,
        "served_now": replay.served_now,
        "missing_now": replay.missing_now,
        "extra_now": replay.extra_now,
        "replayed": replay.replayed,
        "replayed_as_of": iso(replay.replayed_as_of),
        "note": replay.note,
        "grounding_changes": [
            {"id": change.fragment_id, "then": change.then, "now": change.now, "note": change.note}
            for change in replay.grounding_changes
        ],
        "chain": {
            "seq": replay.chain.seq,
            "hash": replay.chain.hash,
            "verified": replay.chain.verifies,
            "checkpoint_signed_at": iso(replay.chain.checkpoint.signed_at) if replay.chain.checkpoint else None,
            "note": replay.chain.note,
        },
    }
