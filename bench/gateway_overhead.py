"""The gateway's own cost per turn at the agent CLIs' real request sizes, and how the
CLIs' successive prompts reuse the previous one.

    python bench/gateway_overhead.py                          # 3 runs, both CLIs
    python bench/gateway_overhead.py --runs 1 --clis claude_code --out gw.json
    python bench/gateway_overhead.py --synthesize             # no CLIs: bodies of their shape

Method. First one episode of each CLI (Claude Code in its default mode: ~76 KB Messages
bodies, 24 tools; Codex ``exec``: Responses bodies) runs for real against the gateway over
the ``scripted`` backend (``--turns`` shell-tool calls, then "done"), and an ASGI wrapper
keeps every model request body the gateway received. Then each run replays those bodies,
in order, against a fresh in-process gateway (``httpx.ASGITransport``: no socket) over the
same scripted backend, timing each request from send to the last byte of its (streamed)
answer. A turn's *overhead* is that time less the backend's ``generate`` (the model's part:
here the scripted backend tokenizing its reply): parsing and validating the body,
translating the dialect, rendering the chat template and tokenizing (``Session.prepare``,
timed apart as ``prepare_ms``), the prefix / fork check, recording the output, parsing tool
calls and building the streamed answer. The tokenizer is the offline tiny model's
(``agentrl make-tiny-model``; ``--tokenizer DIR`` for another): its ~2K-token vocabulary
makes more tokens of the same text than a real model's would.

Without the CLIs (node or the binaries absent, or ``--synthesize``) the bodies are
synthesized in Claude Code's default-mode shape (a ~5.8k character system prompt, 24 tools
with ~64.5k characters of schemas, a growing tool loop: docs/gateway.md) and the report
says ``"source": "synthesized"``.

Prefix reuse, per episode turn: whether the prompt the gateway sent the backend extends the
previous turn's prompt + completion (``extends_previous``: the gateway's own recording), the
length of that shared prefix, and how far a full render of the turn's messages agrees with
the previous prompt + completion (``full_render_shared_prefix``: what a backend's prefix
cache would reuse if the prompt were re-rendered from the messages instead), and the forks
the gateway recorded (``rewrites``). Prints one JSON line (and writes it to ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

logger = logging.getLogger("gateway_overhead")
MODEL_ROUTES = ("/v1/messages", "/v1/responses", "/v1/chat/completions")
CLI_TIMEOUT_S = 120
SESSION = {"claude_code": "cc", "codex": "cx"}


# ---------------------------------------------------------------------------- capture


class BodyRecorder:
    """An ASGI wrapper keeping ``(path, query, body)`` of every model request."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith(MODEL_ROUTES):
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        self.requests.append({"path": scope["path"],
                              "query": scope.get("query_string", b"").decode(),
                              "body": body.decode("utf-8")})
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    """A reply calling one tool, in the hermes format the gateway parses."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def replies_for(cli: str, turns: int) -> list[str]:
    """``turns`` shell calls (each writes a line to note.txt and shows the file), then done."""
    name, key = ("Bash", "command") if cli == "claude_code" else ("exec_command", "cmd")
    calls = [tool_call(name, {key: f"echo step-{k} >> note.txt && cat note.txt && ls -la"})
             for k in range(turns)]
    return [*calls, "done"]


def find_cli(cli: str) -> str | None:
    env_var, name = (("AGENTRL_CLAUDE_BIN", "claude") if cli == "claude_code"
                     else ("AGENTRL_CODEX_BIN", "codex"))  # fmt: skip
    path = os.environ.get(env_var) or shutil.which(name)
    if shutil.which("node") is None or not path or not Path(path).exists():
        return None
    return path


def capture(cli: str, binary: str, tokenizer: Any, turns: int) -> list[dict[str, Any]]:
    """The model request bodies of one real episode of `cli` against the gateway."""
    from agentrl.gateway import create_app
    from agentrl.rollout.backends.scripted import ScriptedBackend
    from agentrl.utils.serving import serve_in_thread

    backend = ScriptedBackend(replies_for(cli, turns), tokenizer)
    recorder = BodyRecorder(create_app(backend, tokenizer, model_name="policy"))
    session = SESSION[cli]
    prompt = "Append a line to note.txt with the shell, several times, then say done."
    with tempfile.TemporaryDirectory() as tmp, serve_in_thread(recorder) as url:
        work, home = Path(tmp) / "workspace", Path(tmp) / "home"
        work.mkdir()
        home.mkdir()
        if cli == "claude_code":  # its default mode: the full system prompt and 24 tools
            env = {"IS_SANDBOX": "1", "CLAUDE_CONFIG_DIR": str(home),
                   "ANTHROPIC_API_KEY": "dummy", "ANTHROPIC_BASE_URL": f"{url}/sessions/{session}",
                   "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
            command = [binary, "--output-format", "json", "--dangerously-skip-permissions",
                       "--model", "policy", "-p", prompt]
        else:
            (home / "config.toml").write_text(
                'model_provider = "agentrl"\napproval_policy = "never"\n'
                'sandbox_mode = "danger-full-access"\n[model_providers.agentrl]\n'
                f'name = "agentrl"\nbase_url = "{url}/sessions/{session}/v1"\n'
                'wire_api = "responses"\nenv_key = "AGENTRL_API_KEY"\n')
            env = {"CODEX_HOME": str(home), "AGENTRL_API_KEY": "dummy"}
            command = [binary, "exec", "--json", "--skip-git-repo-check",
                       "--dangerously-bypass-approvals-and-sandbox", "-m", "policy",
                       "-c", "analytics.enabled=false", "--disable", "plugins", "--disable",
                       "remote_plugin", "--disable", "apps", "--disable", "in_app_updates",
                       "--disable", "api_key_model_discovery", prompt]
        done = subprocess.run(command, cwd=work, env={**os.environ, **env},
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=CLI_TIMEOUT_S)  # fmt: skip
    if done.returncode != 0 or len(recorder.requests) != turns + 1:
        raise RuntimeError(f"{cli}: exit {done.returncode}, {len(recorder.requests)} model "
                           f"requests (expected {turns + 1}):\n{(done.stdout + done.stderr)[-2000:]}")
    return recorder.requests


# ---------------------------------------------------------------------------- synthesize


def synthesized_episode(turns: int) -> list[dict[str, Any]]:
    """Messages bodies of Claude Code's documented default-mode shape: a ~5.8k character
    system prompt, 24 tools (~64.5k characters of schemas), ``turns`` tool calls then done,
    the assistant turns echoed back as the gateway answered them (``replies_for``)."""
    words = ("the agent reads files edits code runs commands and checks results before it "
             "answers ").split()
    text = " ".join(words[i % len(words)] for i in range(12_000))
    system = [{"type": "text", "text": text[:5_800]}]
    tools = [{"name": "Bash" if i == 0 else f"Tool{i}", "description": text[:1_500],
              "input_schema": {"type": "object", "properties": {
                  "command" if i == 0 else "value": {"type": "string",
                                                    "description": text[:1_100]}},
                  "required": ["command" if i == 0 else "value"]}}
             for i in range(24)]  # fmt: skip
    messages: list[dict[str, Any]] = [{"role": "user", "content": [
        {"type": "text", "text": "Append a line to note.txt with the shell, several times."}]}]
    bodies = []
    for k in range(turns + 1):
        body = {"model": "policy", "max_tokens": 64000, "stream": True, "system": system,
                "tools": tools, "messages": [dict(m) for m in messages]}
        bodies.append({"path": "/sessions/cc/v1/messages", "query": "beta=true",
                       "body": json.dumps(body)})
        command = f"echo step-{k} >> note.txt && cat note.txt && ls -la"
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{k}", "name": "Bash", "input": {"command": command}}]})
        output = "\n".join(f"step-{j}" for j in range(k + 1)) + "\n" + text[:600]
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": output}]})
    return bodies


# ---------------------------------------------------------------------------- replay


class TimedBackend:
    """The scripted backend, its ``generate`` timed and its inputs kept."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def generate(self, input_ids: list[int], sampling_params: dict[str, Any],
                       request_id: str) -> Any:  # fmt: skip
        start = time.perf_counter()
        out = await self.inner.generate(input_ids, sampling_params, request_id)
        self.calls.append({"id": request_id, "input_ids": list(input_ids),
                           "output_ids": list(out.output_ids),
                           "generate_s": time.perf_counter() - start})
        return out


@contextmanager
def timed_prepare(calls: list[dict[str, Any]]):
    """``Session.prepare`` timed, with its messages and tools kept (bench only)."""
    from agentrl.gateway.sessions import Session

    original = Session.prepare

    def prepare(self, renderer, messages, tools, side=False):
        start = time.perf_counter()
        segment = original(self, renderer, messages, tools, side)
        calls.append({"prepare_s": time.perf_counter() - start, "messages": messages,
                      "tools": tools, "side": side, "renderer": renderer})
        return segment

    Session.prepare = prepare
    try:
        yield
    finally:
        Session.prepare = original


async def replay_once(requests: list[dict[str, Any]], replies: list[str], tokenizer: Any,
                      session: str) -> dict[str, Any]:  # fmt: skip
    """One replay of an episode's bodies against a fresh gateway; per request timings."""
    import httpx

    from agentrl.gateway import create_app
    from agentrl.rollout.backends.scripted import ScriptedBackend

    backend = TimedBackend(ScriptedBackend(replies, tokenizer))
    app = create_app(backend, tokenizer, model_name="policy")
    prepares: list[dict[str, Any]] = []
    turns = []
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway",
                                 timeout=60) as client:  # fmt: skip
        with timed_prepare(prepares):
            for request in requests:
                path = request["path"].replace(f"/sessions/{session}/", "/sessions/replay/", 1)
                url = path + (f"?{request['query']}" if request["query"] else "")
                before = len(backend.calls)
                start = time.perf_counter()
                answer = await client.post(url, content=request["body"].encode(),
                                           headers={"content-type": "application/json"})
                total = time.perf_counter() - start
                if answer.status_code != 200:
                    raise RuntimeError(f"replay {url}: {answer.status_code} {answer.text[:500]}")
                generate = sum(c["generate_s"] for c in backend.calls[before:])
                turns.append({"total_s": total, "generate_s": generate,
                              "prepare_s": prepares[-1]["prepare_s"]})
        record = (await client.get("/sessions/replay")).json()
    return {"turns": turns, "calls": backend.calls, "prepares": prepares, "record": record}


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def prefix_reuse(first: dict[str, Any]) -> list[dict[str, Any]]:
    """Per episode call of one replay: tokens, whether the prompt extends the previous
    prompt + completion, the shared prefix, and a full render's agreement with it."""
    from agentrl.gateway.sessions import comparable_message, template_message

    rows = []
    episode = [(c, p) for c, p in zip(first["calls"], first["prepares"], strict=True)
               if not p["side"]]
    previous: list[int] | None = None
    for k, (call, prep) in enumerate(episode):
        prompt = call["input_ids"]
        renderer = prep["renderer"]
        start = time.perf_counter()
        full = renderer.prompt_ids([template_message(comparable_message(m))
                                    for m in prep["messages"]], prep["tools"] or None)
        full_s = time.perf_counter() - start
        row: dict[str, Any] = {"turn": k, "prompt_tokens": len(prompt),
                               "completion_tokens": len(call["output_ids"]),
                               "full_render_ms": round(full_s * 1e3, 3),
                               "full_render_equals_prompt": full == prompt}
        if previous is not None:
            shared = common_prefix(prompt, previous)
            row |= {"extends_previous": shared == len(previous), "shared_prefix": shared,
                    "previous_tokens": len(previous), "new_tokens": len(prompt) - shared,
                    "full_render_shared_prefix": common_prefix(full, previous)}
        rows.append(row)
        previous = prompt + call["output_ids"]
    return rows


def summarize(cli: str, source: str, requests: list[dict[str, Any]], runs: list[dict]) -> dict:
    """Per turn over the runs (median/min/max ms); each run's mean per turn (all turns, the
    first, the later ones) and their median/min/max over the runs; the prefix reuse of the
    first run."""
    def ms(seconds: float) -> float:
        return round(seconds * 1e3, 3)

    per_turn = []
    for k, request in enumerate(requests):
        overhead = [r["turns"][k]["total_s"] - r["turns"][k]["generate_s"] for r in runs]
        per_turn.append({
            "turn": k, "body_bytes": len(request["body"].encode()),
            "overhead_ms_median": ms(statistics.median(overhead)),
            "overhead_ms_min": ms(min(overhead)), "overhead_ms_max": ms(max(overhead)),
            "prepare_ms_median": ms(statistics.median(r["turns"][k]["prepare_s"] for r in runs)),
            "generate_ms_median": ms(statistics.median(r["turns"][k]["generate_s"] for r in runs)),
        })  # fmt: skip
    def run_stat(pick: Any, turns: slice) -> dict[str, float]:
        """median/min/max over the runs of each run's mean of ``pick(turn)`` over ``turns``."""
        means = [statistics.fmean(pick(t) for t in r["turns"][turns]) for r in runs]
        return {"median": ms(statistics.median(means)), "min": ms(min(means)),
                "max": ms(max(means))}

    def overhead(turn: dict) -> float:
        return turn["total_s"] - turn["generate_s"]

    def prepare(turn: dict) -> float:
        return turn["prepare_s"]

    reuse = prefix_reuse(runs[0])
    for row, timing in zip(reuse, per_turn, strict=False):
        timing["prompt_tokens"] = row["prompt_tokens"]
    record = runs[0]["record"]
    later = [r for r in reuse if "extends_previous" in r]
    return {
        "cli": cli, "source": source, "requests": len(requests),
        "body_bytes_max": max(t["body_bytes"] for t in per_turn),
        "prompt_tokens_max": max(r["prompt_tokens"] for r in reuse),
        "overhead_ms_per_turn": run_stat(overhead, slice(None)),
        "first_turn_overhead_ms": run_stat(overhead, slice(0, 1)),
        "first_turn_prepare_ms": run_stat(prepare, slice(0, 1)),
        "later_turns_overhead_ms": run_stat(overhead, slice(1, None)),
        "later_turns_prepare_ms": run_stat(prepare, slice(1, None)),
        "turns": per_turn,
        "prefix_reuse": {
            "every_prompt_extends_previous": all(r["extends_previous"] for r in later),
            "full_render_matches_recording": all(r["full_render_equals_prompt"] for r in reuse),
            "rewrites": record["rewrites"], "segments": len(record["trajectories"]),
            "side_calls": len(record["side_calls"]), "turns": reuse,
        },
    }  # fmt: skip


# ---------------------------------------------------------------------------- main


def versions() -> dict[str, str]:
    import tokenizers
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}


def load_tokenizer(path: str | None) -> tuple[Any, str]:
    from transformers import AutoTokenizer

    if path is None:
        from agentrl.models.tiny import make_tiny_model

        path = str(make_tiny_model(Path(tempfile.mkdtemp()) / "tiny", size="tiny", seed=0))
        return AutoTokenizer.from_pretrained(path), "tiny (agentrl make-tiny-model, seed 0)"
    return AutoTokenizer.from_pretrained(path), path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="replays of each episode")
    parser.add_argument("--turns", type=int, default=4, help="shell-tool calls per episode")
    parser.add_argument("--clis", nargs="+", default=["claude_code", "codex"],
                        choices=["claude_code", "codex"])
    parser.add_argument("--synthesize", action="store_true",
                        help="synthesized Claude Code-shaped bodies instead of real episodes")
    parser.add_argument("--tokenizer", default=None, help="tokenizer dir (default: tiny model)")
    parser.add_argument("--save-bodies", default=None, help="write the captured bodies here")
    parser.add_argument("--out", default=None, help="also write the JSON line to this file")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.turns < 1:
        parser.error("--runs and --turns must be at least 1")
    logging.basicConfig(level=logging.WARNING)
    import transformers

    transformers.logging.set_verbosity_error()  # the tiny tokenizer's 32k length notice
    tokenizer, tokenizer_name = load_tokenizer(args.tokenizer)
    episodes = {}
    for cli in ["claude_code"] if args.synthesize else args.clis:
        binary = None if args.synthesize else find_cli(cli)
        if binary is None:
            if not args.synthesize:
                logger.warning("%s: node or the CLI is absent: synthesized bodies", cli)
            requests, source, session = synthesized_episode(args.turns), "synthesized", "cc"
        else:
            requests, source, session = capture(cli, binary, tokenizer, args.turns), "captured", SESSION[cli]
        if args.save_bodies:
            Path(args.save_bodies).mkdir(parents=True, exist_ok=True)
            (Path(args.save_bodies) / f"{cli}_{source}.json").write_text(json.dumps(requests))
        replies = replies_for(cli, args.turns)
        asyncio.run(replay_once(requests, replies, tokenizer, session))  # warm-up, not timed
        runs = [asyncio.run(replay_once(requests, replies, tokenizer, session))
                for _ in range(args.runs)]
        episodes[cli if source == "captured" else f"{cli}_synthesized"] = summarize(
            cli, source, requests, runs)
    line = json.dumps({"runs": args.runs, "turns": args.turns, "tokenizer": tokenizer_name,
                       "episodes": episodes, **versions()})  # fmt: skip
    if args.out:
        Path(args.out).write_text(line + "\n")
    print(line)


if __name__ == "__main__":
    main()
