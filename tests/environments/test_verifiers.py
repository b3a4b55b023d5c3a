"""verifiers environments as verl rows: the dataset's prompts (test from the eval dataset
when there is one), train and test apart, the item for the interaction, a tool environment's
tools as tools.yaml; environments agentrl cannot play are refused with the reason."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

pytest.importorskip("verifiers")

import verifiers as vf  # noqa: E402
from datasets import Dataset  # noqa: E402

from agentrl.environments.verifiers import check_kind, prepare  # noqa: E402
from agentrl.tools.loader import load_tools  # noqa: E402

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(autouse=True)
def on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


def _questions(rows):
    return [r["prompt"][-1]["content"] for r in rows]


def test_test_rows_come_from_the_eval_dataset_and_carry_the_item():
    train, test, extra = prepare("vf-capitals", 6, 2, seed=3)
    import vf_capitals

    countries = list(vf_capitals.CAPITALS)
    assert {q.split()[-1].rstrip("?") for q in _questions(test)} == set(countries[6:])
    assert {q.split()[-1].rstrip("?") for q in _questions(train)} == set(countries[:6])
    row = train[0]
    assert row["data_source"] == "verifiers/vf-capitals"
    assert row["prompt"][0] == {"role": "system",
                                "content": "Answer with the city inside <answer></answer>."}
    item = json.loads(row["extra_info"]["interaction_kwargs"]["input"])
    assert item["prompt"] == row["prompt"] and item["answer"] == row["reward_model"]["ground_truth"]
    assert list(extra) == ["interaction"]
    entry = extra["interaction"]["interaction"][0]
    assert entry["class_name"] == "agentrl.interactions.verifiers.VerifiersInteraction"


def test_without_an_eval_dataset_the_dataset_is_split_and_the_seed_shuffles():
    train, test, _ = prepare("vf-guess", 5, 3, seed=1)
    assert not set(_questions(train)) & set(_questions(test)) and len(set(_questions(train))) == 5
    again, _, _ = prepare("vf-guess", 5, 3, seed=1)
    other, _, _ = prepare("vf-guess", 5, 3, seed=2)
    assert _questions(again) == _questions(train) != _questions(other)
    info = json.loads(train[0]["extra_info"]["interaction_kwargs"]["input"])["info"]
    assert info == {"n": int(train[0]["reward_model"]["ground_truth"])}


def test_a_tool_environments_tools_become_the_tool_config():
    _, _, extra = prepare("vf-adder", 3, 2, seed=0)
    (entry,) = extra["tools"]["tools"]
    assert entry["class_name"] == "agentrl.tools.verifiers.VerifiersTool"
    assert entry["tool_schema"]["function"]["name"] == "add"
    (tool,) = load_tools(extra["tools"]).values()
    assert tool.name == "add" and tool.env.tool_map["add"](2, 3) == 5


def test_too_few_items_are_named():
    with pytest.raises(ValueError, match=r"vf-capitals has 6 training and 2 test items .* "
                                         r"fewer than the 1000 and 200"):
        prepare("vf-capitals", 1000, 200, seed=0)


def _dataset():
    return Dataset.from_list([{"question": "q", "answer": "a"}])


def _tool(x: int) -> int:
    """A tool.

    Args:
        x: a number
    """
    return x


class _StateTools(vf.StatefulToolEnv):
    def update_tool_args(self, tool_name, tool_args, messages, state, **kwargs):
        return tool_args


@pytest.mark.parametrize(("env", "why"), [
    (lambda: vf.SingleTurnEnv(dataset=_dataset(), message_type="completion"),
     "message_type='completion'"),
    (lambda: _StateTools(tools=[_tool], dataset=_dataset()), "StatefulToolEnv"),
    (lambda: vf.SingleTurnEnv(dataset=_dataset(), oai_tools=[{"type": "function"}]),
     "has tools but is not a vf.ToolEnv"),
])
def test_environments_agentrl_cannot_play_are_refused_with_the_reason(env, why):
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:  # a verifiers environment installs its own handlers when built
        built = env()
    finally:
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    with pytest.raises(ValueError, match=why):
        check_kind("x", built)


def test_a_missing_package_names_the_extra(monkeypatch):
    from agentrl.tools.verifiers import load_environment

    load_environment.cache_clear()
    monkeypatch.setitem(sys.modules, "verifiers", None)
    with pytest.raises(ImportError, match=r"pip install 'agentrl\[envs\]'"):
        prepare("vf-capitals", 1, 1, seed=0)


NOISY = '''
import logging
import os

if {missing_dependency}:
    import nowhere_to_be_found_{kind}

def load_environment():
    print("[lib_data] Downloading package lexicon to /root/lib_data...")
    os.write(2, b"[lib_data] Error loading lexicon: <urlopen error [Errno -3]>\\n")
    logging.getLogger("verifiers.utils.env_utils").error("a log line of its own")
    raise LookupError("\\n" + "*" * 70 + "\\n  Resource lexicon not found.\\n  Please use the "
                      "downloader:\\n\\n  >>> import lib\\n  >>> lib.download('lexicon')\\n"
                      + "*" * 70)
'''


@pytest.mark.parametrize(("kind", "says"), [
    ("noisy", "verifiers:vf-noisy: loading it raised LookupError: Resource lexicon not found."),
    ("broken", "verifiers:vf-broken: loading it raised ModuleNotFoundError: No module named "
               "'nowhere_to_be_found_broken'"),
    ("absent", "verifiers:vf-absent: no module vf_absent is installed (verifiers loads ENV as "
               "the module of that name, - as _: install the environment's package)"),
])  # fmt: skip
def test_a_failed_load_is_one_line_naming_the_cause_and_its_noise_held_back(
        tmp_path, monkeypatch, capfd, kind, says):
    if kind != "absent":
        (tmp_path / f"vf_{kind}.py").write_text(
            NOISY.replace("{kind}", kind).replace("{missing_dependency}", str(kind == "broken")))
        monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError) as raised:
        prepare(f"vf-{kind}", 1, 1, seed=0)
    assert str(raised.value) == says
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")  # no banner, no log line of the library's


def test_a_module_of_the_same_name_without_load_environment_is_named_with_its_file():
    with pytest.raises(ValueError, match=r"^verifiers:json: the module json \(.*json/__init__\.py"
                                         r"\) has no load_environment\(\): another module of that"):
        prepare("json", 1, 1, seed=0)
