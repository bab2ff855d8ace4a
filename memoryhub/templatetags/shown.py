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

import re
import unicodedata

from django import template
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeData, SafeString, mark_safe

register = template.Library()

# Bidi formatting characters (Unicode's Bidi_Control): marks, embeddings,
# overrides, isolates.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Characters that show nothing: the soft hyphen (seen only where a line
# breaks), the combining grapheme joiner, zero-width space, word joiner and the
# invisible operators, the byte order mark, the Hangul fillers, the Khmer
# inherent vowels, the Mongolian vowel separator, the deprecated format
# characters and the interlinear annotation marks; and the tag characters
# (which can carry a whole hidden text) and the supplementary variation
# selectors. Zero-width (non-)joiners and the variation selectors of the Basic
# Multilingual Plane are not among them: emoji sequences and several scripts
# need them.
INVISIBLE = frozenset(
    "\u00ad\u034f\u200b\u2060\u2061\u2062\u2063\u2064\ufeff\u115f\u1160\u3164\uffa0\u17b4\u17b5\u180e"
    "\u206a\u206b\u206c\u206d\u206e\u206f\ufff9\ufffa\ufffb"
)
TAGS = range(0xE0000, 0xE0080)
VARIATION_SELECTORS = range(0xE0100, 0xE01F0)
# Line breaks (a browser sends a textarea's as CRLF) and tabs stay what they are.
KEPT = frozenset("\n\r\t")
# Unicode's line and paragraph separators break a line where nothing shows one.
SEPARATORS = frozenset("\u2028\u2029")
# Control characters (category Cc: C0, DEL and C1) but those kept.
CONTROLS = frozenset(chr(code) for code in range(0x100) if unicodedata.category(chr(code)) == "Cc") - KEPT


def _class_range(codes: range) -> str:
    return f"{re.escape(chr(codes.start))}-{re.escape(chr(codes.stop - 1))}"


# Every character `shown` marks, as one pattern (searched in C, not walked in Python).
HIDDEN = re.compile("[" + "".join(re.escape(char) for char in sorted(BIDI_CONTROLS | INVISIBLE | SEPARATORS | CONTROLS))
                    + _class_range(TAGS) + _class_range(VARIATION_SELECTORS) + "]")


def hidden_character(char: str) -> bool:
    """Whether `char` would act on the display instead of being seen."""
    return HIDDEN.fullmatch(char) is not None


def _code(char: str) -> str:
    return f"[U+{ord(char):04X}]"


def _marker(char: str) -> str:
    return format_html('<span class="hidden-char" title="{}">{}</span>',
                       unicodedata.name(char, "control character"), _code(char))


@register.filter
def has_hidden(value: object) -> bool:
    """Whether the text holds a character `shown` would mark."""
    return HIDDEN.search("" if value is None else str(value)) is not None


@register.filter(is_safe=True)
def shown_text(value: object) -> str:
    """`shown`'s markers as plain text, for where no markup may go (a page's
    <title>, an attribute); escaped there as any text is."""
    return HIDDEN.sub(lambda found: _code(found.group()), "" if value is None else str(value))


@register.filter(needs_autoescape=True)
def shown(value: object, autoescape: bool = True) -> SafeString:
    text = "" if value is None else str(value)
    # What is already safe (the output of `join`, say) was escaped once.
    escape = conditional_escape if autoescape and not isinstance(value, SafeData) else (lambda part: part)
    parts: list[str] = []
    start = 0
    for found in HIDDEN.finditer(text):
        if found.start() > start:
            parts.append(str(escape(text[start:found.start()])))
        parts.append(_marker(found.group()))
        start = found.end()
    if start < len(text):
        parts.append(str(escape(text[start:])))
    return mark_safe(f"<bdi>{''.join(parts)}</bdi>")  # noqa: S308 - every part escaped or built by format_html
