"""The token cookie of the viewer's guard: a page opened with ?token=T gets a cookie so
the browser can load its static files (it sends no Authorization header for those);
the cookie is checked like the header, per port, in constant time."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from traceatlas.view.security import Guard

TOKEN = "s3cret-token"


def _client() -> TestClient:
    def ok(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/", ok), Route("/static/main.js", ok)])
    return TestClient(Guard(app, token=TOKEN, hosts=["*"]), base_url="http://10.0.0.5:8765")


def test_query_token_sets_a_strict_httponly_cookie_for_the_port() -> None:
    client = _client()
    r = client.get("/", params={"token": TOKEN})
    assert r.status_code == 200
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"traceatlas_token_8765={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    # the header alone sets no cookie (scripts already hold the token)
    assert "set-cookie" not in _client().get(
        "/", headers={"Authorization": f"Bearer {TOKEN}"}).headers


def test_cookie_alone_is_accepted_and_checked() -> None:
    fresh = _client()
    assert fresh.get("/static/main.js").status_code == 401
    fresh.cookies.set("traceatlas_token_8765", TOKEN)
    assert fresh.get("/static/main.js").status_code == 200
    wrong = _client()
    wrong.cookies.set("traceatlas_token_8765", TOKEN + "x")
    assert wrong.get("/static/main.js").status_code == 401
    other_port = _client()
    other_port.cookies.set("traceatlas_token_9999", TOKEN)
    assert other_port.get("/static/main.js").status_code == 401


def test_failed_query_token_sets_no_cookie() -> None:
    r = _client().get("/", params={"token": "nope"})
    assert r.status_code == 401 and "set-cookie" not in r.headers
