"""The URL ``traceatlas view`` prints carries a ``--token`` the page and the guard read back
exactly, whatever printable ASCII it holds (``&``, ``#``, ``%``, ``+``, spaces)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient
from typer.testing import CliRunner

from traceatlas.cli.main import app as cli_app
from traceatlas.cli.view import _url
from traceatlas.view.security import Guard


@pytest.mark.parametrize("token", ["a&b=c", "x#y", "50%+1 two", "plain"])
def test_printed_url_carries_the_token_exactly(token: str) -> None:
    url = _url("127.0.0.1", 8765, token, ["start=1", "end=2"])
    parts = urlsplit(url)
    assert parse_qs(parts.query) == {"token": [token]}  # what the page's URLSearchParams reads
    assert parts.fragment == "start=1&end=2"
    app = Starlette(routes=[Route("/", lambda r: PlainTextResponse("ok"))])
    client = TestClient(Guard(app, token=token, hosts=["127.0.0.1"]),
                        base_url="http://127.0.0.1")
    assert client.get("/?" + parts.query).status_code == 200
    assert client.get("/?token=wrong").status_code == 401


def test_non_ascii_token_is_refused() -> None:
    got = CliRunner().invoke(cli_app, ["view", "nowhere", "--token", "caf\u00e9"])
    assert got.exit_code == 2
    assert "--token" in got.output and "Traceback" not in got.output
