"""bridge.py: the command it starts gets ``{port}`` replaced by a loopback port that leads
to the unix socket, and its exit status is the bridge's."""

from __future__ import annotations

import asyncio
import sys

from agentrl.agents.harness import BRIDGE

CLIENT = ("import os, urllib.request; "
          "print(urllib.request.urlopen(os.environ['URL'] + '/hi').read().decode()); "
          "raise SystemExit(3)")


def test_the_cli_reaches_the_socket_through_the_port(tmp_path):
    sock = str(tmp_path / "s.sock")
    requests = []

    async def serve(reader, writer):
        requests.append((await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")[0])
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello")
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_unix_server(serve, sock)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(BRIDGE), sock, "--", sys.executable, "-c", CLIENT,
            env={"URL": "http://127.0.0.1:{port}"}, stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        server.close()
        return proc.returncode, out.decode()

    code, out = asyncio.run(main())
    assert (code, out) == (3, "hello\n")
    assert requests == [b"GET /hi HTTP/1.1"]
