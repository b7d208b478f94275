"""The tap's rule without sockets: the bind address decides, a bearer token opens (the HTTP
server's side is tests/integration/test_tap_auth.py)."""

from __future__ import annotations

import secrets

import pytest
from pydantic import SecretStr

from consumers.service.tap_access import TOKEN_ENV, TapAccess, binds_loopback, token_from_env

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("addr", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("192.168.1.5", False),
        ("fe80::1%eth0", False),
        ("localhost", False),  # a name: the caller passes the bound socket's numeric address
        ("", False),
    ],
)
def test_only_a_loopback_bind_is_loopback(addr: str, loopback: bool) -> None:
    assert binds_loopback(addr) is loopback


def test_the_token_is_read_from_the_environment_trimmed_and_blank_is_none() -> None:
    token = secrets.token_hex(16)
    read = token_from_env({TOKEN_ENV: f"  {token}\n"})  # a Secret file's trailing newline
    assert read is not None and read.get_secret_value() == token
    assert token not in repr(read) and token not in str(read)
    for blank in ({}, {TOKEN_ENV: ""}, {TOKEN_ENV: " \n"}):
        assert token_from_env(blank) is None


def test_on_loopback_the_tap_is_open_with_or_without_a_token() -> None:
    for token in (None, SecretStr(secrets.token_hex(16))):
        access = TapAccess("127.0.0.1", token)
        assert access.mode == "open"
        assert access.check(None) is None
        assert access.check("Bearer wrong") is None


def test_beyond_loopback_without_a_token_the_tap_is_off_naming_the_setting() -> None:
    access = TapAccess("0.0.0.0", None)
    assert access.mode == "off"
    for header in (None, "Bearer ", "Bearer anything"):
        refusal = access.check(header)
        assert refusal is not None and refusal.status == 403
        assert TOKEN_ENV in refusal.message and "/metrics and /healthz" in refusal.message


def test_beyond_loopback_only_the_exact_bearer_token_opens() -> None:
    token = secrets.token_hex(16)
    access = TapAccess("0.0.0.0", SecretStr(token))
    assert access.mode == "key"
    assert access.check(f"Bearer {token}") is None
    assert access.check(f"bearer  {token} ") is None  # the scheme is case-insensitive
    for header in (None, "", "Bearer", "Bearer ", f"Basic {token}", token):
        refusal = access.check(header)
        assert refusal is not None and refusal.status == 401, header
        assert refusal.headers == {"WWW-Authenticate": 'Bearer realm="lanehouse tap"'}
    for wrong in (token[:-1], token + "x", token.upper(), "é" + token, secrets.token_hex(16)):
        refusal = access.check(f"Bearer {wrong}")
        assert refusal is not None and refusal.status == 401, wrong
        assert 'error="invalid_token"' in refusal.headers["WWW-Authenticate"]
        assert token not in refusal.message


def test_what_is_shown_names_the_variable_never_the_token() -> None:
    token = secrets.token_hex(16)
    keyed = TapAccess("0.0.0.0", SecretStr(token))
    url = "http://run-host:41234"
    assert keyed.how(url, "orders") == (
        f'curl -sN -H "Authorization: Bearer ${TOKEN_ENV}" {url}/tap/orders'
    )
    assert TapAccess("127.0.0.1", SecretStr(token)).how(url, "orders") == (
        f"curl -sN {url}/tap/orders"
    )
    assert TapAccess("0.0.0.0", None).how(url, "orders").startswith("off: ")
    for shown in (keyed.how(url, "orders"), keyed.describe(), repr(keyed), str(keyed)):
        assert token not in shown
