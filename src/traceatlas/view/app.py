"""The viewer's Starlette app: the JSON API (``api*.py``), the static front-end and the
request guard (``security.py``). Static files are the ones listed from the package's
``view/static/`` at start-up; a request path is looked up in that list, never joined."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from traceatlas.view import api, api_analyze, api_critical, api_events, api_search
from traceatlas.view.api_common import Context, Handler, answer, error_response
from traceatlas.view.security import Guard

STATIC_DIR = Path(__file__).parent / "static"
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon",
    ".json": "application/json", ".woff2": "font/woff2",
}


def static_files(root: Path = STATIC_DIR) -> dict[str, Path]:
    """File name -> path of the regular files directly in ``root`` with a known type."""
    if not root.is_dir():
        return {}
    return {p.name: p for p in sorted(root.iterdir())
            if p.is_file() and not p.is_symlink() and p.suffix in MEDIA_TYPES}


def _static(files: dict[str, Path], name: str) -> Response:
    path = files.get(name)
    if path is None:
        return error_response("not found", 404)
    return Response(path.read_bytes(), media_type=MEDIA_TYPES[path.suffix])


def create_app(trace: Any, pyramid: Any, *, token: str | None,
               allowed_hosts: list[str]) -> Starlette:
    """The app serving ``trace`` and its ``pyramid``. ``token``: required on every
    request when set; ``allowed_hosts``: Host header names accepted (``*`` any)."""
    ctx = Context(trace, pyramid, title=api.title_of(trace))
    api.prepare(ctx)
    files = static_files()

    def route(path: str, handler: Handler) -> Route:
        def endpoint(request: Request) -> Response:
            return answer(ctx, handler, request)

        return Route(path, functools.update_wrapper(endpoint, handler), methods=["GET"])

    def index(request: Request) -> Response:
        return _static(files, "index.html")

    def static(request: Request) -> Response:
        return _static(files, str(request.path_params["name"]))

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        text = "not found" if status == 404 else (
            "method not allowed" if status == 405 else "internal error")
        return error_response(text, status)

    routes = [
        route("/api/meta", api.meta),
        route("/api/tracks", api.tracks),
        route("/api/tiles", api.tiles),
        route("/api/counters", api.counters),
        route("/api/rows", api.rows),
        route("/api/events", api_events.events),
        route("/api/event", api_events.event),
        route("/api/search", api_search.search),
        route("/api/analyze/{name:str}", api_analyze.analyze),
        route("/api/critical_path", api_critical.critical_path),
        Route("/", index, methods=["GET"]),
        Route("/static/{name:str}", static, methods=["GET"]),
    ]
    web = Starlette(
        routes=routes,
        middleware=[Middleware(Guard, token=token, hosts=allowed_hosts)],
        exception_handlers={404: not_found, 405: not_found, 500: not_found},
    )
    web.state.context = ctx  # the CLI primes caches (api_critical.path_of) through it
    return web
