"""No tool may take an identity: the startup check behind that guarantee.

Who the caller is comes from the verified token only. Every registered tool's
input schema is walked, nested schemas included, and any property or required
name that spells an identity field stops the server from starting.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import mcp_types as types

# Normalised spellings (lowercase, letters and digits only). Variants ending
# in "id", "ids" or "s" are caught by `_stems`, so "user_ids" and "Owners" match.
IDENTITY_FIELD_NAMES: Final = frozenset(
    {
        "user",
        "username",
        "useremail",
        "uid",
        "subject",
        "sub",
        "tenant",
        "workspace",
        "org",
        "organization",
        "organisation",
        "account",
        "member",
        "role",
        "roleaudience",
        "onbehalfof",
        "behalfof",
        "principal",
        "principalkind",
        "impersonate",
        "impersonating",
        "impersonation",
        "asuser",
        "runas",
        "author",
        "owner",
        "actor",
        "actingas",
        "actas",
        "caller",
        "identity",
        "email",
        "client",
        "scope",
        "permission",
        "audience",
        "reader",
        "creator",
        "assignee",
        "delegate",
        "delegator",
    }
)

# Keywords whose values are data, not schemas: an enum value "user" is fine.
_DATA_KEYWORDS: Final = frozenset({"default", "examples", "const", "enum", "description", "title", "$comment"})
# Keywords mapping field names to schemas (or, for dependentRequired, to names).
_FIELD_MAP_KEYWORDS: Final = frozenset({"properties", "patternProperties", "dependentRequired", "dependentSchemas"})
# Keywords mapping definition names, which are not field names, to schemas.
_SCHEMA_MAP_KEYWORDS: Final = frozenset({"$defs", "definitions"})


class IdentityFieldError(RuntimeError):
    """A tool schema accepts an identity argument; the server must not start."""


def normalise_field_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _stems(normalised: str) -> Iterator[str]:
    yield normalised
    for suffix in ("ids", "id", "s", "name", "names"):
        if normalised.endswith(suffix) and len(normalised) > len(suffix):
            yield normalised[: -len(suffix)]


def is_identity_field(name: str) -> bool:
    return any(stem in IDENTITY_FIELD_NAMES for stem in _stems(normalise_field_name(name)))


def identity_fields_in_schema(schema: Any, path: str = "") -> list[str]:
    """Paths of every identity-like field name anywhere in `schema`."""
    found: list[str] = []
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            found.extend(identity_fields_in_schema(item, f"{path}[{index}]"))
        return found
    if not isinstance(schema, Mapping):
        return found
    for keyword, value in schema.items():
        here = f"{path}/{keyword}"
        if keyword in _DATA_KEYWORDS:
            continue
        if keyword in _FIELD_MAP_KEYWORDS and isinstance(value, Mapping):
            for name, sub in value.items():
                if is_identity_field(str(name)):
                    found.append(f"{here}/{name}")
                found.extend(_names_or_schema(sub, f"{here}/{name}"))
        elif keyword in _SCHEMA_MAP_KEYWORDS and isinstance(value, Mapping):
            for name, sub in value.items():
                found.extend(identity_fields_in_schema(sub, f"{here}/{name}"))
        elif keyword == "required" and isinstance(value, list):
            found.extend(_names_or_schema(value, here))
        else:
            found.extend(identity_fields_in_schema(value, here))
    return found


def _names_or_schema(value: Any, path: str) -> list[str]:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return [f"{path}/{name}" for name in value if is_identity_field(name)]
    return identity_fields_in_schema(value, path)


def assert_no_identity_fields(tools: Iterable[types.Tool]) -> None:
    """Raise `IdentityFieldError` naming every offending tool and field."""
    offences = [f"{tool.name}: {field}" for tool in tools for field in identity_fields_in_schema(tool.input_schema)]
    if offences:
        raise IdentityFieldError(
            "tool schemas must not accept an identity argument (identity comes from the token): " + "; ".join(offences)
        )
