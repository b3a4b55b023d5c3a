"""Chat-template rendering for token-in/token-out trajectories.

A multi-turn trajectory is one growing list of token ids. The model's tokens are appended
exactly as sampled; everything else (tool responses, user turns, the next generation
prompt) is appended as the *delta* between two renderings of the chat template:

    delta(new) = render(BASE + new, add_generation_prompt=True) - render(BASE)

where BASE is a fixed three-message conversation (system, user, assistant). The cost of a
turn is therefore constant, not proportional to the conversation so far, and the tokens
match what rendering the whole conversation would give. Two pitfalls of Qwen-style
templates (Qwen2.5-Instruct's, as SGLang applies them) are handled here:

- default system prompt: rendering tool messages alone makes the template inject its
  default system prompt; BASE has an explicit system message, so the delta never has one;
- the newline after `<|im_end|>`: generation stops at `<|im_end|>`, but the template
  writes `<|im_end|>\\n` after each turn. `split_turn_end` finds which part of the
  template's end-of-turn text the model did not write; it is prepended to the next delta.

Deltas are rendered without tool schemas: templates put the schemas in the system turn,
which the delta never contains.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from agentrl.models.token_pieces import PieceEncoder

_BASE_USER = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hi."},
]
_BASE = [*_BASE_USER, {"role": "assistant", "content": "Hello."}]
_SENTINEL = "<<agentrl-sentinel-31f7>>"
_MAX_VERBATIM_SHAPES = 256  # cached (role, name, ...) shapes of one-message deltas (LRU)
# fields new on every message (a tool result's call id): a template that does not write them
# shares one cached shape for all their values
_PER_MESSAGE_FIELDS = frozenset({"tool_call_id"})
_ID_PROBES = ("call_probe_a", "call_probe_b")
# contents that trimming, escaping or markup handling would change: a template that writes
# them as given writes content verbatim
_CONTENT_PROBES = ("  padded \n\t", "{{ x }} {% if %} <tool_call> </think>\n\n", "")


def _verbatim_between(render: Callable[[list[str]], str], n: int) -> list[str] | None:
    """The n + 1 texts around the contents of n messages, if `render` (the text of the
    messages given their contents) writes every content verbatim: a sentinel per message
    finds the texts, then each of `_CONTENT_PROBES` (contents that trimming, escaping,
    markup handling or an empty-content branch would change), as it is in every message, must
    render as the texts joined by it. None otherwise, or when the template refuses them."""
    sentinels = [f"{_SENTINEL}{k}>" for k in range(n)]
    try:
        text = render(sentinels)
        between = []
        for sentinel in sentinels:
            if text.count(sentinel) != 1:
                return None
            before, text = text.split(sentinel)
            between.append(before)
        between.append(text)
        if any(render([probe] * n) != probe.join(between) for probe in _CONTENT_PROBES):
            return None
    except Exception:  # messages the template does not take: no fast path
        return None
    return between


class TemplateError(ValueError):
    """The chat template cannot be used for token-in/token-out (not prefix-stable)."""


_ENCODE_PROBES = ("", "a<tool_call>b<|im_end|>\n", "  Hello, world! 42 é 中文 🙂\n\n\t{}",
                  "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n")  # fmt: skip


def _backend_encode(tokenizer: Any) -> Any:
    """`tokenizer.backend_tokenizer.encode` where it is what `tokenizer.encode(text,
    add_special_tokens=False)` runs: a fast tokenizer with the library's encode methods,
    special tokens not split, no truncation or padding set on the backend, and the same ids
    on probe texts; else None (the tokenizer's own encode is used)."""
    from agentrl.models.token_pieces import library_encode

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not library_encode(tokenizer):
        return None
    if (getattr(tokenizer, "split_special_tokens", False) or backend.encode_special_tokens
            or backend.truncation is not None or backend.padding is not None):  # fmt: skip
        return None
    for probe in _ENCODE_PROBES:
        if backend.encode(probe, add_special_tokens=False).ids != tokenizer.encode(
                probe, add_special_tokens=False):  # fmt: skip
            return None
    return backend.encode


class ChatRenderer:
    """Renders conversations with a tokenizer's chat template and tokenizes the deltas.

    Args:
        tokenizer: a transformers tokenizer with a chat template.
        chat_template_kwargs: extra keyword arguments for `apply_chat_template`
            (`data.apply_chat_template_kwargs`), e.g. `enable_thinking`.
    """

    def __init__(self, tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None):
        self.tokenizer = tokenizer
        self.kwargs = dict(chat_template_kwargs or {})
        # the `tokenizers` encode that transformers' `encode` wraps, where it gives the same
        # ids (half the cost of a short delta's encode is the wrapper's)
        self._backend_encode = _backend_encode(tokenizer)
        base_user = self.render(_BASE_USER)
        self.generation_prompt = self._suffix(
            base_user, self.render(_BASE_USER, True), "adding the generation prompt"
        )
        with_sentinel = self._suffix(
            base_user,
            self.render([*_BASE_USER, {"role": "assistant", "content": _SENTINEL}]),
            "appending an assistant message",
        )
        cut = with_sentinel.find(_SENTINEL)
        if cut < 0:
            raise TemplateError("the chat template does not render assistant content verbatim")
        self.assistant_prefix = with_sentinel[:cut]  # e.g. "<|im_start|>assistant\n"
        self.turn_end = with_sentinel[cut + len(_SENTINEL) :]  # e.g. "<|im_end|>\n"
        self._base_user_text = base_user
        self._base_text = self.render(_BASE)
        self._turn_end_cuts = self._cut_points(self.turn_end)
        # role -> (text before, text after) the content of a one-message delta, where the
        # template writes that role's content verbatim (checked with probes): such a delta
        # is a concatenation, not a template render (the common tool-response turn)
        self._verbatim: OrderedDict[tuple, tuple[str, str] | None] = OrderedDict()
        # `encode` of a text reusing the ids of pieces seen before (the sanity check's)
        self.pieces = PieceEncoder(tokenizer, self.encode)
        # (roles, tool schemas' ids, add_generation_prompt) -> (the schemas, the text
        # between the messages' contents) for prompts the template writes verbatim
        self._prompt_shapes: OrderedDict[tuple, tuple[list, list[str] | None]] = OrderedDict()

    # ------------------------------------------------------------------ rendering

    def render(
        self,
        messages: Sequence[dict],
        add_generation_prompt: bool = False,
        tools: Sequence[dict] | None = None,
    ) -> str:
        """The template's text for `messages` (with `tools` schemas when given)."""
        return self.tokenizer.apply_chat_template(
            list(messages),
            tools=list(tools) if tools else None,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **self.kwargs,
        )

    def render_prompt(
        self,
        messages: Sequence[dict],
        add_generation_prompt: bool = True,
        tools: Sequence[dict] | None = None,
    ) -> str:
        """`render(messages, add_generation_prompt, tools)`, for a batch of prompts: where
        every message is a plain `{"role", "content": str}` and the template writes each
        content verbatim (probed once per shape: the roles in order, the schemas), the text is
        joined from the cached text between the contents instead of rendered (the same text;
        the trajectory's sanity check renders the whole conversation at the end)."""
        if not all(len(m) == 2 and isinstance(m.get("role"), str)
                   and isinstance(m.get("content"), str) for m in messages):  # fmt: skip
            return self.render(messages, add_generation_prompt, tools)
        schemas = list(tools or ())
        key = (tuple(m["role"] for m in messages), tuple(map(id, schemas)),
               add_generation_prompt)  # fmt: skip
        cached = self._prompt_shapes.get(key)
        # the schemas are kept with their pieces: their ids cannot be reused while cached
        if cached is None or any(a is not b for a, b in zip(cached[0], schemas, strict=True)):
            cached = (schemas, self._probe_prompt(key[0], add_generation_prompt, schemas))
            self._prompt_shapes[key] = cached
            while len(self._prompt_shapes) > _MAX_VERBATIM_SHAPES:
                self._prompt_shapes.popitem(last=False)
        self._prompt_shapes.move_to_end(key)
        between = cached[1]
        if between is None:
            return self.render(messages, add_generation_prompt, tools)
        parts = [between[0]]
        for message, after in zip(messages, between[1:], strict=True):
            parts += (message["content"], after)
        return "".join(parts)

    def _probe_prompt(self, roles: tuple[str, ...], add_generation_prompt: bool,
                      tools: list) -> list[str] | None:  # fmt: skip
        """The texts around the contents of messages of these roles, if the template writes
        every content verbatim (`_verbatim_between`); else None."""
        if not roles:
            return None
        return _verbatim_between(lambda contents: self.render(
            [{"role": r, "content": c} for r, c in zip(roles, contents, strict=True)],
            add_generation_prompt, tools), len(roles))  # fmt: skip

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (no BOS/EOS added: the template writes its own markup)."""
        if self._backend_encode is not None:
            return self._backend_encode(text, add_special_tokens=False).ids
        return self.tokenizer.encode(text, add_special_tokens=False)

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` of each text, in one call (a fast tokenizer spreads it over the cores
        and leaves the interpreter lock to the event loop)."""
        if not texts:
            return []
        return [list(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)
                ["input_ids"]]

    def encode_prompts(self, texts: Sequence[str]) -> list[tuple[list[int], dict]]:
        """``encode`` of each text with its pieces' ids (the tokenization check's `known`):
        the batch's distinct pieces encoded once (`PieceEncoder.encode_batch`: the system
        prompt and tool schemas every prompt repeats), else every text in one call."""
        texts = list(texts)
        pieces = self.pieces.encode_batch(texts)
        if pieces is not None:
            return pieces
        out = []
        for text, ids in zip(texts, self.encode_many(texts), strict=True):
            known: dict = {}
            self.pieces.remember(text, ids, known)
            out.append((ids, known))
        return out

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids` with every special token kept (what the template would write)."""
        # `decode` is `to_py_obj` (a Python pass over every id, ~40% of a long trajectory's
        # decode) then `_decode`; our ids are a flat list of ints already
        decode = getattr(self.tokenizer, "_decode", None) or self.tokenizer.decode
        return decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def prompt_ids(self, messages: Sequence[dict], tools: Sequence[dict] | None) -> list[int]:
        """The prompt: the messages, the tool schemas and the generation prompt."""
        return self.encode(self.render(messages, True, tools))

    def delta_text(self, new_messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
        """The text the template adds for `new_messages` after an assistant turn.

        One plain `{"role", "content": str}` message of a role whose content the template
        writes verbatim is concatenated from cached pieces instead of rendered (the same
        text; the trajectory's sanity check compares with a full render at the end)."""
        if len(new_messages) == 1:
            message = new_messages[0]
            content = message.get("content")
            fields = tuple(sorted((k, v) for k, v in message.items() if k != "content"))
            if isinstance(content, str) and all(isinstance(v, str) for _, v in fields):
                pieces = self._verbatim_pieces(fields, add_generation_prompt)
                if pieces is not None:
                    return pieces[0] + content + pieces[1]
        return self._render_delta(new_messages, add_generation_prompt)

    def _verbatim_pieces(
        self, fields: tuple[tuple[str, str], ...], add_generation_prompt: bool
    ) -> tuple[str, str] | None:
        """The cached text around a one-message delta's content (least recently used shapes
        leave the cache first). A per-message field (a tool result's `tool_call_id`) that the
        template does not write is left out of the key, so every result of one tool shares
        one entry; where the template writes it, the pieces are per value."""
        per_message = [k for k, _ in fields if k in _PER_MESSAGE_FIELDS]
        key: tuple = (fields, add_generation_prompt)
        if per_message:
            shape = tuple((k, v) for k, v in fields if k not in _PER_MESSAGE_FIELDS)
            general = (shape, tuple(per_message), add_generation_prompt)
            if general not in self._verbatim:
                self._remember(general, self._probe_id_free(fields, add_generation_prompt))
            self._verbatim.move_to_end(general)
            if self._verbatim[general] is not None:
                return self._verbatim[general]
        if key not in self._verbatim:
            self._remember(key, self._probe_verbatim(dict(fields), add_generation_prompt))
        self._verbatim.move_to_end(key)
        return self._verbatim[key]

    def _remember(self, key: tuple, pieces: tuple[str, str] | None) -> None:
        self._verbatim[key] = pieces
        while len(self._verbatim) > _MAX_VERBATIM_SHAPES:
            self._verbatim.popitem(last=False)

    def _probe_id_free(
        self, fields: tuple[tuple[str, str], ...], add_generation_prompt: bool
    ) -> tuple[str, str] | None:
        """The pieces for these fields if they do not depend on the per-message fields' values
        (two probe values render the same pieces); else None."""
        found = []
        for value in _ID_PROBES:
            probe = {k: (value if k in _PER_MESSAGE_FIELDS else v) for k, v in fields}
            found.append(self._probe_verbatim(probe, add_generation_prompt))
        return found[0] if found[0] is not None and found[0] == found[1] else None

    def _probe_verbatim(
        self, fields: dict[str, str], add_generation_prompt: bool
    ) -> tuple[str, str] | None:
        """The text around the content of a message with these other `fields` (role, tool
        name), if the template writes any content verbatim (`_verbatim_between`); else None."""
        between = _verbatim_between(lambda contents: self._render_delta(
            [{**fields, "content": contents[0]}], add_generation_prompt), 1)  # fmt: skip
        return None if between is None else (between[0], between[1])

    def _render_delta(self, new_messages: Sequence[dict], add_generation_prompt: bool) -> str:
        full = self.render([*_BASE, *new_messages], add_generation_prompt)
        return self._suffix(
            self._base_text,
            full,
            "appending " + ", ".join(m.get("role", "?") for m in new_messages) + " messages",
        )

    def assistant_text(self, message: dict) -> str:
        """The template's text for one assistant message, from its header to its turn end."""
        full = self.render([*_BASE_USER, message])
        return self._suffix(self._base_user_text, full, "appending an assistant message")

    # ------------------------------------------------------------------ the model's turn end

    def split_turn_end(self, text: str) -> tuple[str, str]:
        """Split a model turn into `(content, missing)`.

        `content` is the text without the end-of-turn markup the model wrote (e.g. a final
        `<|im_end|>`); `missing` is the rest of the template's end-of-turn text that the
        model did not write (e.g. the `\\n` after `<|im_end|>`, or all of `<|im_end|>\\n`
        when generation stopped for another reason).
        """
        for cut in self._turn_end_cuts:
            if text.endswith(self.turn_end[:cut]):
                return text[: len(text) - cut], self.turn_end[cut:]
        return text, self.turn_end

    def _cut_points(self, turn_end: str) -> list[int]:
        """Where a model may stop inside the turn end: after the whole of it, or right after
        a special token in it (its EOS). Longest first; never inside a token's text, so a
        model text ending in "<" is not mistaken for the start of "<|im_end|>"."""
        cuts = {len(turn_end)}
        for token in self.tokenizer.all_special_tokens:
            start = turn_end.find(token) if token else -1
            if start >= 0:
                cuts.add(start + len(token))
        return sorted((c for c in cuts if c > 0), reverse=True)

    @staticmethod
    def _suffix(prefix: str, full: str, what: str) -> str:
        if not full.startswith(prefix):
            at = next(
                (i for i, (a, b) in enumerate(zip(prefix, full, strict=False)) if a != b),
                min(len(prefix), len(full)),
            )
            raise TemplateError(
                f"the chat template is not prefix-stable: {what} changes the text rendered "
                f"before it (at character {at}: {prefix[max(at - 30, 0) : at + 30]!r} became "
                f"{full[max(at - 30, 0) : at + 30]!r}), so turns cannot be appended as token "
                "deltas"
            )
        return full[len(prefix) :]
