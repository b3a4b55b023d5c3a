"""default_compute_score: dispatch by data_source, unknown sources, registration."""

from __future__ import annotations

import pytest

from agentrl.reward.score import SCORERS, default_compute_score, register_data_source


@pytest.mark.parametrize(
    "data_source, response, truth",
    [
        ("openai/gsm8k", "so #### 72", "72"),
        ("lighteval/MATH", r"\boxed{\frac12}", r"\frac{1}{2}"),
        ("DigitalLearningGmbH/MATH-lighteval", r"\boxed{3}", "3"),
        ("searchR1_nq", "<answer>Beijing</answer>", {"target": ["Beijing"]}),
        ("searchR1_2wikimultihopqa", "<answer>Beijing</answer>", {"target": ["Beijing"]}),
        ("hotpotqa", "<answer>Beijing</answer>", {"target": "Beijing"}),
        ("search_r1/bamboogle", "<answer>Beijing</answer>", {"target": ["Beijing"]}),
        ("agentrl/arithmetic", "<answer>12.5</answer>", "12.5"),
    ],
)
def test_dispatch_by_data_source(data_source, response, truth):
    assert default_compute_score(data_source, response, truth) == 1.0
    assert default_compute_score(data_source, "nothing", truth, extra_info={}) == 0.0


def test_unknown_data_source_names_it_and_the_known_ones():
    with pytest.raises(KeyError, match=r"'my/qa'; known: .*agentrl/arithmetic.*openai/gsm8k"):
        default_compute_score("my/qa", "x", "y")


def test_register_a_data_source():
    name = "tests/always_half"
    if name not in SCORERS:

        @register_data_source(name)
        def _half(solution_str, ground_truth, extra_info):
            return {"score": 0.5, "echo": extra_info["k"]}

    assert default_compute_score(name, "x", "y", {"k": 3}) == {"score": 0.5, "echo": 3}
    with pytest.raises(ValueError, match="already registered"):
        register_data_source("openai/gsm8k")(len)
