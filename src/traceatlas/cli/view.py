"""``traceatlas view PATH...``: open (or ingest) a trace, build or open its pyramid and
serve the viewer (``traceatlas.view.app``) under uvicorn until Ctrl-C."""

from __future__ import annotations

import errno
import socket
import threading
import time
import webbrowser
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer

from traceatlas.cli import output
from traceatlas.cli.options import EngineOpt, _guard, _open, app
from traceatlas.errors import InputError
from traceatlas.ops.select import parse_rank_spans, parse_window


@app.command("view")
@_guard
def view_command(
    path: Annotated[list[Path], typer.Argument(help="A store, or trace files / directories.")],
    port: Annotated[int, typer.Option("--port", help="TCP port (0: any free port).")] = 8765,
    host: Annotated[str, typer.Option(
        "--host", help="Address to bind; anything but loopback requires a token.")
    ] = "127.0.0.1",
    no_browser: Annotated[bool, typer.Option(
        "--no-browser", help="Print the URL only; do not open a browser.")] = False,
    token: Annotated[str | None, typer.Option(
        "--token", help="Token every request must carry (generated and printed when "
        "--host is not loopback).")] = None,
    window: Annotated[str | None, typer.Option(
        "--window", help="Open on START:END relative to the trace start (e.g. 1.5s:2s), "
        "or '@' + epoch ns.")] = None,
    ranks: Annotated[str | None, typer.Option(
        "--ranks", help="Open on these ranks, e.g. 0,3-5.")] = None,
    critical_path: Annotated[bool, typer.Option(
        "--critical-path", help="Open with the critical path drawn (of --step N, else of "
        "the selection or the step in view).")] = False,
    step: Annotated[int | None, typer.Option(
        "--step", help="Open on this step (with --critical-path: its path).", min=0)] = None,
    engine: EngineOpt = "local",
) -> None:
    """Open the trace map in a browser: zoom from the whole run down to single kernels,
    across ranks. Serves on http://127.0.0.1:8765 until Ctrl-C."""
    from traceatlas.view import security

    if not 0 <= port <= 65535:
        raise InputError("--port", f"{port} is not a TCP port (0..65535)")
    spec = parse_window(window) if window is not None else None
    spans = parse_rank_spans(ranks) if ranks is not None else None
    if token is not None and (not token or len(token) > 512 or not token.isascii()
                              or not token.isprintable()):
        raise InputError("--token", "give 1 to 512 printable ASCII characters")
    if token is None and not security.is_loopback(host):
        token = security.new_token()
        output.say(f"generated token (every request must carry it): {token}")
    sock = _bind(host, port)
    try:
        trace = _open(path, engine)
        from traceatlas.ops.select import resolve_ranks, trace_start_ns
        from traceatlas.view.pyramid import ensure_pyramid

        with output.progress("pyramid") as bar:
            pyramid = ensure_pyramid(trace, progress=bar)
        state: list[str] = []
        if spec is not None:
            lo, hi = spec.resolve(trace_start_ns(trace) if spec.needs_trace_start else 0)
            meta = pyramid.meta()
            state += [f"start={lo if lo is not None else meta['start_ns']}",
                      f"end={hi if hi is not None else meta['end_ns']}"]
        if spans is not None:
            # url.js reads one inclusive range: the one enclosing the ranks kept.
            kept = resolve_ranks(ranks or "", trace.ranks)
            state.append(f"ranks={kept[0]}-{kept[-1]}")
        from traceatlas.view.app import create_app

        web = create_app(trace, pyramid, token=token,
                         allowed_hosts=security.allowed_hosts(host))
        if step is not None:
            state = _step_state(web, trace, step, critical_path, keep_window=spec is not None,
                                state=state)
        elif critical_path:
            state.append("cp=1")
        url = _url(host, sock.getsockname()[1], token, state)
        _serve(web, sock, url, open_browser=not no_browser)
    finally:
        sock.close()


def _step_state(web: Any, trace: Any, step: int, critical: bool, *, keep_window: bool,
                state: list[str]) -> list[str]:
    """The URL state opening on step ``step`` (its span over the ranks, or its critical
    path's region, 2% margins; an explicit ``--window`` wins) and, with ``critical``, the
    overlay of that step (``cp=step:N``). The path is computed here, once: a bad step is
    bad input before the server starts, and the page's first request hits the cache."""
    from traceatlas.ops.select import step_spans

    spans = step_spans(trace, step)  # InputError naming --step when there is none
    lo, hi = min(s[1] for s in spans), max(s[2] for s in spans)
    if critical:
        from traceatlas.view import api_critical

        found = api_critical.path_of(web.state.context, ("step", step, None, None))
        if found.segments.height:
            lo = min(lo, int(found.segments["start_ns"][0]))
            hi = max(hi, int(found.segments["end_ns"][-1]))
    out = list(state)
    if not keep_window:
        pad = max((hi - lo) // 50, 1)
        out = [x for x in out if not x.startswith(("start=", "end="))]
        out = [f"start={lo - pad}", f"end={hi + pad}", *out]
    if critical:
        out.append(f"cp=step:{step}")
    return out


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (a port in use or a bad address is bad input)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InputError("--host", f"cannot resolve {host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound: {exc.strerror}"
        raise InputError(f"--port {port}", f"{host}:{port} {why}") from None
    sock.set_inheritable(True)
    return sock


def _url(host: str, port: int, token: str | None, state: list[str]) -> str:
    """``http://HOST:PORT/[?token=T][#start=..&end=..&ranks=..]``; a wildcard address
    is shown as 127.0.0.1, an IPv6 address in brackets."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    if ":" in shown:
        shown = f"[{shown}]"
    url = f"http://{shown}:{port}/"
    if token:
        url += "?token=" + quote(token, safe="")
    return url + ("#" + "&".join(state) if state else "")


def _serve(web: object, sock: socket.socket, url: str, *, open_browser: bool) -> None:
    """Run uvicorn on ``sock`` until Ctrl-C; print ``url`` (stdout) once it listens."""
    import uvicorn

    config = uvicorn.Config(web, log_level="warning", access_log=False,  # type: ignore[arg-type]
                            lifespan="off")
    server = uvicorn.Server(config)

    def announce() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.05)
        if server.started:
            typer.echo(url)
            output.say("serving the viewer; Ctrl-C stops it")
            if open_browser:
                webbrowser.open(url)

    threading.Thread(target=announce, daemon=True).start()
    server.run(sockets=[sock])
