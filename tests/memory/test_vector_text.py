"""A vector's text as the statements send it (memoryhub.database.vectors):
shorter than pgvector's own, and read by PostgreSQL as the very same vector;
written once for a vector sent more than once; and a person's write stores
exactly the encoder's numbers."""

from __future__ import annotations

import random
import struct
from array import array

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pgvector import Vector

from memoryhub.database import vectors
from memoryhub.database.vectors import SentVector, sent_text, vector_text
from memoryhub.embeddings import get_embedder
from memoryhub.models import Fragment
from memoryhub.services.fragments import fragment_write

# Every kind of single-precision number a vector may hold (pgvector refuses NaN and the infinities).
SINGLES = st.floats(width=32, allow_nan=False, allow_infinity=False)


def _bits(values) -> list[int]:  # type: ignore[no-untyped-def]
    return [struct.unpack("<I", struct.pack("<f", value))[0] for value in values]


@settings(max_examples=300, deadline=None)
@given(values=st.lists(SINGLES, min_size=1, max_size=16))
@example(values=[-0.11001076549291611, -0.11471739411354065, -0.10144000500440598])  # eight digits name none of them
def test_nine_digits_name_every_single_precision_number(values):
    """Each value read back (as a Python float, then single precision, as
    pgvector's own reader does) is the same number, bit for bit: -0 and the
    smallest subnormals included."""
    text = vector_text(values)
    assert _bits(Vector.from_text(text).to_list()) == _bits(array("f", values))


def test_postgresql_reads_it_as_pgvectors_own_text(db):
    """The database's own reading of both texts is the same vector, number for
    number: for embeddings, random doubles rounded as pgvector rounds them,
    and the extremes of single precision."""
    rng = random.Random(11)
    tiny, huge = 1.401298464324817e-45, 3.4028234663852886e38
    cases = [
        get_embedder().embed(["The VPN config lives in the ops vault."])[0],
        [rng.gauss(0, 1) for _ in range(384)],
        [rng.uniform(-1e-30, 1e-30) for _ in range(64)],
        [tiny, -tiny, huge, -huge, -0.0, 0.0, 1.17549435e-38, 0.1, 1 / 3],
        np.asarray([rng.random() for _ in range(384)], dtype=np.float32),
    ]
    embedding = cases[0]
    assert len(vector_text(embedding)) < 0.7 * len(Vector(embedding).to_text())  # an embedding's text is shorter
    with connection.cursor() as cursor:
        for values in cases:
            ours, theirs = vector_text(values), Vector(values).to_text()
            cursor.execute("SELECT %s::vector = %s::vector, %s::vector::text, %s::vector::text, "
                           "vector_dims(%s::vector)", [ours, theirs, ours, theirs, ours])
            same, read_ours, read_theirs, dimensions = cursor.fetchone()
            assert same and read_ours == read_theirs and dimensions == len(values)
            assert _bits(Vector.from_text(read_ours).to_list()) == _bits(Vector(values).to_list())


def test_a_sent_vector_is_written_once(monkeypatch):
    written: list[str] = []
    real = vectors.vector_text
    monkeypatch.setattr(vectors, "vector_text", lambda values: written.append(real(values)) or written[-1])
    vector = SentVector([0.25, -1.5, 3.0])
    assert vector.to_text() == vector.to_text() == "[0.25,-1.5,3]"
    assert written == ["[0.25,-1.5,3]"]
    assert sent_text(vector) is vector.to_text() and written == ["[0.25,-1.5,3]"]  # its own, not written again
    assert sent_text([0.25, -1.5, 3.0]) == sent_text(Vector([0.25, -1.5, 3.0])) == "[0.25,-1.5,3]"


def test_any_run_of_numbers_has_the_same_text():
    """An embedder that gives tuples or float64 arrays, a Vector, or a
    generator: each is written as the list of the same numbers is."""
    numbers = [0.25, -1.5, 1 / 3]
    text = vector_text(numbers)
    for run in (tuple(numbers), (n for n in numbers), np.asarray(numbers), np.asarray(numbers, dtype=np.float32),
                  Vector(numbers), SentVector(numbers), array("f", numbers), array("d", numbers)):
        assert vector_text(run) == text, run


def test_a_persons_write_stores_the_encoders_numbers_and_writes_its_vector_once(people, monkeypatch):
    """The judgement and the insert send one text; the row holds exactly what
    the encoder gave, in single precision."""
    text = "Our staging database is restored every Sunday at 02:00."
    written: list[str] = []
    real = vectors.vector_text
    monkeypatch.setattr(vectors, "vector_text", lambda values: written.append(real(values)) or written[-1])
    with CaptureQueriesContext(connection) as statements:
        outcome = fragment_write(caller=people.caller(people.bruno), content=text)
    (result,) = outcome.results
    assert result.operation == "stored" and len(written) == 1
    sent = [statement["sql"] for statement in statements if written[0] in statement["sql"]]
    assert len(sent) == 2 and sent[1].startswith("INSERT INTO")  # the judgement's, then the insert's
    stored = Fragment.objects.get(pk=result.fragment_id).embedding
    assert _bits(stored) == _bits(array("f", get_embedder().embed([text])[0]))


@pytest.mark.parametrize("values", [[float("nan")], [float("inf")]])
def test_what_pgvector_refuses_it_still_refuses(db, values):
    with connection.cursor() as cursor, pytest.raises(Exception, match="(?i)nan|infinite"):
        cursor.execute("SELECT %s::vector", [vector_text(values)])


def test_a_batch_embedded_later_stores_the_encoders_numbers(people):
    """Tier 2's batch write sends the same text: each row holds exactly what
    the encoder gave it, in single precision."""
    from memoryhub.services import enrichment
    from tests.memory.conftest import private_fragment

    bruno = people.caller(people.bruno)
    texts = [f"Server {n} runs the billing cron at {n}:15." for n in range(3)]
    fragments = [private_fragment(bruno, text, embed=False) for text in texts]
    assert enrichment.fragments_embed_pending(fragment_ids=[str(f.pk) for f in fragments]).embedded == 3
    encoded = get_embedder().embed(texts)
    for fragment, vector in zip(fragments, encoded, strict=True):
        fragment.refresh_from_db()
        assert _bits(fragment.embedding) == _bits(array("f", vector))
