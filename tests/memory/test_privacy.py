"""privacy_drop: realistic secrets and sensitive identifiers are caught; the
ordinary numbers of working life (dates, order ids, versions, hashes, phone
numbers, amounts) are not."""

from __future__ import annotations

import pytest

from memoryhub.services.privacy import luhn_valid, privacy_explanation, privacy_findings

SECRETS = [
    ("api_key", "Use sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z for the summariser."),
    ("api_key", "The Anthropic key is sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"),
    ("api_key", "Stripe live key sk_live_51Hxxab12CDef34GHij56KLmn"),
    ("api_key", "my github token is ghp_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("api_key", "AWS access key AKIAIOSFODNN7EXAMPLE for the staging account"),
    ("api_key", "slack bot token xoxb-2634102374-2637450937-aBcDeFgHiJkLmNoPqRsTuVwX"),
    ("api_key", "Maps key AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    ("api_key", "aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("api_key", "The DSN is postgres://app:s3cretpw@db.internal:5432/app"),
    ("token", "Authorization: Bearer abcDEF123456ghiJKL789mno"),
    ("token", "session eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
              "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("password", "DB_PASSWORD=Sup3rS3cret!"),
    ("password", '"client_secret": "d8f7a6s5d4f3g2h1"'),
    ("password", "my password is hunter2"),
    ("password", "The wifi password for the office is 'correct horse battery staple'"),
    ("password", "The door PIN code is 4821."),
    ("private_key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq\n-----END RSA PRIVATE KEY-----"),
    ("private_key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUA"),
    ("card_number", "Card 4111 1111 1111 1111 exp 12/27"),
    ("card_number", "charge it to 5500-0000-0000-0004"),
    ("card_number", "Amex 378282246310005 for travel"),
    ("government_id", "Her SSN is 123-45-6789."),
    ("government_id", "social security number 123 45 6789"),
    ("government_id", "NI number AB 12 34 56 C"),
    ("government_id", "DNI 12345678Z"),
    ("government_id", "passport number 533380006"),
    ("bank_account", "IBAN DE89 3704 0044 0532 0130 00"),
]

ORDINARY = [
    "Order #4000123412341235 shipped on 2024-03-15.",
    # Passes Luhn, but no card network issues numbers starting with 1.
    "Order 1234567890123452 arrived damaged.",
    "The meeting is on 2024-03-15 at 10:30.",
    "Call me at +1 415-555-0100 after 6pm.",
    "Release v2.14.3 fixed the login bug.",
    "Commit 3f9a2b7c1d4e5f60718293a4b5c6d7e8f9012345 introduced the regression.",
    "Request 550e8400-e29b-41d4-a716-446655440000 failed with a 502.",
    "The password policy requires 12 characters.",
    "Passwords are rotated every 90 days.",
    "my password is long and I never reuse it",
    "The password is stored in 1Password.",
    "The API key for the staging account is kept in Vault.",
    "password: <your password here>",
    "API_KEY=${OPENAI_API_KEY}",
    "Revenue was $1,234,567.89 in Q3.",
    "Invoice INV-2024-00042 is overdue.",
    "Our rate limiter uses the token bucket algorithm.",
    "ISBN 978-3-16-148410-0 is the style guide.",
    "Tracking number 1Z999AA10123456784 for the laptop.",
    "See https://github.com/org/repo/pull/12345/files for details.",
    "Bruno's employee number is 48213.",
    "The secret to good coffee is fresh beans.",
    "The database is at postgres://db.internal:5432/app",
    "PostgreSQLConnectionPoolManagerFactory handles retries.",
    "The build took 1234567 ms on the old runner.",
    "Account number 12345678, sort code 12-34-56 is the office petty cash label.",
    "Ticket JIRA-12345 is closed.",
    "Node ip-10-0-12-34.eu-west-1.compute.internal is down.",
]


@pytest.mark.parametrize(("kind", "text"), SECRETS)
def test_it_finds_secrets_and_sensitive_identifiers(kind, text):
    findings = privacy_findings(text)
    assert kind in {finding.kind for finding in findings}, findings


@pytest.mark.parametrize("text", ORDINARY)
def test_it_leaves_ordinary_facts_alone(text):
    assert privacy_findings(text) == []


def test_the_explanation_never_repeats_the_secret():
    text = "my github token is ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    explanation = privacy_explanation(privacy_findings(text))
    assert "ghp_" not in explanation and "GitHub token" in explanation


def test_luhn():
    assert luhn_valid("4111111111111111") and luhn_valid("1234567890123452")
    assert not luhn_valid("4111111111111112")
