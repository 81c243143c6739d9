"""Running the app with uvicorn: in the foreground (`engine serve`) or in a thread on a free loopback port
(tests, benchmarks), always stopping cleanly."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

from engine.errors import EngineError, missing_extra, set_option_names
from engine.serve.options import ServeOptions


def _uvicorn():
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import python_multipart  # noqa: F401
        import uvicorn
    except ImportError:
        raise missing_extra("fastapi, uvicorn, python-multipart and prometheus-client", "serve") from None
    return uvicorn


def _config(options: ServeOptions, log_level: str = "info"):
    uvicorn = _uvicorn()
    from engine.serve.app import create_app
    app = create_app(options)
    return uvicorn.Config(app, host=options.host, port=options.port, log_level=log_level, access_log=False,
                          timeout_graceful_shutdown=5)


def serve(options: ServeOptions) -> None:
    """Serve until interrupted."""
    options = options.checked()
    config = _config(options)
    announce(options)
    set_option_names(str)  # from here on, errors answer requests: they name the request's fields, not flags
    try:
        _uvicorn().Server(config).run()
    except OSError as exc:
        raise EngineError(f"cannot listen on {options.host}:{options.port}: {exc.strerror or exc}") from None


def announce(options: ServeOptions) -> None:
    """What the server will serve, said before it listens; a warning when that is nothing (a wrong --root, a
    collection not built yet): new collections are picked up as they appear, so the server starts anyway."""
    from engine.core.collection import list_collections
    from engine.progress import info, warn
    found = list_collections(options.root)
    url = f"http://{options.host}:{options.port}/"
    if options.collections:
        missing = [n for n in options.collections if n not in found]
        if missing:
            warn(f"no collection {', '.join(map(repr, missing))} in {options.root}/ yet (there: "
                 f"{', '.join(found) or 'none'}); it is served once it is built")
        found = [n for n in found if n in options.collections]
    if options.pipelines:
        info(f"serving {len(options.pipelines)} pipeline(s) at {url}: "
             f"{', '.join(f'{name} = {stage}' for name, stage in options.pipelines)}")
    if found:
        info(f"serving {len(found)} collection(s) from {options.root}/ at {url}: {', '.join(found)}")
    else:
        warn(f"no collection in {options.root}/ to serve yet: build one (`engine build NAME --texts FILE "
             f"--root {options.root}`), or point --root (or ENGINE_ROOT) at the folder that holds them; the "
             f"server at {url} picks them up as they appear")


@contextlib.contextmanager
def running(options: ServeOptions, log_level: str = "warning") -> Iterator[str]:
    """A server on 127.0.0.1 and a free port, in a thread, for the `with` block; yields its base URL."""
    uvicorn = _uvicorn()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    from dataclasses import replace
    config = _config(replace(options, host="127.0.0.1", port=port), log_level)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise EngineError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
