"""Bad input gets a 4xx naming what was wrong, and nothing is half-written.
Every limit at its boundary and one past it, over the real API."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from memoryhub.api.views import BODY_MAX_BYTES
from memoryhub.errors import InvalidArgument
from memoryhub.models import Fragment, Resource
from memoryhub.services import ingest
from tests.ingest.conftest import doc


def distinct_text(length: int) -> str:
    """`length` characters of prose that never repeats (so no fragment is a duplicate)."""
    words, total, i = [], 0, 0
    while total < length:
        word = f"word{i}"
        words.append(word)
        total += len(word) + 1
        i += 1
    text = " ".join(words)
    return text[:length - 1].rstrip() + "." if len(text) >= length else text


def refused(response, field: str | None, status: int = 400) -> dict:  # type: ignore[no-untyped-def]
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if field is not None:
        assert error.get("field") == field, error
    assert error["message"]
    return error


def nothing_written() -> bool:
    return Resource.objects.count() == 0 and Fragment.objects.count() == 0


def test_text_up_to_the_bound_is_accepted_and_one_past_is_refused(wiki_api):
    limit = ingest.TEXT_MAX_CHARS
    over = distinct_text(limit + 1)
    assert len(over) == limit + 1
    error = refused(wiki_api.upsert(doc("big.md", over)), "text")
    assert str(limit) in error["message"]
    assert nothing_written()

    at = over[:limit]
    response = wiki_api.upsert(doc("big.md", at))
    assert response.status_code == 201, response.text
    fragments = Fragment.objects.filter(retired_at__isnull=True)
    assert fragments.count() == response.json()["fragments"] > 250
    assert max(len(f.value) for f in fragments) <= ingest.CHUNK_MAX_CHARS


def test_a_text_at_the_bound_in_four_byte_characters_fits_the_body(wiki_api):
    body = json.dumps(doc("emoji.md", "🙂" * ingest.TEXT_MAX_CHARS), ensure_ascii=False).encode()
    assert len(body) < BODY_MAX_BYTES
    assert wiki_api.post_raw(body).status_code == 201


def of_length(field: str, length: int) -> str:
    """A value of `field` exactly `length` characters long (a URI stays an https URL)."""
    prefix = "https://wiki.example.com/" if field == "uri" else ""
    return prefix + "r" * (length - len(prefix))


@pytest.mark.parametrize(("field", "limit"), [
    ("resource_id", ingest.RESOURCE_ID_MAX_CHARS),
    ("title", ingest.TITLE_MAX_CHARS),
    ("uri", ingest.URI_MAX_CHARS),
])
def test_field_lengths_at_the_bound_and_one_past(wiki_api, field, limit):
    over = doc(**{field: of_length(field, limit + 1)})
    error = refused(wiki_api.upsert(over), field)
    assert str(limit) in error["message"]
    assert nothing_written()
    at = doc(**{field: of_length(field, limit)})
    assert wiki_api.upsert(at).status_code == 201


@pytest.mark.parametrize("uri", [
    "https://wiki.example.com/handbook/oncall",
    "http://intranet.example.com/oncall?page=2#rotation",
    "HTTPS://WIKI.EXAMPLE.COM/UPPER",
    "",
])
def test_a_document_uri_may_be_an_absolute_http_url_or_empty(wiki_api, uri):
    response = wiki_api.upsert(doc("linked.md", uri=uri))
    assert response.status_code == 201, response.text
    assert wiki_api.get("linked.md").json()["uri"] == uri
    assert Resource.objects.get(external_id="linked.md").uri == uri


@pytest.mark.parametrize("uri", [
    "javascript:alert(document.cookie)",
    "JavaScript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "file:///etc/passwd",
    "handbook/oncall.md",
    "/handbook/oncall.md",
    "//evil.example.com/handbook",
    "https:///no-host",
    "ftp://files.example.com/handbook.md",
    "mailto:oncall@example.com",
    "https://wiki.example.com/a\njavascript:alert(1)",  # a line break: two "URLs" in one
    "https://wiki.example.com/a\rb",
    "https://wiki.example.com/a\tb",
])
def test_any_other_document_uri_is_refused_and_nothing_is_written(wiki_api, uri):
    error = refused(wiki_api.upsert(doc("linked.md", uri=uri)), "uri")
    assert error["code"] == "invalid_argument"
    assert error["message"] == "uri must be an absolute http:// or https:// URL."
    assert nothing_written()


@pytest.mark.parametrize("resource_id", ["lf\nonly", "crlf\r\nX: y", "tab\there", "bell\x07"])
def test_a_resource_id_with_a_control_character_is_refused_and_nothing_is_written(wiki_api, resource_id):
    # Before, "lf\nonly" was created, and then neither GET nor DELETE could reach it by its URL.
    error = refused(wiki_api.upsert(doc(resource_id, uri="")), "resource_id")
    assert "control characters" in error["message"]
    assert nothing_written()


def test_a_changed_uri_is_checked_as_well_and_the_stored_one_kept(wiki_api):
    assert wiki_api.upsert(doc("linked.md")).status_code == 201
    stored = wiki_api.get("linked.md").json()
    refused(wiki_api.upsert(doc("linked.md", uri="javascript:alert(1)")), "uri")
    assert wiki_api.get("linked.md").json() == stored


def test_an_unknown_collection_is_refused(wiki_api):
    error = refused(wiki_api.upsert(doc(collection="secret-plans")), "collection")
    assert "secret-plans" in error["message"]
    refused(wiki_api.upsert(doc(collection="c" * 65)), "collection")
    refused(wiki_api.upsert(doc(collection="")), "collection")
    assert nothing_written()
    assert wiki_api.upsert(doc(collection="incidents")).json()["collection"] == "incidents"


@pytest.mark.parametrize("created_at", [
    "yesterday", "2026-02-30T10:00:00Z", "2026-03-01T09:00:00", "2026-03-01", 1767225600, "",
])
def test_a_bad_created_at_is_refused(wiki_api, created_at):
    refused(wiki_api.upsert(doc(created_at=created_at)), "created_at")
    assert nothing_written()


def test_created_at_may_run_ahead_of_our_clock_by_a_day_at_most(wiki_api):
    now = dt.datetime.now(dt.UTC)
    refused(wiki_api.upsert(doc(created_at=(now + dt.timedelta(hours=24, minutes=5)).isoformat())), "created_at")
    assert nothing_written()
    ahead = (now + dt.timedelta(hours=23, minutes=55)).isoformat()
    assert wiki_api.upsert(doc(created_at=ahead)).status_code == 201
    offset = "2026-03-01T10:00:00+01:00"  # any UTC offset is fine; stored in UTC
    assert wiki_api.upsert(doc("b.md", created_at=offset)).status_code == 201
    assert wiki_api.get("b.md").json()["created_at"] == "2026-03-01T09:00:00Z"


@pytest.mark.parametrize(("body", "field"), [
    ({"title": "no id or text"}, "resource_id"),
    (doc(text=""), "text"),
    (doc(text=" \n\t "), "text"),
    (doc(text=None), "text"),
    (doc(text=["a", "list"]), "text"),
    (doc(resource_id="  "), "resource_id"),
    (doc(resource_id=42), "resource_id"),
    (doc(text="a NUL \u0000 byte"), "text"),
    (doc(title="broken \ud800 surrogate"), "title"),
    ({**doc(), "owner": "someone-else"}, "owner"),
])
def test_malformed_documents_are_refused_naming_the_field(wiki_api, body, field):
    # Sent as ASCII JSON, so a broken surrogate arrives as the \ud800 escape a buggy client would send.
    refused(wiki_api.post_raw(json.dumps(body).encode()), field)
    assert nothing_written()


def test_a_body_that_is_not_one_json_object_is_refused(wiki_api):
    refused(wiki_api.post_raw(b"[1, 2]"), None)
    error = refused(wiki_api.post_raw(b"{not json"), None)
    assert error["code"] == "parse_error"
    refused(wiki_api.post_raw(b"resource_id=a&text=b", "application/x-www-form-urlencoded"), None, status=415)
    assert nothing_written()


def test_a_body_over_the_limit_is_refused_before_parsing(wiki_api):
    padding = "x" * (BODY_MAX_BYTES - len(json.dumps(doc(text="", title=""))))
    at_limit = json.dumps(doc(text="", title=padding)).encode()
    assert len(at_limit) == BODY_MAX_BYTES
    # At the limit the body is read and parsed (and refused for its fields)...
    refused(wiki_api.post_raw(at_limit), "title")
    # ...one byte more and it is not read at all.
    error = refused(wiki_api.post_raw(at_limit + b" "), None, status=413)
    assert error["code"] == "request_too_large"
    assert nothing_written()


def test_a_document_is_all_or_nothing(people, monkeypatch):
    document = ingest.document_validated(resource_id="a.md", text="# One\n\nFirst.\n\n# Two\n\nSecond.")
    ingest.document_upsert(source=people.wiki, document=document)
    before = set(Fragment.objects.filter(retired_at__isnull=True).values_list("pk", flat=True))

    def fail(**kwargs):  # type: ignore[no-untyped-def]
        raise InvalidArgument("the embedding queue is down")

    # Fail after the old fragments were retired and the new ones inserted.
    monkeypatch.setattr(ingest, "embedding_enqueue", fail)
    changed = ingest.document_validated(resource_id="a.md", text="# One\n\nFirst, changed.\n\n# Three\n\nThird.")
    with pytest.raises(InvalidArgument):
        ingest.document_upsert(source=people.wiki, document=changed)
    assert set(Fragment.objects.filter(retired_at__isnull=True).values_list("pk", flat=True)) == before
    assert Fragment.objects.count() == 2
    assert Resource.objects.get(external_id="a.md").content_hash == document.content_hash
