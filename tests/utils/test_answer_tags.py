"""extract_answer: the last tag's text wins; no tag, no answer."""

from agentrl.utils.answer_tags import extract_answer


def test_the_last_answer_tag_wins_and_spans_lines():
    assert extract_answer("<answer>1</answer> then <answer>\n 2 \n</answer>") == "2"
    assert extract_answer("<move>[5]</move>", tag="move") == "[5]"
    assert extract_answer("no tag here") is None and extract_answer("<answer>open") is None
