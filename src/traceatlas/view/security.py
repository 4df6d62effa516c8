"""The viewer's request guard: bearer token, Host header check and security headers.

One pure ASGI middleware (no per-request task switch). A token, when set, must come
with every request as ``Authorization: Bearer <token>``, ``?token=<token>`` or the
cookie a ``?token=`` request sets (HttpOnly, SameSite=Strict: the browser sends no
header for the page's own static files), compared in constant time; otherwise 401.
The Host header must name one of the bound names (DNS rebinding); otherwise 400.
Every response carries ``HEADERS``.
"""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Iterable
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'")
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    """``host`` names only this machine (``localhost``, ``127.x.x.x``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str) -> list[str]:
    """Host header names accepted for a server bound to ``host``: the loopback names for
    a loopback address, ``*`` (any; the token protects) for a wildcard address, else the
    address itself."""
    if is_loopback(host):
        return sorted({*LOOPBACK_NAMES, host.strip("[]")})
    if host in ("0.0.0.0", "::", ""):
        return ["*"]
    return [host.strip("[]")]


def new_token() -> str:
    """A random URL-safe token (256 bits)."""
    return secrets.token_urlsafe(32)


def _host_name(value: str) -> str:
    """The name of a Host header value without its port (``[::1]:80`` -> ``::1``)."""
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Guard:
    """ASGI middleware: token (when set), Host check and the security headers."""

    def __init__(self, app: ASGIApp, *, token: str | None, hosts: Iterable[str]) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.hosts = {h.lower() for h in hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        problem = self._refuse(scope, headers)
        if problem is None:
            if self.token is not None and b"token=" in scope.get("query_string", b""):
                # The page was opened with ?token=: a same-site cookie lets the browser
                # load the page's own static files (it sends no header for those).
                cookie = (_cookie_name(scope).encode() + b"=" + self.token
                          + b"; HttpOnly; SameSite=Strict; Path=/")
                inner = send_headers

                async def send_headers(message: Message) -> None:
                    if message["type"] == "http.response.start":
                        message["headers"] = [*message.get("headers", []),
                                              (b"set-cookie", cookie)]
                    await inner(message)
            await self.app(scope, receive, send_headers)
            return
        status, text = problem
        body = b'{"error":"' + text.encode() + b'"}'
        extra = [(b"www-authenticate", b"Bearer")] if status == 401 else []
        await send_headers({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()), *extra]})
        await send_headers({"type": "http.response.body", "body": body})

    def _refuse(self, scope: Scope, headers: dict[bytes, bytes]) -> tuple[int, str] | None:
        """(status, message) when the request is refused, else None."""
        host = _host_name(headers.get(b"host", b"").decode("latin-1")).lower()
        if "*" not in self.hosts and host not in self.hosts:
            return 400, "invalid Host header"
        if self.token is None:
            return None
        given = b""
        auth = headers.get(b"authorization", b"")
        if auth[:7].lower() == b"bearer ":
            given = auth[7:].strip()
        else:
            query = scope.get("query_string", b"").decode("latin-1")
            for key, value in parse_qsl(query, keep_blank_values=True):
                if key == "token":
                    given = value.encode("latin-1", "replace")
                    break
        if not given:
            given = _cookie_token(headers.get(b"cookie", b""), _cookie_name(scope))
        if not secrets.compare_digest(given, self.token):
            return 401, "missing or wrong token"
        return None


def _cookie_name(scope: Scope) -> str:
    """The token cookie's name, per port (cookies are shared by all ports of a host)."""
    server = scope.get("server") or ("", 0)
    return f"traceatlas_token_{server[1]}"


def _cookie_token(header: bytes, name: str) -> bytes:
    """The value of cookie ``name`` in a ``Cookie`` header, or b""."""
    for part in header.split(b";"):
        key, _, value = part.strip().partition(b"=")
        if key == name.encode():
            return value
    return b""
