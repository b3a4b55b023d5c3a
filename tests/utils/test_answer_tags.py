"""extract_answer: the last tag's text wins; no tag, no answer."""

from agentrl.utils.answer_tags import extract_answer


def test_the_last_answer_tag_wins_and_spans_lines():
    assert extract_answer("<answer>1</answer> then <answer>\n 2 \n</answer>") == "2"
    assert extract_answer("<move>[5]</move>", tag="move") == "[5]"
    assert extract_answer("no tag here") is None and extract_answer("<answer>open") is None


def test_a_move_is_the_last_answer_else_the_whole_reply():
    from agentrl.utils.answer_tags import answer_or_reply

    assert answer_or_reply("I guess <answer>[3]</answer> then <answer> [7] </answer>") == "[7]"
    assert answer_or_reply("  [5]\n") == "[5]"
    assert answer_or_reply("<move>[2]</move>", tag="move") == "[2]"
    assert answer_or_reply("<answer>[4]</answer>", tag=None) == "<answer>[4]</answer>"
