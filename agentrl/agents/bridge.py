"""Inside the sandbox: a loopback TCP port that leads to the gateway's unix socket, then the CLI.

    python bridge.py SOCKET -- CLI ARGS...     # standard library only; run by path

The sandbox has a network namespace of its own (nothing but a loopback), so the CLI cannot
reach the gateway by TCP. This script binds ``127.0.0.1:0`` inside it, replaces ``{port}``
in the CLI's arguments and environment with the port it got, pipes every connection to the
unix socket ``SOCKET`` (bound into the sandbox; the relay outside listens on it), starts the
CLI with stdin from /dev/null and exits with its exit status. Outside a sandbox (kind
``none``) it works the same way on the host's loopback.
"""

from __future__ import annotations

import asyncio
import os
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _main(socket_path: str, command: list[str]) -> int:
    async def connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(connect, "127.0.0.1", 0)
    port = str(server.sockets[0].getsockname()[1])
    argv = [arg.replace("{port}", port) for arg in command]
    env = {key: value.replace("{port}", port) for key, value in os.environ.items()}
    proc = await asyncio.create_subprocess_exec(*argv, env=env, stdin=asyncio.subprocess.DEVNULL)
    code = await proc.wait()
    server.close()
    return code if code >= 0 else 128 - code


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: bridge.py SOCKET -- COMMAND...\n")
        return 2
    return asyncio.run(_main(argv[0], argv[2:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
