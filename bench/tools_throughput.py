"""Throughput of the search tool against the local retriever: queries/s and p50/p99 latency.

    python bench/tools_throughput.py                      # 256 queries, 64 concurrent
    python bench/tools_throughput.py --queries 32 --concurrency 8 --docs 500   # quick check
    python bench/tools_throughput.py --url http://host:8000/retrieve          # existing server

Without ``--url`` it writes a synthetic corpus, starts ``agentrl retriever`` in a child
process on a free loopback port (so the server does not share this process's GIL), runs the
calls through ``execute_tool_call`` as the rollout engine does, and stops the server.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from agentrl.tools import execute_tool_call
from envs.retriever.sample import synthetic_corpus, write_corpus
from tools.search import SearchTool


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_retriever(work_dir: Path, num_docs: int) -> tuple[subprocess.Popen, str]:
    corpus = write_corpus(work_dir / "corpus.jsonl", synthetic_corpus(num_docs))
    port = free_port()
    cmd = [
        sys.executable, "-m", "agentrl.cli", "--log-level", "WARNING", "retriever",
        "--corpus", str(corpus), "--index-dir", str(work_dir / "index"), "--port", str(port),
    ]  # fmt: skip
    log = work_dir / "retriever.log"
    with log.open("w") as out:  # the child keeps its own handle
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"the retriever exited with code {proc.returncode}:\n{log.read_text()}"
            )
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return proc, base + "/retrieve"
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the retriever did not start within 120 s")


async def run_calls(
    url: str, num_queries: int, concurrency: int, topk: int
) -> tuple[list[float], int, float]:
    tool = SearchTool({"retrieval_service_url": url, "topk": topk, "max_concurrent": concurrency})
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    errors = 0

    async def one(i: int) -> None:
        nonlocal errors
        async with gate:
            start = time.perf_counter()
            _, _, metrics = await execute_tool_call(
                tool, "bench", {"query_list": [f"tok{i * 7} river city"]}, timeout=60
            )
            latencies.append(time.perf_counter() - start)
            errors += "tool_error" in metrics

    await one(0)  # warm up the connection pool, not timed
    latencies.clear()
    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(num_queries)))
    elapsed = time.perf_counter() - start
    await tool.aclose()
    return latencies, errors, elapsed


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=256, help="search calls to make")
    parser.add_argument("--concurrency", type=int, default=64, help="calls in flight")
    parser.add_argument("--docs", type=int, default=20000, help="synthetic corpus size")
    parser.add_argument("--topk", type=int, default=3, help="documents per query")
    parser.add_argument("--url", help="use this running retriever instead of starting one")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        proc = None
        url = args.url
        if url is None:
            proc, url = start_retriever(Path(tmp), args.docs)
        try:
            latencies, errors, elapsed = asyncio.run(
                run_calls(url, args.queries, args.concurrency, args.topk)
            )
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=10)
    print(f"search tool -> {url}: {args.queries} queries, {args.concurrency} concurrent")
    print(f"  throughput  {args.queries / elapsed:8.1f} queries/s")
    print(f"  latency p50 {percentile(latencies, 50) * 1000:8.1f} ms")
    print(f"  latency p99 {percentile(latencies, 99) * 1000:8.1f} ms")
    print(f"  errors      {errors:8d}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
