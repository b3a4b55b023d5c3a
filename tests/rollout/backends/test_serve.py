"""Tests for agentrl/rollout/backends/serve.py: SGLang's HTTP shapes over the hf backend."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM

from agentrl.rollout.backends.hf import HFBackend
from agentrl.rollout.backends.serve import create_app
from agentrl.utils.serving import serve_in_thread

GREEDY = {"temperature": 0, "max_new_tokens": 6}


def post(url, path, body=None, timeout=60):
    return httpx.post(url + path, json=body, timeout=timeout)


# every route of the module docstring, in the order the app matches them (the handlers live
# in agentrl/rollout/backends/serve_generation.py and serve_control.py)
ROUTES = [
    ("/generate", {"POST"}), ("/v1/chat/completions", {"POST"}), ("/health", {"GET"}),
    ("/health_generate", {"GET"}), ("/get_model_info", {"GET"}), ("/model_info", {"GET"}),
    ("/get_server_info", {"GET"}), ("/server_info", {"GET"}), ("/get_weight_version", {"GET"}),
    ("/flush_cache", {"GET", "POST"}), ("/abort_request", {"POST"}),
    ("/update_weights_from_disk", {"POST"}), ("/get_weights_by_name", {"GET", "POST"}),
    ("/update_weights_from_tensor", {"POST"}), ("/release_memory_occupation", {"GET", "POST"}),
    ("/resume_memory_occupation", {"GET", "POST"}),
]


def test_the_app_serves_every_route_of_the_docstring(served):
    _, backend = served
    app = create_app(backend, model_path="m")
    own = {app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url}
    assert [(r.path, r.methods) for r in app.routes if r.path not in own] == ROUTES


def test_generate_single_returns_sglang_shape(served, prompts, tiny_tokenizer):
    url, backend = served
    reply = post(
        url,
        "/generate",
        {"input_ids": prompts[0], "sampling_params": GREEDY, "return_logprob": True, "rid": "one"},
    )
    assert reply.status_code == 200
    body = reply.json()
    assert set(body) == {"text", "output_ids", "meta_info"}
    meta = body["meta_info"]
    assert meta["id"] == "one"
    assert meta["finish_reason"] == {"type": "length", "length": 6}
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (4, 6)
    assert meta["input_token_logprobs"] == []
    triples = meta["output_token_logprobs"]
    assert [t[1] for t in triples] == body["output_ids"]
    assert all(t[2] is None and t[0] <= 0 for t in triples)
    assert body["text"] == tiny_tokenizer.decode(body["output_ids"])


def test_generate_batch_is_in_order_and_matches_single_requests(served, prompts):
    url, _ = served
    singles = [
        post(url, "/generate", {"input_ids": p, "sampling_params": GREEDY}).json() for p in prompts
    ]
    assert all("output_token_logprobs" not in s["meta_info"] for s in singles)
    reply = post(
        url,
        "/generate",
        {"input_ids": prompts, "sampling_params": GREEDY, "rid": "b", "return_logprob": True},
    )
    batch = reply.json()
    assert isinstance(batch, list) and len(batch) == 4
    assert [b["output_ids"] for b in batch] == [s["output_ids"] for s in singles]
    assert [b["meta_info"]["id"] for b in batch] == ["b_0", "b_1", "b_2", "b_3"]
    per_item = post(
        url,
        "/generate",
        {
            "input_ids": prompts[:2],
            "rid": ["x", "y"],
            "sampling_params": [GREEDY, {**GREEDY, "max_new_tokens": 2}],
        },
    )
    assert [len(b["output_ids"]) for b in per_item.json()] == [6, 2]
    assert [b["meta_info"]["id"] for b in per_item.json()] == ["x", "y"]


def test_generate_from_text_and_token_texts(served, tiny_tokenizer):
    url, _ = served
    text = "hello there world, how are you"
    by_text = post(
        url,
        "/generate",
        {
            "text": text,
            "sampling_params": GREEDY,
            "return_logprob": True,
            "return_text_in_logprobs": True,
        },
    )
    by_ids = post(
        url, "/generate", {"input_ids": tiny_tokenizer.encode(text), "sampling_params": GREEDY}
    )
    assert by_text.json()["output_ids"] == by_ids.json()["output_ids"]
    triples = by_text.json()["meta_info"]["output_token_logprobs"]
    assert [t[2] for t in triples] == [tiny_tokenizer.decode([t[1]]) for t in triples]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"input_ids": [1, 2], "stream": True}, "streaming is not supported"),
        ({"input_ids": [1], "text": "a"}, "give exactly one of 'text' or 'input_ids'"),
        ({}, "give exactly one of 'text' or 'input_ids'"),
        ({"input_ids": []}, "'input_ids' must be a non-empty list"),
        ({"input_ids": [1], "logprob_start_len": -5}, "'logprob_start_len' must be -1 (output"),
        ({"input_ids": [1], "top_logprobs_num": 2}, "top_logprobs_num for input tokens only"),
        ({"input_ids": [1], "sampling_params": {"bogus": 1}}, "unknown sampling param 'bogus'"),
        ({"input_ids": [[1], [2]], "rid": ["a"]}, "'rid' has 1 items for 2 prompts"),
        ({"input_ids": [[1], [2]], "rid": ["a", "a"]}, "'rid' values must be unique"),
        ({"input_ids": [[1], [10**7]]}, "token ids out of the vocabulary"),
        ([1, 2], "the body must be a JSON object"),
    ],
)
def test_bad_generate_requests_get_400_with_sglang_error(served, body, message):
    url, _ = served
    reply = post(url, "/generate", body)
    assert reply.status_code == 400
    assert message in reply.json()["error"]["message"]


def test_info_and_health_endpoints(served, varied_model_dir):
    url, backend = served
    assert httpx.get(url + "/health", timeout=10).status_code == 200
    assert httpx.get(url + "/health_generate", timeout=60).status_code == 200
    info = httpx.get(url + "/get_model_info", timeout=10).json()
    assert info == {
        "model_path": str(varied_model_dir),
        "tokenizer_path": str(varied_model_dir),
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "0",
    }
    assert httpx.get(url + "/model_info", timeout=10).json() == info
    server = httpx.get(url + "/server_info", timeout=10).json()
    assert server["max_running_requests"] == 64 and server["context_length"] == 4096
    assert server["internal_states"][0]["num_batches"] == backend.stats.num_batches
    assert server["version"].startswith("agentrl-")
    assert httpx.get(url + "/get_server_info", timeout=10).status_code == 200
    assert httpx.get(url + "/get_weight_version", timeout=10).json() == {"weight_version": "0"}
    for path in ("/release_memory_occupation", "/resume_memory_occupation"):
        assert post(url, path, {"tags": None}).status_code == 200
    reply = post(url, "/update_weights_from_tensor", {"serialized_named_tensors": ["x"]})
    assert reply.status_code == 400 and reply.json()["success"] is False
    assert "use /update_weights_from_disk" in reply.json()["message"]


def test_flush_is_refused_while_running_and_abort_ends_the_request(served, prompts):
    url, backend = served
    result = {}

    def long_request():
        result["reply"] = post(
            url,
            "/generate",
            {"input_ids": prompts[0], "rid": "long", "sampling_params": {"max_new_tokens": 3000}},
        )

    thread = threading.Thread(target=long_request)
    thread.start()
    deadline = time.monotonic() + 60
    while backend.num_running == 0:
        assert time.monotonic() < deadline, "the request never started"
        time.sleep(0.01)
    refused = post(url, "/flush_cache")
    assert refused.status_code == 400 and "1 requests are running" in refused.text
    assert post(url, "/abort_request", {"rid": "long"}).status_code == 200
    thread.join(timeout=60)
    body = result["reply"].json()
    assert body["meta_info"]["finish_reason"]["type"] == "abort"
    assert len(body["output_ids"]) < 3000
    assert httpx.get(url + "/flush_cache", timeout=10).status_code == 200
    assert post(url, "/abort_request", {"abort_all": True}).status_code == 200
    assert post(url, "/abort_request", None).status_code == 200


def test_update_weights_from_disk(varied_model_dir, tiny_model_dir, prompts, tmp_path):
    backend = HFBackend.from_pretrained(varied_model_dir)
    app = create_app(backend, model_path=str(varied_model_dir))
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    expected = reference.generate(torch.tensor([prompts[1]]), max_new_tokens=6, do_sample=False)[
        0, len(prompts[1]) :
    ].tolist()
    with serve_in_thread(app, startup_timeout=30) as url:
        missing = post(url, "/update_weights_from_disk", {"model_path": str(tmp_path / "none")})
        assert missing.status_code == 400 and missing.json()["success"] is False
        assert "does not exist" in missing.json()["message"]
        assert post(url, "/update_weights_from_disk", {}).status_code == 400
        ok = post(
            url,
            "/update_weights_from_disk",
            {"model_path": str(tiny_model_dir), "weight_version": "7", "flush_cache": True},
        )
        assert ok.json() == {
            "success": True,
            "message": "Succeeded to update model weights.",
            "num_paused_requests": 0,
        }
        info = httpx.get(url + "/get_model_info", timeout=10).json()
        assert (info["model_path"], info["weight_version"]) == (str(tiny_model_dir), "7")
        out = post(url, "/generate", {"input_ids": prompts[1], "sampling_params": GREEDY}).json()
        assert out["output_ids"] == expected
        assert out["meta_info"]["weight_version"] == "7"


def test_chat_completions_render_the_template_and_answer_in_openais_shape(served,
                                                                           tiny_tokenizer):
    url, _ = served
    messages = [{"role": "system", "content": "Grade it."},
                {"role": "user", "content": [{"type": "text", "text": "2+2=4?"}]}]
    reply = post(url, "/v1/chat/completions", {"messages": messages, "max_tokens": 5,
                                               "temperature": 0})
    assert reply.status_code == 200
    body = reply.json()
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] in (
        "stop", "length")
    prompt = tiny_tokenizer.apply_chat_template(
        [messages[0], {"role": "user", "content": "2+2=4?"}], add_generation_prompt=True,
        tokenize=False)
    assert body["usage"]["prompt_tokens"] == len(tiny_tokenizer.encode(
        prompt, add_special_tokens=False))
    assert 1 <= body["usage"]["completion_tokens"] <= 5
    again = post(url, "/v1/chat/completions", {"messages": messages, "max_tokens": 5,
                                               "temperature": 0}).json()
    assert again["choices"][0]["message"]["content"] == choice["message"]["content"]  # greedy
    bad = post(url, "/v1/chat/completions", {"messages": [{"role": "tool", "content": "x"}]})
    assert bad.status_code == 400 and "messages[0]" in bad.text


def test_input_log_probs_from_logprob_start_len(served, prompts, varied_model_dir):
    url, _ = served
    ids = prompts[0]
    body = post(url, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 0},
                                   "return_logprob": True, "logprob_start_len": 0}).json()
    entries = body["meta_info"]["input_token_logprobs"]
    assert [e[1] for e in entries] == ids and entries[0][0] is None
    model = AutoModelForCausalLM.from_pretrained(varied_model_dir)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])
    torch.testing.assert_close(torch.tensor([e[0] for e in entries[1:]]),
                               expected.squeeze(-1), atol=1e-5, rtol=0)
    later = post(url, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 0},
                                    "return_logprob": True, "logprob_start_len": 2}).json()
    assert later["meta_info"]["input_token_logprobs"] == entries[2:]
    bad = post(url, "/generate", {"input_ids": ids, "logprob_start_len": -5})
    assert bad.status_code == 400 and "logprob_start_len" in bad.text


def test_input_top_log_probs_are_the_models_top_k_per_position(served, prompts,
                                                               varied_model_dir):  # fmt: skip
    url, _ = served
    ids = prompts[1]
    body = post(url, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 0},
                                   "return_logprob": True, "logprob_start_len": 0,
                                   "top_logprobs_num": 3}).json()  # fmt: skip
    top = body["meta_info"]["input_top_logprobs"]
    assert len(top) == len(ids) and top[0] is None and all(len(t) == 3 for t in top[1:])
    model = AutoModelForCausalLM.from_pretrained(varied_model_dir)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
    values, indices = torch.log_softmax(logits, -1).topk(3, -1)  # (T - 1, 3)
    assert [[e[1] for e in t] for t in top[1:]] == indices.tolist()
    torch.testing.assert_close(torch.tensor([[e[0] for e in t] for t in top[1:]]), values,
                               atol=1e-5, rtol=0)  # fmt: skip
    bad = post(url, "/generate", {"input_ids": ids, "top_logprobs_num": 3})
    assert bad.status_code == 400 and "input tokens only" in bad.text
