"""Who may read ``/tap/<workload>``: the bind address decides, a bearer token opens.

The tap streams handled records' keys and value previews: data, unlike ``/metrics`` and
``/healthz``, which anyone on the network may scrape. So:

    server bound to loopback (127.0.0.0/8, ::1)      the tap is open, as before
    bound beyond it (0.0.0.0, ::, an interface)      ``Authorization: Bearer <token>``, the token
                                                     from ``LANEHOUSE_TAP_TOKEN``: missing or
                                                     wrong → 401; no token set → 403 (tap off)

The server's bind address decides, never the client's: behind a port-forward, a proxy or
Docker's port mapping every client looks local. The token is read once, when the server starts
(:func:`token_from_env`), kept as a :class:`~pydantic.SecretStr` (masked when printed), compared
with :func:`hmac.compare_digest`, and never logged, tagged or echoed; what is shown instead is
how to send it (:meth:`TapAccess.how`), with the variable's name in place of its value.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from pydantic import SecretStr

__all__ = ["TOKEN_ENV", "Refusal", "TapAccess", "binds_loopback", "token_from_env"]

TOKEN_ENV: Final = "LANEHOUSE_TAP_TOKEN"
_REALM: Final = 'Bearer realm="lanehouse tap"'


def token_from_env(environ: Mapping[str, str] = os.environ) -> SecretStr | None:
    """The tap's token, surrounding whitespace dropped (a Secret file's trailing newline);
    None when unset or blank: an empty token must never match an empty key."""
    value = environ.get(TOKEN_ENV, "").strip()
    return SecretStr(value) if value else None


def binds_loopback(addr: str) -> bool:
    """Whether a server bound to ``addr`` is reachable from this machine only.

    A host name is not loopback here: pass the bound socket's address, which is numeric.
    """
    try:
        ip = ipaddress.ip_address(addr.partition("%")[0])  # an IPv6 scope (fe80::1%eth0)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1
    return ip.is_loopback


@dataclass(frozen=True)
class Refusal:
    """A tap request answered without the stream."""

    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)


class TapAccess:
    """The tap's rule for one server, fixed when it starts (see the module docstring)."""

    def __init__(self, bind_addr: str, token: SecretStr | None) -> None:
        self.bind_addr = bind_addr
        self._token = token
        self.mode: Literal["open", "key", "off"] = (
            "open" if binds_loopback(bind_addr) else "key" if token is not None else "off"
        )

    def __repr__(self) -> str:
        return f"TapAccess({self.bind_addr!r}, mode={self.mode!r})"

    def check(self, authorization: str | None) -> Refusal | None:
        """None when the request may have the stream; else how to answer it."""
        if self.mode == "open":
            return None
        if self._token is None:
            return Refusal(
                403,
                f"the tap is off: this server listens on {self.bind_addr}, beyond loopback, "
                f"and {TOKEN_ENV} is not set. Set {TOKEN_ENV} to a secret and send it as "
                "'Authorization: Bearer <token>', or bind 127.0.0.1 "
                "(/metrics and /healthz are not affected)",
            )
        scheme, _, credentials = (authorization or "").strip().partition(" ")
        given = credentials.strip()
        if scheme.lower() != "bearer" or not given:
            return Refusal(
                401,
                f"the tap needs a key here: send 'Authorization: Bearer <{TOKEN_ENV}>'",
                {"WWW-Authenticate": _REALM},
            )
        # Header values arrive decoded as ISO-8859-1: back to their bytes, as the token's.
        expected = self._token.get_secret_value().encode()
        if not hmac.compare_digest(given.encode("latin-1", "replace"), expected):
            return Refusal(
                401,
                f"wrong key for the tap: send 'Authorization: Bearer <{TOKEN_ENV}>'",
                {"WWW-Authenticate": f'{_REALM}, error="invalid_token"'},
            )
        return None

    def how(self, url: str, workload: str) -> str:
        """How to read ``workload``'s tap at ``url``: a command naming the token, never it."""
        if self.mode == "open":
            return f"curl -sN {url}/tap/{workload}"
        if self.mode == "key":
            return f'curl -sN -H "Authorization: Bearer ${TOKEN_ENV}" {url}/tap/{workload}'
        return f"off: bound to {self.bind_addr} and {TOKEN_ENV} is not set"

    def describe(self) -> str:
        """One line for the server's start."""
        if self.mode == "open":
            return f"/tap open (bound to loopback {self.bind_addr})"
        if self.mode == "key":
            return f"/tap needs 'Authorization: Bearer <{TOKEN_ENV}>' (bound to {self.bind_addr})"
        return (
            f"/tap off: bound to {self.bind_addr}, beyond loopback, and {TOKEN_ENV} is not set "
            "(/metrics and /healthz serve as usual)"
        )
