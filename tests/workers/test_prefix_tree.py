"""The prefix-tree plan: which tokens each pass computes, and where each response token
reads its output."""

from __future__ import annotations

import torch

from agentrl.testing.workers import batch_from_rows, forked_session_rows, grpo_group_rows
from agentrl.workers.prefix_tree import plan_prefix_tree

V = 1000


def _check_index(plan, batch) -> None:
    """Every response column reads the entry at the position just before its token (in its
    own row's history), whose target is that token."""
    targets, absolute = [], []
    for level in plan.levels:
        targets.append(level.entry_targets)
        absolute.append(level.position_ids[level.entry_rows, level.entry_positions])
    targets, absolute = torch.cat(targets), torch.cat(absolute)
    for level in plan.levels[1:]:  # no past column that no piece sees
        assert level.attention_mask[:, : -level.input_ids.shape[1]].bool().any(0).all()
    prompt_len = batch["attention_mask"][:, : batch["prompts"].shape[1]].sum(-1)  # (b,)
    for i in range(len(prompt_len)):
        for j in range(plan.keep):
            if not plan.valid[i, j]:
                continue
            e = plan.index[i, j]
            assert targets[e] == batch["responses"][i, j]
            assert absolute[e] == prompt_len[i] + j - 1


def test_a_grpo_group_computes_its_prompt_once():
    rows = grpo_group_rows(8, 100, 10, V, seed=0)
    batch = batch_from_rows(rows).batch
    plan = plan_prefix_tree(batch)
    responses = sum(len(r) for _, r in rows)
    assert len(plan.levels) == 2
    assert plan.levels[0].input_ids.shape == (1, 100)  # the prompt, once
    assert plan.levels[1].input_ids.shape[0] == 8  # each row's response, on the prompt's cache
    assert plan.tokens == 100 + responses  # flat: 8 x 100 + responses
    # the prompt's last position predicts each row's first token: one entry per distinct one
    assert len(plan.levels[0].entry_rows) == len({r[0] for _, r in rows})
    _check_index(plan, batch)


def test_a_forked_session_shares_each_branch_with_its_parent():
    rows = forked_session_rows(3, 30, 8, V, seed=1)  # each segment forks the one before
    batch = batch_from_rows(rows).batch
    plan = plan_prefix_tree(batch, min_saved=1)
    assert len(plan.levels) == 3  # the root chunk, the second branch, the last two rows' own
    flat = int(batch["attention_mask"].sum())
    shared_01 = len(rows[1][0]) - 8  # row 1's prompt: row 0's history to the branch + an edit
    shared_12 = len(rows[2][0]) - 8
    assert plan.tokens == flat - 2 * shared_01 - (shared_12 - shared_01)
    # the first segment's own response tokens inside the shared chunk read the chunk's pass
    assert (plan.index[0, :1] < len(plan.levels[0].entry_rows)).all()
    _check_index(plan, batch)


def test_groups_of_several_prompts_and_identical_rows_in_one_micro_batch():
    group = grpo_group_rows(3, 40, 6, V, seed=2)
    rows = group + [group[0]] + grpo_group_rows(4, 25, 9, V, seed=3) + [([5, 6, 7], [8, 9])]
    batch = batch_from_rows(rows).batch
    plan = plan_prefix_tree(batch, min_saved=1)
    assert plan is not None
    assert plan.tokens < int(batch["attention_mask"].sum())
    _check_index(plan, batch)  # the duplicate row keeps its last token in a pass of its own


def test_nothing_shared_or_an_unusual_layout_means_no_plan():
    unrelated = batch_from_rows([([1, 2, 3, 4], [5, 6]), ([7, 8, 9], [10, 11])]).batch
    assert plan_prefix_tree(unrelated, min_saved=1) is None
    small = batch_from_rows(grpo_group_rows(2, 10, 4, V)).batch  # saves 10 tokens
    assert plan_prefix_tree(small) is None and plan_prefix_tree(small, min_saved=10) is not None
    holed = batch_from_rows(grpo_group_rows(4, 20, 4, V)).batch.clone()
    holed["attention_mask"][0, -holed["responses"].shape[1]] = 0  # a hole, not padding
    assert plan_prefix_tree(holed, min_saved=1) is None
    shifted = batch_from_rows(grpo_group_rows(4, 20, 4, V)).batch.clone()
    shifted["position_ids"] = shifted["position_ids"] + 1
    assert plan_prefix_tree(shifted, min_saved=1) is None
