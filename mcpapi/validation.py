"""Checking tool arguments and results against the advertised schemas."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import fastjsonschema
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError

from mcpapi.schemas import DATE_TIME_FIELDS, JSONSchema

# RFC 3339 needs a time and an offset; datetime.fromisoformat alone also takes
# bare dates and naive times, which would make "as_of" depend on server zone.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")

_formats = FormatChecker(formats=())


def _is_date_time(value: object) -> bool:
    """The date-time format, for both validators (a format judges strings only)."""
    if not isinstance(value, str):
        return True
    try:
        parse_date_time(value)
    except ValueError:
        return False
    return True


_formats.checks("date-time")(_is_date_time)


# Keywords fastjsonschema and jsonschema read alike on JSON values
# (annotations included; `enum` and `format` with the limits _unshared sets).
SHARED_KEYWORDS = frozenset({
    "type", "properties", "required", "items", "enum", "minimum", "maximum", "minLength", "maxLength", "maxItems",
    "additionalProperties", "format", "description", "title", "default", "examples",
})
# Keywords whose value is a map of names to schemas, or a schema (any other
# keyword that holds schemas is refused before they would be read).
_NAMED_SCHEMAS = frozenset({"properties"})
_SCHEMAS = frozenset({"items", "additionalProperties"})


def _unshared(schema: Any) -> set[str]:
    """What a schema and its subschemas use that the two validators may not
    read alike: a keyword outside SHARED_KEYWORDS, an enum holding anything
    but strings (fastjsonschema's `in` takes True for 1), a format other than
    date-time."""
    if not isinstance(schema, Mapping):
        return set()
    found = {keyword for keyword in schema if keyword not in SHARED_KEYWORDS}
    if "enum" in schema and not all(isinstance(value, str) for value in schema["enum"]):
        found.add("an enum of values other than strings")
    if "format" in schema and schema["format"] != "date-time":
        found.add(f"the format {schema['format']!r}")
    for keyword, value in schema.items():
        if keyword in _NAMED_SCHEMAS and isinstance(value, Mapping):
            for subschema in value.values():
                found |= _unshared(subschema)
        elif keyword in _SCHEMAS:
            found |= _unshared(value)
    return found


def parse_date_time(value: str) -> datetime:
    if not _RFC3339.fullmatch(value):
        raise ValueError(f"{value!r} is not an RFC 3339 date-time with a UTC offset")
    return datetime.fromisoformat(value.upper().replace("Z", "+00:00"))


class SchemaValidator:
    """A compiled validator that explains failures in words a model can act on.

    An instance is checked by the schema compiled into Python code
    (fastjsonschema), and only one that fails is walked again by jsonschema,
    for the words: jsonschema's walk took about 2 ms of every memory_search
    result. A schema may use only what both read alike, on JSON values (the
    instances here are: a tuple, which fastjsonschema would take for an
    array, never reaches a tool): the keywords of SHARED_KEYWORDS, an enum
    of strings only, and the date-time format, which both check with
    `parse_date_time`. Anything else is refused when the validator is made.
    The compiled check fills in no default: it only judges."""

    def __init__(self, schema: JSONSchema) -> None:
        Draft202012Validator.check_schema(schema)
        unshared = _unshared(schema)
        if unshared:
            raise ValueError(f"schema uses {sorted(unshared)}, which the two validators may not read alike")
        self._validator = Draft202012Validator(schema, format_checker=_formats)
        self._compiled = fastjsonschema.compile(dict(schema), formats={"date-time": _is_date_time},
                                                use_default=False)
        properties: Mapping[str, Any] = schema.get("properties", {})
        self._defaults = {name: prop["default"] for name, prop in properties.items() if "default" in prop}
        self._integers = [name for name, prop in properties.items() if prop.get("type") == "integer"]

    def problems(self, instance: Any) -> list[str]:
        try:
            self._compiled(instance)
        except fastjsonschema.JsonSchemaException:
            pass
        else:
            return []
        return self.explained(instance)

    def explained(self, instance: Any) -> list[str]:
        """jsonschema's judgment of `instance`, in words (what `problems` says
        of an instance the compiled check refuses)."""
        errors = sorted(self._validator.iter_errors(instance), key=lambda e: [str(part) for part in e.absolute_path])
        return [_describe(error) for error in errors]

    def parse_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults applied and date-times parsed; call only after `problems` is empty."""
        parsed = {**self._defaults, **arguments}
        for name in self._integers:
            # JSON Schema counts 10.0 as an integer; the client should not see a float.
            if isinstance(parsed.get(name), float):
                parsed[name] = int(parsed[name])
        for name in DATE_TIME_FIELDS:
            if isinstance(parsed.get(name), str):
                parsed[name] = parse_date_time(parsed[name])
        return parsed


def text_problems(instance: Any, where: str = "") -> list[str]:
    """Strings no store can keep, with where they are: lone surrogates (JSON's
    `"\\ud800"` parses, but it is no Unicode text and has no UTF-8 form) and NUL
    (PostgreSQL text cannot hold U+0000). Argument names are checked too."""
    problems: list[str] = []
    if isinstance(instance, str):
        problem = _unstorable(instance)
        if problem is not None:
            problems.append(f"{where or 'arguments'} {problem}")
    elif isinstance(instance, Mapping):
        for key, value in instance.items():
            name = str(key)
            problem = _unstorable(name)
            if problem is not None:
                problems.append(f"{_join(where, _shortened(ascii(name), 80))}: the argument name {problem}")
            else:
                problems += text_problems(value, _join(where, _shortened(name, 80)))
    elif isinstance(instance, list | tuple):
        for index, item in enumerate(instance):
            problems += text_problems(item, _join(where, str(index)))
    return problems


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _join(where: str, part: str) -> str:
    return f"{where}.{part}" if where else part


def _unstorable(text: str) -> str | None:
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "contains a NUL character (U+0000), which cannot be stored; remove it"
    return (
        f"contains a lone surrogate (U+{ord(found.group()):04X}), which is not valid Unicode text; "
        "a character outside the Basic Multilingual Plane must be sent as a complete surrogate pair"
    )


def _describe(error: ValidationError) -> str:
    where = ".".join(str(part) for part in error.absolute_path) or "arguments"
    validator = error.validator
    bound = error.validator_value
    if validator == "maxLength":
        return f"{where} is longer than {bound} characters"
    if validator == "minLength":
        return f"{where} must not be empty" if bound == 1 else f"{where} is shorter than {bound} characters"
    if validator == "maxItems":
        return f"{where} has more than {bound} items"
    if validator == "minimum":
        return f"{where} must be at least {bound}"
    if validator == "maximum":
        return f"{where} must be at most {bound}"
    if validator == "additionalProperties":
        return f"{where}: {_shortened(error.message)}; this tool takes no such argument"
    if validator == "format":
        return f"{where} must be an RFC 3339 date-time with a UTC offset, e.g. 2026-03-01T09:30:00Z"
    return f"{where}: {_shortened(error.message)}"


def _shortened(text: str, limit: int = 200) -> str:
    # jsonschema quotes the offending value, which may be 32 KiB long.
    return text if len(text) <= limit else text[: limit - 1] + "…"
