"""Checking arguments at the service boundary against the contract's limits.

The MCP layer validates the same bounds against its schemas, but the services
are also reached from the web pages, the REST APIs, commands and tasks: the
domain refuses an out-of-range or unstorable argument itself, with an
`InvalidArgument` naming the field. The numbers are `contract.limits`'.

Lengths are counted in characters (Python `len`, Unicode code points), the
unit JSON Schema's maxLength uses; so the 32 KiB content limit is 32768
characters, the same number the MCP schema advertises.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
import uuid
from collections.abc import Sequence
from typing import Any

from django.utils.text import slugify

from memoryhub.errors import InvalidArgument


def unstorable(text: str) -> str | None:
    """Why `text` cannot be stored or passed on (PostgreSQL text holds no NUL; a
    lone surrogate, a broken \\ud800 escape, has no UTF-8 form), or None."""
    if "\x00" in text:
        return "contains a NUL character (\\u0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains an unpaired surrogate; send valid UTF-8"
    return None


def ascii_digits(text: str) -> bool:
    """Whether `text` is a plain decimal number, ASCII digits only
    (str.isdigit() also says yes to "²", which int() refuses)."""
    return text.isascii() and text.isdigit()


def has_control_character(text: str) -> bool:
    """Whether `text` holds a control character (Unicode Cc: line breaks, tabs,
    ESC, NUL...): never part of an identifier or a link."""
    return any(unicodedata.category(char) == "Cc" for char in text)


def storable(value: str, *, field: str) -> str:
    """`value`, when the database can hold it; refused naming the field otherwise."""
    why = unstorable(value)
    if why is not None:
        raise InvalidArgument(f"{field} {why}.", field=field)
    return value


def checked_text(value: Any, *, field: str, max_chars: int, required: bool = False) -> str:
    """A string of at most `max_chars` characters (None reads as empty)."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InvalidArgument(f"{field} must be a string.", field=field)
    if required and not value.strip():
        raise InvalidArgument(f"{field} must contain some text.", field=field)
    if len(value) > max_chars:
        raise InvalidArgument(
            f"{field} is {len(value)} characters long; the limit is {max_chars}.", field=field
        )
    return storable(value, field=field)


def checked_name(value: Any, *, field: str, max_chars: int, what: str) -> str:
    """A name as stored: a slug (ASCII letters, digits, hyphens, underscores),
    in lower case, spaces written as hyphens ("Run Books" is "run-books").
    A name that would lose characters on the way is refused, with the form it
    could take, and never rewritten into it: "<b>x</b>" stored as "bxb", or an
    ESC sequence as "31mred0m", would be a name nobody chose."""
    text = checked_text(value, field=field, max_chars=max_chars, required=True).strip()
    slug = slugify(text)
    if not text.isascii() or slug != _SPACES.sub("-", text.lower()):
        could = f" (it could be {slug!r})" if slug else ""
        raise InvalidArgument(
            f"{what} needs a name of letters, digits, hyphens or underscores, beginning and ending with a letter or "
            f"digit; {ascii(text)} is not one{could}.",
            field=field,
        )
    return slug


# Spaces and hyphens only: a tab, a line break or a separator character would
# be rewritten into a hyphen by slugify, and is refused instead.
_SPACES = re.compile(r"[ -]+")

# Scripts whose letters pass for each other ("а" is Cyrillic, "ο" Greek).
LOOK_ALIKE_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")


def look_alike_scripts(text: str) -> list[str]:
    """The look-alike scripts whose letters `text` mixes (two or more), else
    []: "\u0430da" mixes Cyrillic and Latin and reads as "ada". One script
    alone, or letters of other scripts, never count."""
    scripts = {unicodedata.name(char, "").split(" ", 1)[0] for char in text if char.isalpha()}
    mixed = [script for script in LOOK_ALIKE_SCRIPTS if script in scripts]
    return mixed if len(mixed) > 1 else []


# Cyrillic and Greek letters that pass for Latin ones, by what they show: a
# name's skeleton reads each as the Latin letter it passes for. (A small part
# of Unicode's confusables table: the letters of the scripts most often mixed
# up with Latin.)
_PASSES_FOR_LATIN = str.maketrans({
    **dict(zip("аеорсухѕіјԁһӏԛԝѵүАВЕКМНОРСТХЅІЈԀҮԚԜӀ", "aeopcyxsijdhlqwvyabekmhopctxsijdyqwl", strict=True)),
    **dict(zip("οανρικυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "oavpikuxabezhikmnoptyx", strict=True)),
})


def name_skeleton(text: str) -> str:
    """What a name shows, to compare with others: "\u0430\u0501\u0430" (all
    Cyrillic) and "ADA" both read "ada"."""
    return unicodedata.normalize("NFKC", text).translate(_PASSES_FOR_LATIN).casefold()


def passes_for_another(text: str) -> str | None:
    """Why a name could read as another one, or None: it holds characters that
    stand for others (fullwidth "ａ", mathematical "𝖺", the Kelvin sign, Roman
    numerals, the Hangul filler, which shows nothing: compatibility
    normalisation changes them), or it mixes look-alike scripts. A name of one script that reads as a
    name already taken ("асе" as "ace") is found by `name_skeleton`."""
    normal = unicodedata.normalize("NFKC", text)
    if normal != text:
        return f"holds characters that stand for others (it would read as {ascii(normal)})"
    mixed = look_alike_scripts(text)
    if mixed:
        return f"mixes {' and '.join(script.title() for script in mixed)} letters"
    return None


def checked_int(value: Any, *, field: str, minimum: int, maximum: int, default: int) -> int:
    if value is None:
        return default
    # bool is an int in Python; `limit=True` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{field} must be an integer.", field=field)
    if not minimum <= value <= maximum:
        raise InvalidArgument(f"{field} must be between {minimum} and {maximum}; got {value}.", field=field)
    return value


def checked_strings(value: Any, *, field: str, max_items: int, item_max_chars: int) -> tuple[str, ...]:
    """A list of non-empty strings in canonical form (sorted, once each)."""
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidArgument(f"{field} must be a list of strings.", field=field)
    if len(value) > max_items:
        raise InvalidArgument(f"{field} has {len(value)} items; the limit is {max_items}.", field=field)
    items = []
    for item in value:
        if not isinstance(item, str) or not item:
            raise InvalidArgument(f"Every item of {field} must be a non-empty string.", field=field)
        if len(item) > item_max_chars:
            raise InvalidArgument(
                f"An item of {field} is longer than {item_max_chars} characters.", field=field
            )
        items.append(storable(item, field=field))
    # Order and repetition carry no meaning; a canonical form keeps receipts comparable.
    return tuple(sorted(set(items)))


def checked_instant(value: Any, *, field: str) -> dt.datetime | None:
    """An RFC 3339 date-time (or datetime) with a UTC offset, in UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise InvalidArgument(f"{field} must be an RFC 3339 date-time.", field=field) from None
    if not isinstance(value, dt.datetime):
        raise InvalidArgument(f"{field} must be a date-time.", field=field)
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgument(f"{field} must carry a UTC offset.", field=field)
    try:
        return value.astimezone(dt.UTC)
    except OverflowError:
        # 0001-01-01T00:00:00+01:00 has no UTC instant a datetime can hold.
        raise InvalidArgument(f"{field} is out of range.", field=field) from None


def uuid_or_none(value: Any) -> uuid.UUID | None:
    """`value` as a UUID, or None when it is not one (an id that cannot exist)."""
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None
