"""A vector as the statements send it.

pgvector's `vector` holds single-precision numbers (float4), and pgvector's
Python `Vector` keeps its values so (`array('f')`), but writes each as the
shortest text of a double-precision number: 17 or so digits, by `repr`. Nine
significant digits name every single-precision number exactly (FLT_DECIMAL_DIG),
so `vector_text` writes those: the database reads back the same numbers, from
about 60% of the text, written in less than half the time (a 384-number
embedding: 72 against 150-185 us here). `SentVector` keeps its text, written
once, for a vector a write or a search sends more than once.
"""

from __future__ import annotations

import functools
from array import array
from typing import Any

from pgvector import Vector


def vector_text(values: list[float] | Any) -> str:
    """The text of a vector (a Vector or its values, a list, an array as an
    encoder gives one, any other run of numbers), exact: each value rounded
    to single precision first, as pgvector rounds it and the column stores
    it, then written with the nine significant digits that name it."""
    if isinstance(values, array) and values.typecode == "f":
        single = values
    elif isinstance(values, Vector):
        single = values._value
    else:  # pgvector takes a list or an array; any other run of numbers as a list
        single = Vector(values if isinstance(values, list) or hasattr(values, "ndim") else list(values))._value
    return "[" + ",".join(["%.9g" % value for value in single]) + "]"  # noqa: UP031 - the fastest way here


def sent_text(vector: Any) -> str:
    """A vector's text as a statement sends it: a SentVector's, written once,
    or vector_text's of any other vector or run of numbers."""
    return vector.to_text() if isinstance(vector, SentVector) else vector_text(vector)


class SentVector(Vector):
    """A Vector whose text (vector_text's) is written once, when first sent:
    pgvector's VectorField and CosineDistance ask a Vector for its text each
    time they send it."""

    @functools.cached_property
    def _text(self) -> str:
        return vector_text(self._value)

    def to_text(self) -> str:
        return self._text
