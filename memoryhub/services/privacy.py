"""privacy_drop (decision 9): does a candidate fact carry a secret or a
sensitive identifier?

Secrets: provider API keys by their documented prefixes, bearer tokens and
JWTs, password/secret assignments, PEM private keys, and long high-entropy
tokens. Sensitive identifiers: payment card numbers that pass Luhn (with a
card-network prefix), US SSNs, UK National Insurance numbers, Spanish DNI/NIE
(check letter), IBANs (mod 97), and ids introduced by their name (passport,
SIN, tax id...).

Every detector prefers a structural check (prefix, checksum, shape) over
"looks random", because the cost of a false positive is a lost fact: order
ids, dates, phone numbers, versions, commit hashes and UUIDs must pass.

The explanation never repeats the secret.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    kind: str
    explanation: str


# --------------------------------------------------------------------------- secrets

_API_KEY_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("an OpenAI-style API key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}")),
    ("an Anthropic API key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}")),
    ("a Stripe key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("a GitHub token", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}")),
    ("a GitHub token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}")),
    ("a GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b")),
    ("a Slack token", re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}")),
    ("a Slack webhook", re.compile(r"hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]+")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("a SendGrid key", re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}")),
    ("an npm token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")),
    ("a Twilio key", re.compile(r"\bSK[0-9a-f]{32}\b")),
    ("a Shopify token", re.compile(r"\bshp(?:at|ca|pa|ss)_[0-9a-fA-F]{32}\b")),
    ("a PyPI token", re.compile(r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{20,}")),
    ("a DigitalOcean token", re.compile(r"\bdop_v1_[0-9a-f]{64}\b")),
    ("a connection string with a password", re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s:/@]+:[^\s@/]{3,}@[^\s/]+")),
]

_PEM = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_BEARER = re.compile(r"\bBearer\s+[A-Za-z0-9._~+/-]{16,}=*", re.IGNORECASE)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")

_SECRET_WORDS = (
    r"pass(?:word|wd|phrase|code)?|pwd|secret|api[ _-]?key|access[ _-]?key|secret[ _-]?key|"
    r"private[ _-]?key|client[ _-]?secret|auth[ _-]?token|access[ _-]?token|refresh[ _-]?token|token|"
    r"pin(?:[ _-]?code)?"
)
# Configuration style: password=..., "api_key": "...", PASSWORD: ...
_ASSIGNMENT = re.compile(
    rf"(?i)\b(?:[a-z0-9]+[_-])*(?:{_SECRET_WORDS})(?:[_-][a-z0-9]+)*[\"']?\s*(?:=|:)\s*(?P<value>\"[^\"]+\"|'[^']+'|\S+)"
)
# Conversational: "my password is hunter2", "the wifi password for the office is 'x'".
_STATEMENT = re.compile(
    rf"(?i)\b(?:{_SECRET_WORDS})\b(?:\s+(?:for|to|of|on)\s+(?:the\s+|my\s+|our\s+)?[\w .-]{{1,40}}?)?\s+"
    r"(?:is|was|=|:|reads|set to|changed to)\s+(?P<value>\"[^\"]+\"|'[^']+'|`[^`]+`|\S+)"
)
_PLACEHOLDER = re.compile(
    r"(?i)^(?:<.*|\$\{?[A-Z0-9_]+\}?|\*+|x{3,}|\.{3}|…|redacted|hidden|none|null|empty|n/a|"
    r"changeme|example|your[-_ ].*|tbd|unknown|\{\{.*\}\})$"
)
# Words that follow "password is" in ordinary sentences about passwords.
_NOT_A_VALUE_TEXT = """
    a an the required needed necessary mandatory optional wrong incorrect invalid correct right expired
    expiring changed reset rotated stored saved kept managed set unset missing blank empty weak strong long
    short too not in on at for with by from of to being still now also only never always same different
    shared private secret secure insecure sensitive case-sensitive complex simple hard easy known unknown
    forgotten lost locked unlocked valid used reused visible hidden encrypted hashed salted updated new old
    available unavailable different generated random temporary permanent per every each handled rotated
    configured documented written printed listed located kept pinned
"""
_NOT_A_VALUE = frozenset(_NOT_A_VALUE_TEXT.split())


def _looks_like_secret_value(value: str, *, conversational: bool) -> bool:
    value = value.strip().rstrip(".,;)")
    quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'`"
    value = value.strip("\"'`")
    if not value or _PLACEHOLDER.match(value):
        return False
    if value.casefold() in _NOT_A_VALUE:
        return False
    if not conversational or quoted:
        return len(value) >= 3
    # In prose, a plain word after "is" is usually not the password ("is long");
    # a token with a digit or a symbol, or a long run of letters, is.
    has_digit = any(ch.isdigit() for ch in value)
    has_symbol = any(not ch.isalnum() for ch in value)
    return len(value) >= 4 and (has_digit or has_symbol or len(value) >= 12)


def _entropy(token: str) -> float:
    counts = Counter(token)
    return -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())


_TOKEN = re.compile(r"[A-Za-z0-9+/_=.-]{24,}")
_HEX_OR_UUID = re.compile(
    r"^(?:[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}|[0-9a-fA-F]+)$"
)


def _high_entropy_tokens(text: str) -> Iterator[str]:
    """Long random-looking tokens (a key without a known prefix).

    Hex strings and UUIDs are left alone: commit hashes, checksums and request
    ids are hex and ordinary in conversation; hex secrets are still caught when
    they are introduced as one ("api_key=...").
    """
    for match in _TOKEN.finditer(text):
        token = match.group(0).strip(".-_=")
        if len(token) < 24 or _HEX_OR_UUID.match(token):
            continue
        if "/" in token and re.search(r"[a-z]{3,}/[a-z]{3,}", token):
            continue  # a path or URL segment
        classes = sum(
            (any(c.islower() for c in token), any(c.isupper() for c in token), any(c.isdigit() for c in token))
        )
        if classes < 3:
            continue
        # Random base64 of this length has ~4.5+ bits per character; words and identifiers far less.
        if _entropy(token) >= 4.2 and not re.search(r"[a-z]{6,}", token) or _entropy(token) >= 4.6:
            yield token


def _secret_findings(text: str) -> Iterator[Finding]:
    if _PEM.search(text):
        yield Finding("private_key", "It contains a private key (PEM block).")
    for label, pattern in _API_KEY_PATTERNS:
        if pattern.search(text):
            yield Finding("api_key", f"It contains what looks like {label}.")
    if _JWT.search(text):
        yield Finding("token", "It contains a JSON Web Token.")
    if _BEARER.search(text):
        yield Finding("token", "It contains a bearer token.")
    for match in _ASSIGNMENT.finditer(text):
        if _looks_like_secret_value(match.group("value"), conversational=False):
            yield Finding("password", "It assigns a value to a password or secret.")
            break
    for match in _STATEMENT.finditer(text):
        if _looks_like_secret_value(match.group("value"), conversational=True):
            yield Finding("password", "It states a password or secret.")
            break
    if next(_high_entropy_tokens(text), None) is not None:
        yield Finding("api_key", "It contains a long random-looking token, probably a key or secret.")


# --------------------------------------------------------------------------- sensitive identifiers


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


# 13-19 digits, optionally grouped by single spaces or dashes.
_CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")


def _card_network(digits: str) -> bool:
    """An issuer prefix of a real card network: an order id that happens to
    pass Luhn (one in ten do) rarely also starts like a card."""
    n = len(digits)
    if digits[0] == "4" and n in (13, 16, 19):
        return True  # Visa
    two, four = int(digits[:2]), int(digits[:4])
    if (51 <= two <= 55 or 2221 <= four <= 2720) and n == 16:
        return True  # Mastercard
    if two in (34, 37) and n == 15:
        return True  # American Express
    if (digits.startswith("6011") or digits.startswith("65") or 644 <= int(digits[:3]) <= 649) and n in (16, 19):
        return True  # Discover
    if 3528 <= four <= 3589 and n in (16, 19):
        return True  # JCB
    if (two in (36, 38, 39) or 300 <= int(digits[:3]) <= 305) and n in (14, 16):
        return True  # Diners Club
    if two == 62 and 16 <= n <= 19:
        return True  # UnionPay
    return digits[:2] in ("50", "56", "57", "58", "63", "67") and 12 < n <= 19  # Maestro


def _cards(text: str) -> Iterator[str]:
    for match in _CARD.finditer(text):
        raw = match.group(0)
        separators = set(re.sub(r"\d", "", raw))
        if len(separators) > 1:
            continue  # mixed separators: a phone number or a reference, not a card as printed
        digits = re.sub(r"\D", "", raw)
        if 13 <= len(digits) <= 19 and len(set(digits)) > 1 and _card_network(digits) and luhn_valid(digits):
            yield digits


_SSN = re.compile(r"(?<![\d-])(?!000|666|9\d\d)(\d{3})-(?!00)(\d{2})-(?!0000)(\d{4})(?![\d-])")
_SSN_CONTEXT = re.compile(r"(?i)\b(?:ssn|social security(?: number| no\.?)?)\D{0,20}(\d{3}\s?\d{2}\s?\d{4})\b")
_UK_NINO = re.compile(
    r"\b(?!BG|GB|KN|NK|NT|TN|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b"
)
_DNI = re.compile(r"\b([XYZ]?)(\d{7,8})-?([A-Z])\b")
_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"
_IBAN = re.compile(r"\b([A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?)\b")
_NAMED_ID = re.compile(
    r"(?i)\b(?:passport|social insurance|sin|national id(?:entity)?|tax(?:payer)? id(?:entification)?|"
    r"tin|itin|nino|national insurance|driver'?s licen[cs]e|aadhaar|medicare|nhs)"
    r"(?:\s+(?:number|no\.?|#|id))?\s*(?:is|:|=|#)?\s*(?P<value>[A-Z0-9][A-Z0-9 -]{5,18}[A-Z0-9])\b"
)


def _dni_valid(prefix: str, number: str, letter: str) -> bool:
    if prefix:
        number = str("XYZ".index(prefix)) + number
    return len(number) in (8, 9) and _DNI_LETTERS[int(number) % 23] == letter


def _iban_valid(raw: str) -> bool:
    iban = raw.replace(" ", "")
    if not 15 <= len(iban) <= 34:
        return False
    rearranged = iban[4:] + iban[:4]
    digits = "".join(str(int(ch, 36)) for ch in rearranged)
    return int(digits) % 97 == 1


def _identifier_findings(text: str) -> Iterator[Finding]:
    if next(_cards(text), None) is not None:
        yield Finding("card_number", "It contains a payment card number.")
    if _SSN.search(text) or _SSN_CONTEXT.search(text):
        yield Finding("government_id", "It contains a US Social Security number.")
    if _UK_NINO.search(text):
        yield Finding("government_id", "It contains a UK National Insurance number.")
    for prefix, number, letter in _DNI.findall(text):
        if _dni_valid(prefix, number, letter):
            yield Finding("government_id", "It contains a Spanish DNI/NIE number.")
            break
    for match in _IBAN.finditer(text):
        if _iban_valid(match.group(1)):
            yield Finding("bank_account", "It contains a bank account number (IBAN).")
            break
    for match in _NAMED_ID.finditer(text):
        value = match.group("value")
        if sum(ch.isdigit() for ch in value) >= 5:
            yield Finding("government_id", "It contains an identity document number.")
            break


_DETECTORS: tuple[Callable[[str], Iterator[Finding]], ...] = (_secret_findings, _identifier_findings)


def privacy_findings(text: str) -> list[Finding]:
    """What makes `text` unfit for memory; empty when it is fine."""
    findings: list[Finding] = []
    for detector in _DETECTORS:
        for finding in detector(text):
            if finding not in findings:
                findings.append(finding)
    return findings


def privacy_explanation(findings: list[Finding]) -> str:
    reasons = " ".join(dict.fromkeys(f.explanation for f in findings))
    return f"{reasons} Secrets and sensitive identifiers are never stored in memory."
