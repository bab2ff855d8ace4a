"""`shown`: text from data as a reader must see it.

Stored text may carry characters that change how the rest of it displays, or
that do not display at all: bidi embeddings, overrides and isolates (a file
named "invoice\u202egpj.exe" reads as "invoiceexe.jpg"; a speaker
"\u202eecilA" reads as "Alice") and control characters (ESC, BEL). Shown
raw, a reviewer or a reader would see something other than what is stored.
`shown` escapes the text and writes each such character as a visible marker
naming it, inside <bdi>, so the value cannot reorder what surrounds it either.
Line breaks and tabs stay what they are (`linebreaksbr` may follow).
"""

from __future__ import annotations

import unicodedata

from django import template
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

# Bidi formatting characters (Unicode's Bidi_Control): marks, embeddings,
# overrides, isolates.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
KEPT = frozenset("\n\t")


def hidden_character(char: str) -> bool:
    """Whether `char` would act on the display instead of being seen."""
    return char in BIDI_CONTROLS or (unicodedata.category(char) == "Cc" and char not in KEPT)


def _marker(char: str) -> str:
    code = f"U+{ord(char):04X}"
    return format_html('<span class="hidden-char" title="{}">[{}]</span>',
                       unicodedata.name(char, "control character"), code)


@register.filter
def has_hidden(value: object) -> bool:
    """Whether the text holds a character `shown` would mark."""
    return any(hidden_character(char) for char in ("" if value is None else str(value)))


@register.filter(needs_autoescape=True)
def shown(value: object, autoescape: bool = True) -> SafeString:
    text = "" if value is None else str(value)
    escape = conditional_escape if autoescape else (lambda part: part)
    parts: list[str] = []
    plain: list[str] = []
    for char in text:
        if hidden_character(char):
            if plain:
                parts.append(str(escape("".join(plain))))
                plain = []
            parts.append(_marker(char))
        else:
            plain.append(char)
    if plain:
        parts.append(str(escape("".join(plain))))
    return mark_safe(f"<bdi>{''.join(parts)}</bdi>")  # noqa: S308 - every part escaped or built by format_html
