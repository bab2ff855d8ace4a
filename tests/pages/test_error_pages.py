"""The pages of an error (DEBUG off, as the tests run): the site's frame and
navigation, the reason in plain words, a way back; JSON where programs call."""

from __future__ import annotations

import html

import pytest
from django.db import connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext

from memoryhub.pages.errors import BROKEN, CSRF_FAILED, NOT_FOUND, server_error
from tests.conftest import signed_in

FAILING = "tests.pages.failing_urls"


def page_parts(response) -> tuple[str, str]:
    text = response.content.decode()
    assert response["Content-Type"].startswith("text/html"), response["Content-Type"]
    assert "/static/css/app.css" in text  # the site's frame and styles
    assert 'id="error-reason"' in text and 'id="error-way-back"' in text
    return text, html.unescape(text[text.index('id="error-reason"'):text.index('id="error-way-back"')])


def test_an_unknown_address_is_a_styled_404_with_the_navigation(people, settings):
    assert settings.DEBUG is False
    response = signed_in(people.bruno).get("/no/such/page/")
    assert response.status_code == 404
    text, reason = page_parts(response)
    assert NOT_FOUND in reason
    assert 'aria-label="Main"' in text and 'href="/memory/"' in text and "Sign out" in text
    assert 'href="/"' in text  # the way back


def test_a_refusal_of_the_domain_says_why_in_its_own_words(people):
    response = signed_in(people.bruno).get("/receipts/rcpt_nobody/")
    assert response.status_code == 404
    _, reason = page_parts(response)
    assert "you can reopen only receipts of your own reads" in reason


def test_a_member_opening_an_admin_page_gets_a_styled_403_that_says_why(people):
    for url in ("/workspace/members/", "/reviews/"):
        response = signed_in(people.bruno).get(url)
        assert response.status_code == 403, url
        text, reason = page_parts(response)
        assert "Only workspace admins can open this page." in reason
        assert 'aria-label="Main"' in text and "Review queue" not in text


def test_someone_signed_out_is_offered_to_sign_in(db):
    response = Client().get("/no/such/page/")
    assert response.status_code == 404
    text, _ = page_parts(response)
    assert "/accounts/login/?next=/no/such/page/" in text and "Sign out" not in text


def test_a_form_sent_without_its_csrf_token_gets_a_page_that_says_what_to_do(people):
    client = signed_in(people.ada)
    client.handler.enforce_csrf_checks = True
    response = client.post("/workspace/roles/add/", {"name": "auditors"})
    assert response.status_code == 403
    text, reason = page_parts(response)
    assert CSRF_FAILED in reason and "reload the page" in reason
    assert "CSRF" not in text
    assert 'aria-label="Main"' in text


def test_a_page_that_raises_gets_a_styled_500_that_reads_no_database(people, settings):
    settings.ROOT_URLCONF = FAILING
    client = signed_in(people.bruno)
    client.raise_request_exception = False
    response = client.get("/broken/")
    assert response.status_code == 500
    text, reason = page_parts(response)
    assert BROKEN in reason
    assert 'aria-label="Main"' in text and 'href="/memory/"' in text and 'href="/receipts/"' in text
    assert "a page with a bug" not in text


def test_the_500_page_reads_neither_the_database_nor_the_session(db):
    request = RequestFactory().get("/memory/")  # no session, no user: a request whose context broke
    with CaptureQueriesContext(connection) as queries:
        response = server_error(request)
    assert response.status_code == 500
    assert [q["sql"] for q in queries.captured_queries] == []
    _, reason = page_parts(response)
    assert BROKEN in reason


@pytest.mark.parametrize("url, key", [
    ("/api/no-such-endpoint", "error"),
    ("/o/no-such-endpoint/", "error"),
    ("/internal/no-such-endpoint", "error"),
])
def test_what_programs_call_keeps_answering_json(db, url, key):
    response = Client().get(url)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert key in response.json()


def test_an_api_view_that_raises_answers_json_500(people, settings):
    settings.ROOT_URLCONF = FAILING
    client = Client(raise_request_exception=False)
    response = client.get("/api/broken/")
    assert response.status_code == 500
    assert response.json() == {"error": {"code": "internal", "message": "Internal error.", "field": ""}}
    assert b"an API view with a bug" not in response.content


def test_the_token_endpoint_keeps_its_oauth_errors(db):
    response = Client().post("/o/token/", {"grant_type": "client_credentials", "client_id": "nobody",
                                           "client_secret": "nothing"})
    assert response.status_code in (400, 401)
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["error"] == "invalid_client"


def test_a_body_django_cannot_read_is_a_400_in_the_shape_each_part_answers_in(people, settings):
    from memoryhub.pages.errors import UNREADABLE

    fields = {f"field{number}": "x" for number in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1)}
    # OAuth's token endpoint: an OAuth error, not an HTML page.
    token = Client(raise_request_exception=False).post("/o/token/", {"grant_type": "client_credentials", **fields})
    assert token.status_code == 400
    assert token.json() == {"error": "invalid_request", "error_description": UNREADABLE}
    # A multipart form without its boundary.
    multipart = Client(raise_request_exception=False).generic(
        "POST", "/o/token/", b"grant_type=client_credentials", content_type="multipart/form-data")
    assert multipart.status_code == 400 and multipart.json()["error"] == "invalid_request"
    # A person's page: the site's error page.
    page = signed_in(people.bruno)
    page.raise_request_exception = False
    response = page.post("/memory/", fields)
    assert response.status_code == 400
    _, reason = page_parts(response)
    assert UNREADABLE in reason
