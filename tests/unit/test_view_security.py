"""The viewer's guard and parameter checks: token off loopback (401), Host header
(DNS rebinding, 400), security headers, static files that cannot escape the package
(404), malformed parameters (400, never 500), no file read through a parameter."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient
from test_view_server import BASE, FakePyramid, build_store

import traceatlas
from traceatlas.view import security
from traceatlas.view.app import STATIC_DIR, create_app

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> tuple[traceatlas.Trace, FakePyramid]:
    store = build_store(tmp_path_factory.mktemp("sec"))
    return traceatlas.open(store), FakePyramid(store)


@pytest.fixture(scope="module")
def local(parts: tuple[traceatlas.Trace, FakePyramid]) -> TestClient:
    web = create_app(*parts, token=None, allowed_hosts=security.allowed_hosts("127.0.0.1"))
    return TestClient(web, base_url="http://127.0.0.1:8765")


@pytest.fixture(scope="module")
def remote(parts: tuple[traceatlas.Trace, FakePyramid]) -> TestClient:
    web = create_app(*parts, token=TOKEN, allowed_hosts=security.allowed_hosts("0.0.0.0"))
    return TestClient(web, base_url="http://10.1.2.3:8765")


def test_token_required_off_loopback(remote: TestClient) -> None:
    for path in ("/api/meta", "/", "/static/view.css", "/api/tracks", "/nothing"):
        r = remote.get(path)
        assert r.status_code == 401 and r.json() == {"error": "missing or wrong token"}, path
    assert remote.get("/api/meta", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert remote.get("/api/meta", params={"token": TOKEN[:-1]}).status_code == 401
    assert remote.get("/api/meta", headers={"Authorization": f"Bearer {TOKEN}"}).status_code \
        == 200
    assert remote.get("/api/meta", params={"token": TOKEN}).status_code == 200


def test_host_header_checked(local: TestClient) -> None:
    assert local.get("/api/meta").status_code == 200
    assert local.get("/api/meta", headers={"Host": "localhost:8765"}).status_code == 200
    for host in ("evil.example:8765", "127.0.0.1.evil.example", "attacker"):
        r = local.get("/api/meta", headers={"Host": host})
        assert r.status_code == 400, host


def test_allowed_hosts() -> None:
    assert security.allowed_hosts("127.0.0.1") == ["127.0.0.1", "::1", "localhost"]
    assert security.allowed_hosts("0.0.0.0") == ["*"]
    assert security.allowed_hosts("10.0.0.5") == ["10.0.0.5"]
    assert security.is_loopback("127.0.0.2") and security.is_loopback("::1")
    assert not security.is_loopback("0.0.0.0") and not security.is_loopback("example.com")


def test_security_headers_on_every_response(local: TestClient) -> None:
    for path in ("/api/meta", "/nothing", "/api/tiles?level=x"):
        r = local.get(path)
        assert r.headers["content-security-policy"] == security.CSP, path
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"


def test_static_files_cannot_escape(local: TestClient) -> None:
    index = local.get("/")
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    assert index.content == (STATIC_DIR / "index.html").read_bytes()
    css = local.get("/static/view.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    for path in ("/static/../app.py", "/static/%2e%2e/app.py", "/static/..%2fapp.py",
                 "/static/%2e%2e%2fapp.py", "/static//etc/passwd", "/static/%2fetc%2fpasswd",
                 "/static/..%5capp.py", "/static/", "/static", "/app.py", "/../app.py",
                 "/static/" + quote(str(STATIC_DIR / "index.html"), safe=""),
                 "/static/__init__.py", "/etc/passwd", "/api/../app.py"):
        r = local.get(path)
        assert r.status_code == 404, path
        assert b"import" not in r.content and b"root:" not in r.content, path


BAD_TILES = [
    {},                                                                  # all missing
    {"level": "x", "start_ns": "0", "end_ns": "1", "tracks": "0"},       # not an integer
    {"level": "-1", "start_ns": "0", "end_ns": "1", "tracks": "0"},      # negative level
    {"level": "31", "start_ns": "0", "end_ns": "1", "tracks": "0"},      # above the top
    {"level": "1.5", "start_ns": "0", "end_ns": "1", "tracks": "0"},
    {"level": "1", "start_ns": "5", "end_ns": "1", "tracks": "0"},       # end < start
    {"level": "1", "start_ns": "0", "end_ns": "99999999999999999999", "tracks": "0"},
    {"level": "1", "start_ns": "0x10", "end_ns": "100", "tracks": "0"},
    {"level": "1", "start_ns": "0", "end_ns": "100", "tracks": ""},
    {"level": "1", "start_ns": "0", "end_ns": "100", "tracks": "999"},     # unknown id
    {"level": "1", "start_ns": "0", "end_ns": "100", "tracks": "-1"},
    {"level": "1", "start_ns": "0", "end_ns": "100", "tracks": "../../x"},
    {"level": "1", "start_ns": "0", "end_ns": "100", "tracks": ",".join(["0"] * 5000)},
    {"level": "0", "start_ns": "0", "end_ns": str(10**15), "tracks": "0"},  # too many bins
    {"level": "1", "start_ns": "0", "end_ns": "100", "tracks": "0", "format": "xml"},
]


@pytest.mark.parametrize("params", BAD_TILES)
def test_bad_tile_parameters_are_400(local: TestClient, params: dict[str, str]) -> None:
    for path in ("/api/tiles", "/api/counters"):
        r = local.get(path, params=params)
        assert r.status_code == 400, (path, params, r.text)
        assert set(r.json()) == {"error"} and "Traceback" not in r.text


def test_other_bad_parameters_are_400(local: TestClient) -> None:
    window = {"start_ns": str(BASE), "end_ns": str(BASE + 10)}
    cases = [
        ("/api/events", {**window, "tracks": "1", "limit": "0"}),
        ("/api/events", {**window, "tracks": "1", "limit": "200001"}),
        ("/api/events", {"start_ns": "1", "tracks": "1"}),
        ("/api/rows", {"level": "3", **window, "kind": "rank_gpu"}),
        ("/api/rows", {"level": "3", **window, "kind": "rank_host", "ranks": "5-9"}),
        ("/api/rows", {"level": "3", **window, "kind": "rank_host", "groups": "0"}),
        ("/api/rows", {"level": "3", **window, "kind": "rank_host", "ranks": "x"}),
        ("/api/event", {"track": "1"}),
        ("/api/event", {"track": "100000", "start_ns": "1"}),
        ("/api/search", {"name": ""}),
        ("/api/search", {"name": "x" * 201}),
        ("/api/search", {"name": "x", "limit": "-3"}),
    ]
    for path, params in cases:
        r = local.get(path, params=params)
        assert r.status_code == 400, (path, params, r.text)
    r = local.get("/api/events?start_ns=1&start_ns=2&end_ns=3&tracks=1")
    assert r.status_code == 400 and "more than once" in r.json()["error"]


def test_no_file_read_through_parameters(local: TestClient, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-4242\n")
    probes = [
        ("/api/search", {"name": str(secret)}),
        ("/api/search", {"name": "/etc/passwd"}),
        ("/api/events", {"start_ns": "0", "end_ns": "1", "tracks": str(secret)}),
        ("/api/analyze/advisor", {"path": str(secret)}),
        ("/api/analyze/counters", {"compute_counters": str(secret)}),
        ("/api/analyze/breakdown", {"ranks": str(secret)}),
        ("/api/analyze/breakdown", {"table": str(secret)}),
        ("/api/event", {"track": "1", "start_ns": "1", "name": str(secret)}),
        ("/static/" + quote(str(secret), safe=""), {}),
    ]
    for path, params in probes:
        r = local.get(path, params=params)
        assert r.status_code in (200, 400, 404), (path, r.status_code)
        assert b"TOPSECRET" not in r.content and b"root:x" not in r.content, path
    found = local.get("/api/search", params={"name": "/etc/passwd"}).json()
    assert found["total"] == 0 and found["name"] == []


ENDPOINTS = ["/api/meta", "/api/tracks", "/api/tiles", "/api/counters", "/api/rows",
             "/api/events", "/api/event", "/api/search", "/api/analyze/breakdown",
             "/api/analyze/kernels", "/static/x", "/"]
KEYS = ["level", "start_ns", "end_ns", "tracks", "track", "kind", "ranks", "groups", "limit",
        "name", "format", "by", "table", "token"]
VALUES = st.one_of(
    st.integers(-2**70, 2**70).map(str),
    st.sampled_from(["", "0", "1", "0,1", "1-0", "rank_host", "rank_device", "arrow",
                     str(BASE), str(BASE + 10**6), "../../etc/passwd", "%00", "1e3", " 1",
                     "0" * 30, "٣", "NaN", ",", "0,,1", "2-", "json"]),
    st.text(max_size=12),
)


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(ENDPOINTS), query=st.dictionaries(st.sampled_from(KEYS), VALUES,
                                                              max_size=6))
def test_random_queries_never_500(local: TestClient, path: str, query: dict[str, str]) -> None:
    r = local.get(path, params=query)
    assert r.status_code in (200, 400, 404), (path, query, r.status_code, r.text[:300])
    if path.startswith("/api/"):
        body = r.json()
        assert r.status_code == 200 or set(body) == {"error"}


class BrokenPyramid(FakePyramid):
    def tiles(self, level: int, start: int, end: int, ids: list[int]) -> list[object]:
        raise RuntimeError("boom /secret/path")


def test_an_internal_error_shows_no_traceback(parts: tuple[traceatlas.Trace, FakePyramid]
                                              ) -> None:
    trace, good = parts
    broken = BrokenPyramid.__new__(BrokenPyramid)
    broken.__dict__.update(good.__dict__)
    web = create_app(trace, broken, token=None, allowed_hosts=["127.0.0.1"])
    client = TestClient(web, base_url="http://127.0.0.1", raise_server_exceptions=False)
    r = client.get("/api/tiles", params={"level": 3, "start_ns": BASE, "end_ns": BASE + 9,
                                         "tracks": "1"})
    assert r.status_code == 500 and r.json() == {"error": "internal error"}
    assert "boom" not in r.text and "Traceback" not in r.text
