"""Run an ASGI app with uvicorn on a loopback port in a background thread.

Tests and benches start our real servers (retriever, sandbox, `agentrl serve`) this way:

    with serve_in_thread(create_app(...)) as base_url:   # "http://127.0.0.1:PORT"
        ...
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn


@contextmanager
def serve_in_thread(app, host: str = "127.0.0.1", port: int = 0,
                    startup_timeout: float = 10.0) -> Iterator[str]:
    """Run `app` in a daemon thread; yield its base URL; stop it on exit.

    `port=0` takes a free port from the OS (no race between picking and binding it).
    """
    # log_config=None: uvicorn's own dictConfig would close every handler the process has
    # (a run's log file among them) when the server starts.
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", log_config=None)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"uvicorn did not start on {host}:{port}")
        time.sleep(0.01)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(timeout=startup_timeout)
