"""The tools' schema validator: its compiled check never lets through what
jsonschema refuses, and what it says is jsonschema's, word for word.

Every tool's input and output schema, on a valid instance of each and on
instances with one value replaced by another JSON value (wrong types, bounds
and one past them, booleans where numbers go, integral floats, date-times
with and without an offset, unknown arguments, missing required ones).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpapi.catalog import CATALOG
from mcpapi.validation import SchemaValidator

SCHEMAS = [(f"{spec.name} {side}", schema) for spec in CATALOG
           for side, schema in (("input", spec.input_schema), ("output", spec.output_schema))]


def _valid(schema: Mapping[str, Any]) -> Any:
    """The least instance of `schema` that passes it."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    kind = next(k for k in kind if k != "null") if isinstance(kind, list) else kind
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: _valid(properties[name]) for name in schema.get("required", [])}
    if kind == "array":
        return [_valid(schema["items"])] if "items" in schema else []
    if kind == "string":
        return "2026-03-01T09:30:00Z" if schema.get("format") == "date-time" else "x" * schema.get("minLength", 1)
    if kind == "integer":
        return schema.get("minimum", 1)
    if kind == "number":
        return schema.get("minimum", 0.5)
    if kind == "boolean":
        return True
    return None


def _paths(schema: Mapping[str, Any], at: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Mapping[str, Any]]]:
    """Every place of a valid instance a value can be put, with its schema."""
    found = [(at, schema)]
    for name, subschema in schema.get("properties", {}).items():
        found += _paths(subschema, (*at, name))
    if isinstance(schema.get("items"), Mapping):
        found += _paths(schema["items"], (*at, 0))
    return found


def _bounds(schema: Mapping[str, Any]) -> list[Any]:
    """Each bound of a schema, and one past it."""
    values: list[Any] = []
    for keyword, step in (("minimum", -1), ("maximum", 1)):
        if keyword in schema:
            values += [schema[keyword], schema[keyword] + step, float(schema[keyword]), schema[keyword] + step / 2]
    for keyword, step in (("minLength", -1), ("maxLength", 1)):
        if keyword in schema:
            values += ["é" * schema[keyword], "é" * max(0, schema[keyword] + step)]
    if "maxItems" in schema:
        item = _valid(schema["items"]) if "items" in schema else "x"
        values += [[item] * schema["maxItems"], [item] * (schema["maxItems"] + 1)]
    return values


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0, 1, 1.0, -1, 0.5, "", "x", "2026-03-01T09:30:00Z", "2026-03-01T09:30:00",
                       "2026-03-01", "2026-13-01T09:30:00Z", "2026-03-01t09:30:00z", "\x00", "\ud800"])
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=6,
)


def _replaced(instance: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    changed = copy.deepcopy(instance)
    holder = changed
    for step in path[:-1]:
        if isinstance(holder, dict):
            holder = holder.setdefault(step, {})
        elif isinstance(holder, list) and holder:
            holder = holder[0]
        else:
            return changed
    if isinstance(holder, dict):
        holder[path[-1]] = value
    elif isinstance(holder, list):
        holder[:1] = [value]
    return changed


def _said_by_jsonschema(validator: SchemaValidator, instance: Any) -> list[str]:
    return validator.explained(instance)


@pytest.mark.parametrize(("name", "schema"), SCHEMAS, ids=[name for name, _ in SCHEMAS])
def test_bounds_types_and_missing_values_are_judged_as_jsonschema_judges_them(name, schema):
    validator = SchemaValidator(schema)
    base = _valid(schema)
    assert validator.problems(base) == [], name
    refused = 0
    for path, subschema in _paths(schema):
        for value in [*_bounds(subschema), True, False, None, 1.0, 2.5, "text", [], {}, "2026-03-01T09:30:00",
                      "2026-03-01T09:30:00+01:00"]:
            instance = _replaced(base, path, value)
            said = validator.problems(instance)
            assert said == _said_by_jsonschema(validator, instance), (name, path, value)
            refused += bool(said)
    for required in schema.get("required", []):
        instance = {key: value for key, value in base.items() if key != required}
        assert validator.problems(instance) == _said_by_jsonschema(validator, instance) != []
    if schema.get("additionalProperties") is False:
        assert validator.problems({**base, "subject": "someone else"}) != []
    assert refused > 0, name


VALIDATORS = {name: SchemaValidator(schema) for name, schema in SCHEMAS}


@pytest.mark.parametrize(("name", "schema"), SCHEMAS, ids=[name for name, _ in SCHEMAS])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_json_value_anywhere_is_judged_as_jsonschema_judges_it(name, schema, data):
    validator = VALIDATORS[name]
    path, _ = data.draw(st.sampled_from(_paths(schema)))
    instance = _replaced(_valid(schema), path, data.draw(JSON))
    assert validator.problems(instance) == _said_by_jsonschema(validator, instance)


def test_judging_fills_in_nothing():
    """The compiled check could write a schema's defaults into what it judges."""
    search = next(spec for spec in CATALOG if spec.name == "memory_search")
    assert any("default" in prop for prop in search.input_schema["properties"].values())
    arguments = {"query": "where is the VPN config?"}
    assert search.input_validator.problems(arguments) == [] and arguments == {"query": "where is the VPN config?"}
    arguments = {"query": "where is the VPN config?", "limit": 0}
    assert search.input_validator.problems(arguments) != [] and arguments == {"query": "where is the VPN config?",
                                                                               "limit": 0}


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"q": {"type": "string", "pattern": "^a"}}},
    {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    {"type": "array", "items": {"type": "string", "uniqueItems": True}},
    {"type": "object", "additionalProperties": {"oneOf": [{"type": "string"}]}},
    {"type": "object", "properties": {"kind": {"enum": ["a", 1]}}},
    {"type": "object", "properties": {"kind": {"enum": [True, "b"]}}},
    {"type": "object", "properties": {"mail": {"type": "string", "format": "email"}}},
])
def test_what_the_two_validators_may_read_differently_is_refused(schema):
    with pytest.raises(ValueError, match="may not read alike"):
        SchemaValidator(schema)
