"""What a tool handler returns goes out as plain JSON types and valid Unicode."""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid

from mcpapi.tools import _encode, _scalar_strings, jsonable


def test_values_a_client_may_hand_back_become_plain_json() -> None:
    instant = dt.datetime(2026, 12, 6, 1, 2, 3, tzinfo=dt.UTC)
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    value = {"at": instant, "day": instant.date(), "id": ident, "pair": (1, 2), "set": {3, 1}, "none": None,
             "nested": [{"x": 1.5, "ok": True}], "text": "naïve – ✓ 😀"}
    assert jsonable(value) == {
        "at": "2026-12-06T01:02:03+00:00", "day": "2026-12-06", "id": str(ident), "pair": [1, 2], "set": [1, 3],
        "none": None, "nested": [{"x": 1.5, "ok": True}], "text": "naïve – ✓ 😀"}


def test_the_result_is_a_copy() -> None:
    value = {"hits": [{"value": "a"}]}
    converted = jsonable(value)
    value["hits"][0]["value"] = "b"
    assert converted == {"hits": [{"value": "a"}]}


def test_lone_surrogates_become_replacement_characters_wherever_they_are() -> None:
    value = {"value": "a\ud800b", "key\udc00": ["\udfff", {"deep": "x\ud83d"}], "fine": "ok"}
    converted = jsonable(value)
    assert converted == {"value": "a\ufffdb", "key\ufffd": ["\ufffd", {"deep": "x\ufffd"}], "fine": "ok"}
    json.dumps(converted, ensure_ascii=False).encode()  # valid UTF-8 throughout


def test_a_surrogate_pair_split_over_two_code_points_is_its_character() -> None:
    assert jsonable({"emoji": "\ud83d\ude00", "lone": "\ud83d!"}) == {"emoji": "😀", "lone": "\ufffd!"}


def test_keys_that_are_not_text_and_numbers_json_cannot_spell_come_out_as_before() -> None:
    value = {1: "a", None: "b", False: "c", 2.5: "d", "n": float("nan"), "i": float("inf"), "big": 2**70}
    converted = jsonable(value)
    before = _scalar_strings(json.loads(json.dumps(value, default=_encode)))
    assert converted.keys() == before.keys() == {"1", "null", "false", "2.5", "n", "i", "big"}
    assert math.isnan(converted["n"]) and math.isnan(before["n"])
    assert {k: v for k, v in converted.items() if k != "n"} == {k: v for k, v in before.items() if k != "n"}
