"""Dump rows -> viewer records: both row formats, the tool-call count, `correct`, the
token/mask alignment and the per-step cap."""

from __future__ import annotations

from agentrl.report.trajectories import load_source, needs_decoder, to_record, truncation_line


def test_a_trainer_dump_row_becomes_a_record(synthetic):
    row = synthetic.dump_row(2, 1, acc=1.0)
    row["format_bonus"] = 0.05
    record = to_record(row, "rollouts", decode=None)
    assert record["source"] == "rollouts" and record["step"] == 2 and record["id"] == "2-1"
    assert record["score"] == 1.05 and record["correct"] is True  # acc decides, not score
    assert record["tool_calls"] == 1 and record["turns"] == 4 and record["state"] == "completed"
    assert record["tokens"] == synthetic.TOKENS and record["mask"] == synthetic.MASK
    assert record["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"expression": "12*3"}
    # the row's own train/inference gap is shown, and the viewer's "gap" order sorts by it
    assert record["extra"] == {"acc": 1.0, "format_bonus": 0.05, "logprob_gap_max": 0.04}
    assert to_record(synthetic.dump_row(2, 0, acc=0.0), "rollouts", None)["correct"] is False


def test_old_dump_rows_without_tokens_keep_their_text():
    row = {"step": 1, "uid": "1-0", "input": "q", "output": "a", "score": 0.5,
           "request_state": "completed"}  # fmt: skip
    record = to_record(row, "rollouts", None)
    assert record["tokens"] is None and record["mask"] is None and record["messages"] is None
    assert (record["input"], record["output"]) == ("q", "a")
    assert record["correct"] is False  # score 0.5 < 1
    assert record["tool_calls"] == 0


def test_generate_rows_are_cut_at_the_prompt_and_decoded(quickstart_dir, synthetic):
    files = [quickstart_dir / "eval_sft.jsonl"]
    assert needs_decoder(files)
    records, total = load_source("eval_sft", files, 16, decode=lambda ids: [f"<{i}>" for i in ids])
    assert total == 3
    assert [r["id"] for r in records] == ["0/0", "1/0", "2/0"]
    assert [r["correct"] for r in records] == [False, True, True]
    first = records[0]
    assert first["step"] is None and first["tool_calls"] == 1
    assert first["mask"] == synthetic.MASK
    assert first["tokens"][:2] == ["<100>", "<101>"]
    # no tokenizer: the ids themselves
    plain, _ = load_source("eval_sft", files, 16, decode=None)
    assert plain[0]["tokens"][0] == "[100]"


def test_a_mask_that_does_not_align_is_dropped(synthetic):
    row = synthetic.dump_row(1, 0, 1.0)
    row["loss_mask"] = row["loss_mask"][:-1]
    record = to_record(row, "rollouts", None)
    assert record["mask"] == [] and len(record["tokens"]) == len(synthetic.TOKENS)


def test_the_cap_keeps_the_first_rows_of_each_step_and_says_so(train_run):
    files = sorted((train_run.parent / "elsewhere" / "dumps").glob("*.jsonl"))
    assert not needs_decoder(files)
    records, total = load_source("rollouts", files, max_per_step=3)
    assert [r["id"] for r in records if r["step"] == 1] == ["1-0", "1-1", "1-2"]
    assert (len(records), total) == (9, 12)


def test_every_cut_source_is_named_in_one_line():
    line = truncation_line({"rollouts": (320, 2560), "eval_sft": (16, 128), "eval_rl": (5, 5)}, 16)
    assert line == (
        "The viewer shows the first 16 trajectories of each step and source (rollouts 320 "
        "of 2,560, eval_sft 16 of 128); agentrl report RUN_DIR --max-per-step N shows more."
    )
    assert truncation_line({"rollouts": (3, 3)}, 16) is None and truncation_line({}, 16) is None


def test_agent_rows_carry_their_session_tree(tmp_path, synthetic):
    path = synthetic.write_jsonl(tmp_path / "1.jsonl", synthetic.agent_rows())
    records, total = load_source("rollouts", [path], max_per_step=16)
    assert total == 4
    child, root, side, lone = records
    assert (child["session"], child["segment"]["index"], child["segment"]["parent"]) == ("e0", 1, 0)
    assert child["segment"]["trained"] == 3 and child["segment"]["tokens"] == 4
    assert "episode_id" not in child["extra"] and "episode_row" not in child["extra"]
    # one tree per session, depth first: the root, its child, then the side call (a root)
    shape = [(s["index"], s["depth"], s["parent"], s["dumped"]) for s in child["tree"]]
    assert shape == [(0, 0, None, True), (1, 1, 0, True), (2, 0, None, True)]
    assert root["tree"] == side["tree"] == child["tree"]
    assert child["tree"][1]["branch_message"] == 1 and child["tree"][1]["branch_token"] == 2
    assert child["tree"][2]["side_call"] is True
    # a parent no row holds is drawn, marked as not dumped
    assert [(s["index"], s["depth"], s["dumped"]) for s in lone["tree"]] == [
        (1, 0, False), (2, 1, True)]
    # the tree is the session's whole, even where the per-step cap hides some of its rows
    capped, _ = load_source("rollouts", [path], max_per_step=1)
    assert len(capped) == 1 and len(capped[0]["tree"]) == 3
    # rows outside agent mode have no tree
    plain = to_record(synthetic.dump_row(1, 0, acc=1.0), "rollouts", None)
    assert plain["session"] is None and plain["segment"] is None and plain["tree"] is None
