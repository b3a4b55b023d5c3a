"""Advantage estimators: hand-computed values, multi-turn masks, groups, properties, DataProto."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import agentrl
from agentrl.algos import (
    ADV_ESTIMATORS,
    AdvantageEstimator,
    EstimatorNeeds,
    UnknownNameError,
    compute_advantage,
    estimator_needs,
    get_adv_estimator_fn,
    register_adv_est,
    thin_group_rows,
)
from agentrl.protocol import DataProto
from agentrl.utils.registry import Registry


def uids(*names: str) -> np.ndarray:
    return np.array(names, dtype=object)


def run(name, rewards, mask, index=None, **kwargs):
    return get_adv_estimator_fn(name)(rewards, mask, index, **kwargs)


# Outcome rewards on the last valid token. Groups: a = rows 0-2, b = row 3 (alone), c = rows 4-5.
# Row 0 is a multi-turn trajectory: tool tokens (mask 0) at t = 2, 3.
MASK = torch.tensor(
    [
        [1, 1, 0, 0, 1, 1],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
    ]
)
SCORES = [1.0, 0.0, 0.0, 0.5, 1.0, 1.0]
INDEX = uids("a", "a", "a", "b", "c", "c")


def outcome_rewards(scores=SCORES, mask=MASK) -> torch.Tensor:
    rewards = torch.zeros(mask.shape)
    last = mask.shape[1] - 1 - mask.flip(-1).argmax(-1)  # last valid position per row
    rewards[torch.arange(len(scores)), last] = torch.tensor(scores)
    return rewards


def per_row(values: list[float], mask=MASK) -> torch.Tensor:
    return torch.tensor(values).unsqueeze(-1) * mask


SQRT3 = math.sqrt(1 / 3)  # std of group a = [1, 0, 0]: deviations 2/3, -1/3, -1/3 -> var 1/3


def test_grpo_hand_values():
    adv, ret = run("grpo", outcome_rewards(), MASK, INDEX)
    # a: mean 1/3, std sqrt(1/3): (2/3) / sqrt(1/3) = 1.1547, (-1/3) / sqrt(1/3) = -0.5774
    # b: a group of one has mean 0, std 1 -> 0.5 / (1 + 1e-6); c: equal rewards -> exactly 0
    eps = 1e-6
    expected = [2 / 3 / (SQRT3 + eps), -1 / 3 / (SQRT3 + eps), -1 / 3 / (SQRT3 + eps)]
    expected += [0.5 / (1 + eps), 0.0, 0.0]
    assert torch.allclose(adv, per_row(expected), atol=1e-6)
    assert torch.equal(adv, ret)
    assert torch.all(adv[MASK == 0] == 0)  # tool tokens and padding get nothing
    assert torch.all(adv[4:] == 0)


def test_dr_grpo_does_not_divide_by_std():
    adv, _ = run("grpo", outcome_rewards(), MASK, INDEX, norm_adv_by_std_in_grpo=False)
    # R - mean_g: a: 2/3, -1/3, -1/3; b: 0.5; c: 0, 0
    assert torch.allclose(adv, per_row([2 / 3, -1 / 3, -1 / 3, 0.5, 0.0, 0.0]), atol=1e-6)


def test_groups_come_from_uid_not_position():
    order = [0, 3, 4, 1, 5, 2]  # interleave the rows of all groups
    adv, _ = run("grpo", outcome_rewards()[order], MASK[order], INDEX[order])
    reference, _ = run("grpo", outcome_rewards(), MASK, INDEX)
    assert torch.allclose(adv, reference[order])


def test_rloo_hand_values():
    adv, _ = run("rloo", outcome_rewards(), MASK, INDEX)
    # a: 1 - mean(0, 0) = 1; 0 - mean(1, 0) = -0.5 (twice); b alone keeps 0.5; c: 1 - 1 = 0
    assert torch.allclose(adv, per_row([1.0, -0.5, -0.5, 0.5, 0.0, 0.0]), atol=1e-6)


def test_opo_hand_values():
    adv, _ = run("opo", outcome_rewards(), MASK, INDEX)
    # a: lengths 4, 2, 3; baseline = (4 * 1 + 2 * 0 + 3 * 0) / 9 = 4/9
    # -> 5/9, -4/9, -4/9; b alone: baseline 0 -> 0.5; c: all equal -> 0
    assert torch.allclose(adv, per_row([5 / 9, -4 / 9, -4 / 9, 0.5, 0.0, 0.0]), atol=1e-6)


def test_gpg_hand_values():
    adv, _ = run("gpg", outcome_rewards(), MASK, INDEX)
    # alpha = B / #nonzero = 6 / 4 = 1.5; a: 1.5 * (2/3, -1/3, -1/3) = 1, -0.5, -0.5
    # b: alone, mean 0 -> 1.5 * 0.5 = 0.75; c: 0
    assert torch.allclose(adv, per_row([1.0, -0.5, -0.5, 0.75, 0.0, 0.0]), atol=1e-6)


def test_grpo_passk_hand_values():
    rows = [0, 1, 2, 4, 5]  # pass@k needs groups of at least 2: leave out b
    rewards, mask, index = outcome_rewards()[rows], MASK[rows], INDEX[rows]
    adv, _ = run("grpo_passk", rewards, mask, index)
    # a: r_max - r_second = 1 - 0 = 1, divided by std + eps -> only row 0; c: 1 - 1 = 0
    expected = [1 / (SQRT3 + 1e-6), 0.0, 0.0, 0.0, 0.0]
    assert torch.allclose(adv, per_row(expected, mask), atol=1e-6)
    adv, _ = run("grpo_passk", rewards, mask, index, norm_adv_by_std_in_grpo=False)
    assert torch.allclose(adv, per_row([1.0, 0.0, 0.0, 0.0, 0.0], mask))
    with pytest.raises(ValueError, match="at least 2 samples per group; uid 'b'"):
        run("grpo_passk", outcome_rewards(), MASK, INDEX)


def test_reinforce_plus_plus_baseline_hand_values():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    mask = torch.ones(2, 2)
    adv, _ = run("reinforce_plus_plus_baseline", rewards, mask, uids("p", "p"))
    # R - mean = +-0.5 on each token; whitened over 4 tokens: mean 0, unbiased var
    # 4 * 0.25 / 3 = 1/3 -> +-0.5 / sqrt(1/3) = +-0.8660254
    expected = torch.tensor([[0.8660254, 0.8660254], [-0.8660254, -0.8660254]])
    assert torch.allclose(adv, expected, atol=1e-5)


def test_reinforce_plus_plus_single_turn():
    rewards, mask = torch.tensor([[0.0, 0.0, 1.0]]), torch.ones(1, 3)
    adv, ret = run("reinforce_plus_plus", rewards, mask, gamma=0.5)
    # returns: t2 = 1, t1 = 0.5 * 1, t0 = 0.5 * 0.5 = 0.25
    assert torch.allclose(ret, torch.tensor([[0.25, 0.5, 1.0]]))
    # whitened: mean 0.583333, unbiased std sqrt(0.2916667 / 2) = 0.381881
    expected = torch.tensor([[-0.8728716, -0.2182179, 1.0910895]])
    assert torch.allclose(adv, expected, atol=1e-5)


TURN_MASK = torch.tensor([[1, 1, 0, 0, 1, 1, 0]])  # turn 1, tool response, turn 2, padding


def test_reinforce_plus_plus_turn_rewards_cross_tool_tokens():
    rewards = torch.tensor([[0.0, 0.5, 0.0, 0.0, 0.0, 1.0, 0.0]])  # step reward, outcome
    _, ret = run("reinforce_plus_plus", rewards, TURN_MASK, gamma=1.0)
    # t5 = 1, t4 = 1; tool tokens skipped (0); t1 = 0.5 + 1 = 1.5, t0 = 1.5
    assert torch.equal(ret, torch.tensor([[1.5, 1.5, 0.0, 0.0, 1.0, 1.0, 0.0]]))
    _, ret = run("reinforce_plus_plus", rewards, TURN_MASK, gamma=0.5)
    # gamma counts valid tokens only: t4 = 0.5, t1 = 0.5 + 0.5 * 0.5 = 0.75, t0 = 0.375
    assert torch.allclose(ret, torch.tensor([[0.375, 0.75, 0.0, 0.0, 0.5, 1.0, 0.0]]))


def test_reward_on_a_masked_token_goes_to_the_token_before_it():
    # the trajectory ended on a tool response: the score sits on a tool token (t = 3)
    mask = torch.tensor([[1, 1, 0, 0]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 2.0]])
    _, ret = run("reinforce_plus_plus", rewards, mask, gamma=0.9)
    # credited to t1 undiscounted: t1 = 2, t0 = 0.9 * 2 = 1.8
    assert torch.allclose(ret, torch.tensor([[1.8, 2.0, 0.0, 0.0]]))
    _, gae_ret = run("gae", rewards, mask, values=torch.zeros(1, 4), gamma=0.9, lam=1.0)
    assert torch.allclose(gae_ret, ret)


def test_gae_single_turn_hand_values():
    rewards, mask = torch.tensor([[0.0, 0.0, 1.0]]), torch.ones(1, 3)
    values = torch.tensor([[0.5, 0.2, 0.4]])
    adv, ret = run("gae", rewards, mask, values=values, gamma=1.0, lam=1.0)
    # deltas: t2 = 1 - 0.4 = 0.6; t1 = 0.4 - 0.2 = 0.2; t0 = 0.2 - 0.5 = -0.3
    # A = [0.5, 0.8, 0.6]; returns = A + V = [1, 1, 1] (reward-to-go)
    assert torch.allclose(ret, torch.ones(1, 3))
    # whitened: mean 0.633333, unbiased std 0.1527525
    assert torch.allclose(adv, torch.tensor([[-0.8728716, 1.0910895, -0.2182179]]), atol=1e-5)
    _, ret = run("gae", rewards, mask, values=values, gamma=0.9, lam=0.8)
    # t2: A = 0.6; t1: delta = 0.9 * 0.4 - 0.2 = 0.16, A = 0.16 + 0.72 * 0.6 = 0.592
    # t0: delta = 0.9 * 0.2 - 0.5 = -0.32, A = -0.32 + 0.72 * 0.592 = 0.10624
    assert torch.allclose(ret, torch.tensor([[0.60624, 0.792, 1.0]]), atol=1e-6)


def test_gae_multi_turn_skips_tool_tokens():
    rewards = torch.tensor([[0.0, 0.5, 0.0, 0.0, 0.0, 1.0, 0.0]])
    nan = float("nan")  # the critic's values on tool tokens and padding must not matter
    values = torch.tensor([[0.1, 0.2, nan, 9.0, 0.3, 0.4, nan]])
    adv, ret = run("gae", rewards, TURN_MASK, values=values)
    # t5: delta = 1 - 0.4 = 0.6, A = 0.6; t4: delta = 0.4 - 0.3 = 0.1, A = 0.7
    # t3, t2 skipped; t1: delta = 0.5 + 0.3 - 0.2 = 0.6, A = 1.3; t0: 0.2 - 0.1 + 1.3 = 1.4
    # returns = A + V = [1.5, 1.5, ., ., 1.0, 1.0, .]
    assert torch.allclose(ret, torch.tensor([[1.5, 1.5, 0.0, 0.0, 1.0, 1.0, 0.0]]))
    # whitened [1.4, 1.3, 0.7, 0.6]: mean 1, unbiased std sqrt(0.5 / 3) = 0.4082483
    expected = torch.tensor([[0.9797959, 0.7348469, 0, 0, -0.7348469, -0.9797959, 0]])
    assert torch.allclose(adv, expected, atol=1e-5)
    assert torch.all(adv[TURN_MASK == 0] == 0) and torch.all(ret[TURN_MASK == 0] == 0)


def test_remax_hand_values():
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    adv, ret = run("remax", rewards, mask, reward_baselines=torch.tensor([0.25]))
    assert torch.equal(ret, torch.tensor([[1.0, 1.0, 1.0, 0.0]]))
    assert torch.equal(adv, torch.tensor([[0.75, 0.75, 0.75, 0.0]]))


@pytest.mark.parametrize(
    "name, missing",
    [("gae", "values"), ("remax", "reward_baselines"), ("grpo", "index"), ("rloo", "uid")],
)
def test_missing_inputs_are_named(name, missing):
    with pytest.raises(ValueError, match=missing):
        run(name, outcome_rewards(), MASK, None)


# --------------------------------------------------------------------------- registry


def test_registry_names_match_the_enum():
    assert {e.value for e in AdvantageEstimator} <= set(ADV_ESTIMATORS.names())
    assert get_adv_estimator_fn(AdvantageEstimator.GRPO) is get_adv_estimator_fn("grpo")


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(UnknownNameError, match="unknown advantage estimator 'gpro'.*grpo"):
        get_adv_estimator_fn("gpro")
    with pytest.raises(KeyError):
        get_adv_estimator_fn("gpro")
    with pytest.raises(ValueError):
        get_adv_estimator_fn("gpro")


def test_duplicate_registration_is_refused():
    reg = Registry("thing")
    reg.register("x")(len)
    with pytest.raises(ValueError, match="thing 'x' is already registered"):
        reg.register("x")(len)
    with pytest.raises(ValueError, match="already registered"):
        register_adv_est("grpo")(len)


# --------------------------------------------------------------------------- declared needs


def test_the_builtin_estimators_declare_what_they_need():
    needs = {name: estimator_needs(name) for name in AdvantageEstimator}
    declared = {name.value: n for name, n in needs.items() if n != EstimatorNeeds()}
    assert declared == {
        "gae": EstimatorNeeds(critic=True),
        "remax": EstimatorNeeds(greedy_baseline=True),
        "on_policy_distill": EstimatorNeeds(teacher=True,
                                            batch_keys=("teacher_log_prob", "old_log_probs")),
    }
    assert estimator_needs(AdvantageEstimator.GAE) is estimator_needs("gae")
    with pytest.raises(UnknownNameError, match="unknown advantage estimator 'gea'.*gae"):
        estimator_needs("gea")


def test_a_users_estimator_declares_its_needs_and_gets_its_batch_keys():
    name = "test_needs_of_a_user_estimator"
    seen = {}

    @register_adv_est(name, EstimatorNeeds(critic=True, batch_keys=("my_bonus", "absent")))
    def _mine(token_level_rewards, response_mask, index, *, values=None, my_bonus=None,
              **kwargs):
        seen.update(values=values, my_bonus=my_bonus, extra=set(kwargs) - COMMON_KWARGS)
        out = token_level_rewards + my_bonus
        return out, out

    try:
        assert estimator_needs(name) == EstimatorNeeds(critic=True,
                                                       batch_keys=("my_bonus", "absent"))
        data = _rollout_like_batch()
        data.batch["my_bonus"] = torch.full(MASK.shape, 0.5)
        data = compute_advantage(data, name)
        assert torch.equal(data.batch["advantages"], outcome_rewards() + 0.5)
        assert seen["extra"] == set()  # "absent", not in the batch, is not passed
        assert torch.equal(seen["values"], data.batch["values"])
        assert torch.equal(seen["my_bonus"], torch.full(MASK.shape, 0.5))
    finally:
        ADV_ESTIMATORS.unregister(name)
    # another function under that name, registered by the registry alone, declares nothing
    ADV_ESTIMATORS.register(name)(lambda rewards, mask, index, **kwargs: (rewards, rewards))
    try:
        assert estimator_needs(name) == EstimatorNeeds()
    finally:
        ADV_ESTIMATORS.unregister(name)


def test_needs_that_are_not_a_record_are_refused():
    with pytest.raises(TypeError, match="needs must be an EstimatorNeeds, got dict"):
        register_adv_est("test_bad_needs", {"critic": True})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="batch_keys must be a tuple of batch key names"):
        EstimatorNeeds(batch_keys="teacher_log_prob")  # type: ignore[arg-type]
    assert "test_bad_needs" not in ADV_ESTIMATORS


COMMON_KWARGS = {"gamma", "lam", "norm_adv_by_std_in_grpo", "reward_baselines", "config"}
PACKAGE = Path(agentrl.__file__).parent
ALGOS_DIR = PACKAGE / "algos"


def _names_an_estimator(node: ast.AST, names: set[str]) -> bool:
    """A name literal, a tuple/list/set literal holding one, or ``AdvantageEstimator.X``."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in names
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_an_estimator(e, names) for e in node.elts)
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "AdvantageEstimator")


def _chooses_by_estimator_name(node: ast.AST, names: set[str]) -> bool:
    """``==``/``!=``/``in``/``is`` with a name, a ``case "name":``, a table keyed by names
    (``{"gae": ...}``, ``table["gae"]``) or ``.startswith("gae")``."""
    if isinstance(node, ast.Compare):
        return any(_names_an_estimator(x, names) for x in (node.left, *node.comparators))
    if isinstance(node, ast.MatchValue):
        return _names_an_estimator(node.value, names)
    if isinstance(node, ast.Dict):
        return any(k is not None and _names_an_estimator(k, names) for k in node.keys)
    if isinstance(node, ast.Subscript):
        return _names_an_estimator(node.slice, names)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith") and node.args):
        return _names_an_estimator(node.args[0], names)
    return False


def estimator_name_choices(root: Path, names: set[str]) -> list[str]:
    """``path:line: source`` of each place outside ``algos/`` that chooses by an estimator's name."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if ALGOS_DIR in path.parents:
            continue
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if _chooses_by_estimator_name(node, names):
                line = node.lineno
                found.append(f"{path.relative_to(root.parent)}:{line}: {lines[line - 1].strip()}")
    return sorted(set(found), key=lambda f: (f.split(":")[0], int(f.split(":")[1])))


def registered_names() -> set[str]:
    return {e.value for e in AdvantageEstimator} | set(ADV_ESTIMATORS.names())


def test_no_module_outside_the_algos_chooses_by_an_estimators_name():
    assert estimator_name_choices(PACKAGE, registered_names()) == []


def test_the_scan_finds_each_kind_of_choice(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text(  # lines 1-5: the old trainer's, validate's and batch source's
        'use_critic = config.algorithm.adv_estimator == "gae"\n'
        'critic = cfg.algorithm.adv_estimator == "gae"  # the critic trains only with GAE\n'
        'distill = cfg.algorithm.adv_estimator == "on_policy_distill"\n'
        'if ctx.algorithm.adv_estimator == "remax":\n'
        '    pass\n'
        'if name in ("grpo", "rloo") or "opo" != name or name is AdvantageEstimator.GPG:\n'
        '    pass\n'
        'match name:\n'
        '    case "reinforce_plus_plus":\n'
        '        pass\n'
        'critic = {"gae": True}.get(name)\n'
        'ok = name.startswith("grpo") or TABLE["rloo"]\n'
        'overrides = ["algorithm.adv_estimator=grpo"]  # a config value, not a choice\n'
        'needs = estimator_needs(name).critic\n'
    )
    found = estimator_name_choices(package, registered_names())
    assert [int(f.split(":")[1]) for f in found] == [1, 2, 3, 4, 6, 9, 11, 12]
    assert found[0] == 'pkg/a.py:1: use_critic = config.algorithm.adv_estimator == "gae"'


# --------------------------------------------------------------------------- DataProto


def _rollout_like_batch() -> DataProto:
    response_attention = MASK.clone()
    response_attention[0, 2:4] = 1  # tool tokens are attended to, just not trained on
    prompt_attention = torch.tensor([[0, 1, 1]] * 6)  # left-padded prompts
    return DataProto.from_dict(
        tensors={
            "responses": torch.ones(6, 6, dtype=torch.long),
            "attention_mask": torch.cat([prompt_attention, response_attention], dim=1),
            "response_mask": MASK,
            "token_level_rewards": outcome_rewards(),
            "values": torch.zeros(6, 6),
        },
        non_tensors={"uid": list(INDEX)},
    )


def test_compute_advantage_fills_advantages_and_returns():
    data = compute_advantage(_rollout_like_batch(), AdvantageEstimator.GRPO)
    reference, _ = run("grpo", outcome_rewards(), MASK, INDEX)
    assert torch.equal(data.batch["advantages"], reference)
    assert torch.equal(data.batch["returns"], reference)
    data = compute_advantage(_rollout_like_batch(), "gae", gamma=1.0, lam=1.0)
    expected_returns = outcome_rewards().flip(-1).cumsum(-1).flip(-1) * MASK  # V = 0
    assert torch.allclose(data.batch["returns"], expected_returns)


def test_compute_advantage_builds_response_mask_from_attention_mask():
    data = _rollout_like_batch()
    data.batch.pop("response_mask")
    data = compute_advantage(data, "grpo")
    response_attention = data.batch["attention_mask"][:, -6:]
    assert torch.equal(data.batch["response_mask"], response_attention)
    # row 0's tool tokens now count as response tokens: they get its advantage too
    assert torch.all(data.batch["advantages"][0] != 0)


def test_compute_advantage_passes_the_same_kwargs_to_a_user_estimator():
    name = "test_sum_of_inputs"
    if name not in ADV_ESTIMATORS:

        @register_adv_est(name)
        def _user(token_level_rewards, response_mask, index, **kwargs):
            assert list(index) == list(INDEX) and kwargs["config"] == {"x": 1}
            out = token_level_rewards * kwargs["gamma"]
            return out, out

    data = compute_advantage(_rollout_like_batch(), name, gamma=3.0, config={"x": 1})
    assert torch.equal(data.batch["advantages"], outcome_rewards() * 3.0)


# --------------------------------------------------------------------------- verl parity


def verl_gae(rewards, values, mask, gamma, lam):
    """verl's GAE loop (core_algos.compute_gae_advantage_return), returns before whitening."""
    nextvalues, lastgaelam, out = 0, 0, []
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * mask[:, t] + (1 - mask[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * mask[:, t] + (1 - mask[:, t]) * lastgaelam
        out.append(lastgaelam)
    return torch.stack(out[::-1], dim=1) + values


def verl_grpo(scores, index, eps=1e-6):
    """verl's GRPO loop with torch.mean / torch.std per uid."""
    out = scores.clone()
    for uid in set(index):
        rows = [i for i, u in enumerate(index) if u == uid]
        if len(rows) == 1:
            mean, std = torch.tensor(0.0), torch.tensor(1.0)
        else:
            mean, std = torch.mean(scores[rows]), torch.std(scores[rows])
        out[rows] = (scores[rows] - mean) / (std + eps)
    return out


@st.composite
def batches(draw, min_group=1):
    n_groups = draw(st.integers(1, 4))
    sizes = [draw(st.integers(min_group, 4)) for _ in range(n_groups)]
    length = draw(st.integers(1, 6))
    rows = sum(sizes)
    floats = st.floats(-5, 5, allow_nan=False, width=32)
    rewards = torch.tensor(draw(st.lists(floats, min_size=rows * length, max_size=rows * length)))
    mask = torch.tensor(
        draw(st.lists(st.booleans(), min_size=rows * length, max_size=rows * length))
    )
    index = uids(*[f"u{g}" for g, size in enumerate(sizes) for _ in range(size)])
    perm = draw(st.permutations(range(rows)))
    return rewards.view(rows, length), mask.view(rows, length).float(), index[list(perm)]


def right_padded(mask: torch.Tensor) -> torch.Tensor:
    lengths = mask.sum(-1, keepdim=True)
    return (torch.arange(mask.shape[1]) < lengths).float()


@settings(max_examples=60, deadline=None)
@given(batches(), st.floats(0.5, 1.0), st.floats(0.5, 1.0))
def test_gae_equals_verl_on_right_padded_single_turn(batch, gamma, lam):
    rewards, mask, _ = batch
    mask = right_padded(mask)
    rewards = rewards * mask  # no rewards on padding
    values = torch.linspace(-1, 1, rewards.numel()).view_as(rewards)
    _, ret = run("gae", rewards, mask, values=values, gamma=gamma, lam=lam)
    assert torch.allclose(ret, verl_gae(rewards, values, mask, gamma, lam) * mask, atol=1e-4)


@settings(max_examples=60, deadline=None)
@given(batches())
def test_grpo_equals_verl(batch):
    rewards, mask, index = batch
    adv, _ = run("grpo", rewards, mask, index)
    # In float64: verl's float32 statistics turn a group of equal rewards such as
    # [3.5052] * 3 into advantages of -0.18 instead of 0; ours give exactly 0.
    expected = verl_grpo(rewards.sum(-1).double(), list(index)).unsqueeze(-1) * mask
    assert torch.allclose(adv.double(), expected, atol=1e-4, rtol=1e-4)


# --------------------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(batches(min_group=2))
def test_grpo_group_advantages_sum_to_zero(batch):
    rewards, mask, index = batch
    adv, _ = run("grpo", rewards, torch.ones_like(mask), index)
    for uid in set(index):
        assert abs(adv[index == uid, 0].sum().item()) < 1e-3


@settings(max_examples=60, deadline=None)
@given(batches())
def test_gae_with_unit_gamma_lam_and_zero_values_is_reward_to_go(batch):
    rewards, mask, _ = batch
    _, ret = run("gae", rewards, mask, values=torch.zeros_like(rewards))
    to_go = rewards.flip(-1).cumsum(-1).flip(-1)
    # a valid token's return: every reward from it on (masked tokens' rewards included)
    assert torch.allclose(ret, to_go * mask, atol=1e-4)


@settings(max_examples=60, deadline=None)
@given(batches(), st.floats(0.5, 1.0), st.floats(0.0, 1.0))
def test_gae_with_gaps_equals_gae_on_the_valid_tokens_alone(batch, gamma, lam):
    rewards, mask, _ = batch
    rewards = rewards * mask
    values = torch.linspace(-1, 1, rewards.numel()).view_as(rewards)
    adv, ret = run("gae", rewards, mask, values=values, gamma=gamma, lam=lam)
    for row in range(rewards.shape[0]):
        keep = mask[row].bool()
        if keep.any():
            r, v = rewards[row, keep][None], values[row, keep][None]
            _, compact_ret = run("gae", r, torch.ones_like(r), values=v, gamma=gamma, lam=lam)
            assert torch.allclose(ret[row, keep], compact_ret[0], atol=1e-4)


ALL_NAMES = [e.value for e in AdvantageEstimator]


@settings(max_examples=40, deadline=None)
@given(batches(min_group=2), st.sampled_from(ALL_NAMES), st.booleans())
def test_masked_positions_are_zero_and_outputs_finite(batch, name, norm):
    rewards, mask, index = batch
    kwargs = {
        "values": torch.linspace(-2, 2, rewards.numel()).view_as(rewards),
        "reward_baselines": torch.ones(rewards.shape[0]),
        "norm_adv_by_std_in_grpo": norm,
    }
    if name == "on_policy_distill":  # the per-token log-probs it reads from the batch
        kwargs["teacher_log_prob"] = -torch.linspace(0.1, 5, rewards.numel()).view_as(rewards)
        kwargs["old_log_probs"] = -torch.linspace(3, 0.2, rewards.numel()).view_as(rewards)
        kwargs["config"] = {"distill": {"kl_coef": 1.0, "task_reward_weight": 0.0}}
    adv, ret = run(name, rewards, mask, index, **kwargs)
    assert adv.shape == ret.shape == rewards.shape
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert torch.all(adv[mask == 0] == 0) and torch.all(ret[mask == 0] == 0)


@settings(max_examples=40, deadline=None)
@given(batches(), st.floats(-3, 3, allow_nan=False))
def test_equal_rewards_in_a_group_give_exactly_zero(batch, value):
    _, mask, index = batch
    rewards = torch.zeros_like(mask)
    rewards[:, -1] = value
    for name in ("grpo", "rloo", "opo", "gpg"):
        adv, _ = run(name, rewards, mask, index)
        multi = np.array([np.sum(index == u) > 1 for u in index])
        assert torch.all(adv[torch.from_numpy(multi)] == 0), name


def test_on_policy_distill_is_the_negative_reverse_kl_per_model_token():
    from omegaconf import OmegaConf

    from agentrl.algos import distill_metrics

    teacher = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -3.0, -1.0]])
    student = torch.tensor([[-2.0, -1.0, -0.5], [-0.2, -1.0, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])  # row 1's middle token is a tool token
    rewards = torch.zeros(2, 3)
    rewards[0, 1], rewards[1, 2] = 1.0, 0.0
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask,
                 "teacher_log_prob": teacher, "old_log_probs": student},
        non_tensors={"uid": ["g", "g"]})
    config = OmegaConf.create({"distill": {"kl_coef": 2.0, "task_reward_weight": 0.0}})
    adv = compute_advantage(data, "on_policy_distill", config=config).batch["advantages"]
    assert adv.tolist() == [[2.0, -2.0, 0.0], [pytest.approx(0.2), 0.0, 16.0]]
    assert distill_metrics(data) == {
        "distill/reverse_kl": pytest.approx((-1.0 + 1.0 - 0.1 - 8.0) / 4),
        "distill/teacher_logprob": pytest.approx((-1.0 - 2.0 - 0.1 - 1.0) / 4)}
    # with the task reward: plus the GRPO advantage (row 0 won, row 1 lost: +-0.7071)
    mixed = OmegaConf.create({"distill": {"kl_coef": 2.0, "task_reward_weight": 1.0}})
    with_task = compute_advantage(data, "on_policy_distill", config=mixed).batch["advantages"]
    grpo = compute_advantage(data, "grpo").batch["advantages"]
    torch.testing.assert_close(with_task, adv + grpo)
    with pytest.raises(ValueError, match="on_policy_distill needs config.distill"):
        compute_advantage(data, "on_policy_distill", config=OmegaConf.create({}))
    del data.batch["teacher_log_prob"]
    with pytest.raises(KeyError, match="teacher_log_prob"):
        compute_advantage(data, "on_policy_distill", config=config)


def test_thin_group_rows_are_the_lone_survivors_of_groups_that_lost_rows():
    index = uids("a", "a", "a", "b", "b", "c", "d", "d")
    valid = np.array([1, 1, 0, 1, 0, 1, 0, 0], dtype=bool)
    # a keeps two valid rows, b keeps one (thin), c lost nothing (n = 1 trains), d has none
    assert thin_group_rows(index, valid).tolist() == [0, 0, 0, 1, 0, 0, 0, 0]
    assert thin_group_rows(index, valid, min_valid=3).tolist() == [1, 1, 0, 1, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="index has 8 entries but valid has 2"):
        thin_group_rows(index, valid[:2])
