"""PieceEncoder: the same ids as encoding the whole text, for any text and any known pieces;
the whole-text encode for tokenizers whose pipeline is not piece-local (and why)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from agentrl.models.token_pieces import PieceEncoder

# texts made of the pieces that matter: added tokens, their fragments, text that BPE merges
# across a cut, Unicode that NFC composes (e + combining acute) on either side of a cut
ATOMS = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>",
         "<|endoftext|>", "<|im_", "end|>", "<", "|>", "tool_call", "the", " the", "th", "e",
         "\u0301", "é", "\n", "\n\n", "  ", " ", "\t", "assistant", "user\n", '{"a": 1}',
         "42", "😀", "done"]  # fmt: skip
texts = st.lists(st.sampled_from(ATOMS), max_size=24).map("".join)


def encoder_of(tokenizer) -> PieceEncoder:
    return PieceEncoder(tokenizer, lambda text: tokenizer.encode(text, add_special_tokens=False))


def whole(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


@pytest.fixture(scope="module")
def tiny(tiny_tokenizer):
    return tiny_tokenizer


def test_the_tiny_tokenizer_is_piece_local_and_cut_at_its_added_tokens(tiny):
    enc = encoder_of(tiny)
    assert (enc.exact, enc.reason) == (True, None)
    assert enc.pieces("a<|im_end|>\n<|im_start|>user\n<tool_response>x") == [
        "a", "<|im_end|>", "\n", "<|im_start|>", "user\n", "<tool_response>", "x"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts, seen=st.lists(texts, max_size=4))
def test_the_ids_are_the_whole_texts_for_any_text_and_any_known_pieces(tiny, text, seen):
    enc = encoder_of(tiny)
    known: dict = {}
    for other in seen:  # pieces of other texts, as a trajectory records its deltas
        enc.remember(other, whole(tiny, other), known)
    assert enc.encode(text, known) == whole(tiny, text)
    assert enc.encode(text) == whole(tiny, text)  # the cache now holds its pieces


def test_known_pieces_are_not_encoded_again(tiny):
    calls: list[str] = []

    def counting(text: str) -> list[int]:
        calls.append(text)
        return whole(tiny, text)

    enc = PieceEncoder(tiny, counting)
    prompt = "<|im_start|>system\nYou are a helper.<|im_end|>\n<|im_start|>assistant\n"
    known: dict = {}
    enc.remember(prompt, whole(tiny, prompt), known)
    assert known == {"system\nYou are a helper.": tuple(whole(tiny, "system\nYou are a helper.")),
                     "\n": tuple(whole(tiny, "\n")), "assistant\n": tuple(whole(tiny, "assistant\n"))}
    text = prompt + "the model's turn<|im_end|>"
    assert enc.encode(text, known) == whole(tiny, text)
    assert calls == ["assistant\nthe model's turn"]  # one call, the only new piece
    calls.clear()
    assert enc.encode(text) == whole(tiny, text)  # without `known`: the two template pieces
    assert calls == ["system\nYou are a helper.<|im_end|>\n"]
    assert len(enc.cache) == 3
    calls.clear()
    assert enc.encode(text) == whole(tiny, text)  # all three from the cache
    assert calls == []


def test_new_pieces_are_encoded_in_one_call_and_split_back(tiny):
    calls: list[str] = []
    enc = PieceEncoder(tiny, lambda t: calls.append(t) or whole(tiny, t))
    text = "one<tool_call>two three<|im_end|>four"
    assert enc.encode(text) == whole(tiny, text)
    assert calls == ["one<|im_end|>two three<|im_end|>four"]  # joined by the shortest token


def test_the_cache_keeps_the_recently_used_pieces(tiny):
    enc = PieceEncoder(tiny, lambda t: whole(tiny, t), cache_size=2)
    for text in ("a", "b", "a", "c"):
        enc.encode(text)
    assert list(enc.cache) == ["a", "c"]


def test_a_text_recorded_before_is_not_cut_again(tiny, monkeypatch):
    enc = encoder_of(tiny)
    delta = "\n<|im_start|>user\n<tool_response>\ndone\n</tool_response><|im_end|>\n"
    first: dict = {}
    enc.remember(delta, whole(tiny, delta), first)
    monkeypatch.setattr(enc, "_split_ids", lambda ids, added: pytest.fail("cut again"))
    second: dict = {}
    enc.remember(delta, whole(tiny, delta), second)
    assert second == first == {"\n": tuple(whole(tiny, "\n")),
                               "user\n": tuple(whole(tiny, "user\n")),
                               "\ndone\n": tuple(whole(tiny, "\ndone\n"))}


def test_ids_that_do_not_split_at_the_added_tokens_are_not_recorded(tiny):
    enc = encoder_of(tiny)
    known: dict = {}
    im_end = tiny.convert_tokens_to_ids("<|im_end|>")
    enc.remember("a<|im_end|>b", [1, 2], known)  # no added id where the text has one
    enc.remember("ab", [1, im_end, 2], known)  # an added id the text does not have
    assert known == {}


# ---------------------------------------------------------------------- other tokenizers

CORPUS = ["the quick brown fox", "▁the▁quick", "hello world", "abab ab ba"] * 20


def built(pre_tokenizer, added: list[AddedToken]) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=120, show_progress=False))
    tok.add_tokens(added)
    return PreTrainedTokenizerFast(tokenizer_object=tok)


@pytest.mark.parametrize(
    "pre_tokenizer, added, reason",
    [
        (pre_tokenizers.Metaspace(prepend_scheme="first"), [AddedToken("<x>", normalized=False)],
         "pre-tokenizer Metaspace"),
        (pre_tokenizers.ByteLevel(add_prefix_space=True), [AddedToken("<x>", normalized=False)],
         "pre-tokenizer ByteLevel with add_prefix_space"),
        (pre_tokenizers.ByteLevel(add_prefix_space=False),
         [AddedToken("<x>", normalized=False, lstrip=True)],
         "added token '<x>' is not matched exactly as written"),
        (pre_tokenizers.ByteLevel(add_prefix_space=False), [AddedToken("<x>", normalized=True)],
         "added token '<x>' is not matched exactly as written"),
    ],
)
def test_a_pipeline_that_is_not_piece_local_encodes_the_whole_text(pre_tokenizer, added, reason):
    tokenizer = built(pre_tokenizer, added)
    calls: list[str] = []
    enc = PieceEncoder(tokenizer, lambda t: calls.append(t) or whole(tokenizer, t))
    assert (enc.exact, enc.reason) == (False, reason)
    text = "the quick <x> the quick"
    assert enc.encode(text, {" the quick": (1,)}) == whole(tokenizer, text)
    assert calls == [text]
    enc.remember(text, whole(tokenizer, text), known := {})
    assert known == {}


def test_metaspace_first_is_why_the_check_exists(tiny):
    # the position-dependent prepend: the same piece encodes differently after a cut
    tokenizer = built(pre_tokenizers.Metaspace(prepend_scheme="first"),
                      [AddedToken("<x>", normalized=False)])
    text = "the<x>the"
    x = tokenizer.convert_tokens_to_ids("<x>")
    assert whole(tokenizer, text) != whole(tokenizer, "the") + [x] + whole(tokenizer, "the")


def test_a_piece_local_built_tokenizer_is_exact():
    tokenizer = built(pre_tokenizers.ByteLevel(add_prefix_space=False),
                      [AddedToken("<x>", normalized=False), AddedToken("<xx>", normalized=False)])
    enc = encoder_of(tokenizer)
    assert enc.exact
    for text in ("the quick<x>brown<xx>fox", "<xx><x>", "ab<x>ba<xx>", ""):
        assert enc.encode(text) == whole(tokenizer, text)


def test_pieces_that_would_merge_with_the_separator_fall_back_to_the_whole_text():
    # added tokens "b>" and "ab>": "a" joined to the separator "b>" makes "ab>"
    tokenizer = built(pre_tokenizers.ByteLevel(add_prefix_space=False),
                      [AddedToken("b>", normalized=False), AddedToken("ab>", normalized=False)])
    calls: list[str] = []
    enc = PieceEncoder(tokenizer, lambda t: calls.append(t) or whole(tokenizer, t))
    text = "xa" + "ab>" + "yz"
    assert enc.pieces(text) == ["xa", "ab>", "yz"]
    assert enc.encode(text) == whole(tokenizer, text)
    assert calls == [text]  # "xab>yz" cuts at "ab>", not at the separator


def test_a_python_tokenizer_encodes_the_whole_text():
    class Slow:
        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

    enc = PieceEncoder(Slow(), lambda t: Slow().encode(t))
    assert (enc.exact, enc.reason) == (False, "not a fast (tokenizers) tokenizer")
    assert enc.encode("ab") == [97, 98]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(texts, max_size=6))
def test_a_batch_is_each_texts_ids_with_its_own_pieces(tiny, batch):
    enc = encoder_of(tiny)
    out = enc.encode_batch(batch)
    assert [ids for ids, _ in out] == [whole(tiny, text) for text in batch]
    for text, (_, own) in zip(batch, out, strict=True):
        assert set(own) == {p for p in enc.pieces(text)[::2] if p}
        assert enc.encode(text, own) == whole(tiny, text)


def test_a_batch_encodes_each_distinct_piece_once_in_one_call(tiny):
    calls: list[str] = []
    enc = PieceEncoder(tiny, lambda t: calls.append(t) or whole(tiny, t))
    system = "<|im_start|>system\nTools: a long schema the prompts share.<|im_end|>\n"
    batch = [f"{system}<|im_start|>user\nTask {k}.<|im_end|>\n<|im_start|>assistant\n"
             for k in range(3)]  # fmt: skip
    out = enc.encode_batch(batch)
    assert [ids for ids, _ in out] == [whole(tiny, t) for t in batch]
    assert calls == ["system\nTools: a long schema the prompts share.<|im_end|>\n<|im_end|>"
                     "user\nTask 0.<|im_end|>assistant\n<|im_end|>user\nTask 1.<|im_end|>"
                     "user\nTask 2."]  # fmt: skip
    assert enc.cache == {}  # a batch's pieces do not push out the cached ones


def test_a_tokenizer_that_is_not_piece_local_has_no_batch_encode():
    tokenizer = built(pre_tokenizers.Metaspace(prepend_scheme="first"),
                      [AddedToken("<x>", normalized=False)])
    assert encoder_of(tokenizer).encode_batch(["the<x>the"]) is None
