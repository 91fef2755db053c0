"""Chat messages to prompt token ids, where text written by a model is data, never control.

Self-play puts models' text into prompts: another seat's message in a free-text game, the
model's own earlier answers, a judge's verdict. A chat template renders message contents
verbatim, and tokenizers turn any occurrence of a special-token string (``<|im_start|>``,
``<|im_end|>``, ``<|endoftext|>``, ...) into that special token's id. A model can spell those
strings with ordinary tokens, so without care one seat could open a fake ``system`` turn in
another seat's prompt, and that prompt becomes training data.

This is the one place in the prompt path that prevents it: every backend encodes prompts with
:func:`encode_chat`, except a remote chat server, which renders the text itself with a tokenizer
not known here: its messages go out through :func:`neutralise_remote`. The contents of untrusted
messages (every role but ``system``, which comes from the config) have each special-token
string broken by a zero-width space after its first
character, so the text still reads the same to a person and the tokenizer sees ordinary
characters. It works for any tokenizer: the strings come from the tokenizer itself
(``all_special_tokens`` and every added token marked special), not from a list per model.
Added tokens that are not special (the tiny model's move tokens such as ``[4]``) are data and
stay as they are.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable

BREAK = "\u200b"  # zero-width space: invisible, and never part of a special token
TRUSTED_ROLES = frozenset({"system"})


def special_token_strings(tokenizer) -> tuple[str, ...]:
    """Every string the tokenizer would turn into a special token, longest first."""
    strings = set(getattr(tokenizer, "all_special_tokens", []) or [])
    for token in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).values():
        if getattr(token, "special", False):
            strings.add(str(token.content))
    return tuple(sorted((s for s in strings if len(s) > 1), key=len, reverse=True))


def neutralise(text: str, specials: Iterable[str]) -> str:
    """``text`` with every occurrence of a special-token string broken by :data:`BREAK`.

    ``str.replace`` breaks non-overlapping matches only, so it repeats until none is left (a
    special string that overlaps itself, such as ``aa`` in ``aaa``); each pass only inserts
    characters inside a match, so it ends.
    """
    specials = tuple(specials)
    changed = True
    while changed:
        changed = False
        for special in specials:
            if special in text:
                text = text.replace(special, special[0] + BREAK + special[1:])
                changed = True
    return text


def _untrusted_mapped(messages: list[dict[str, str]], change) -> list[dict[str, str]]:
    """A copy of ``messages`` with ``change`` applied to the contents of the untrusted ones (every
    role but ``system``)."""
    return [message if message.get("role") in TRUSTED_ROLES
            else {**message, "content": change(str(message.get("content", "")))} for message in messages]


def neutralise_messages(messages: list[dict[str, str]], specials: Iterable[str]) -> list[dict[str, str]]:
    """A copy of ``messages`` whose untrusted contents (every role but ``system``) are neutralised."""
    specials = tuple(specials)  # read once per message below, not consumed by the first
    return _untrusted_mapped(messages, lambda text: neutralise(text, specials))


CHAT_MARKER = re.compile(r"<[|｜][^<>|｜\s]{1,40}[|｜]>|</?s>|<(?:bos|eos|pad)>|\[/?(?:INST|SYSTEM_PROMPT|AVAILABLE_TOOLS|"
                         r"TOOL_CALLS|TOOL_RESULTS)\]|<(?:start|end)_of_turn>")
"""The special-token strings of the common chat templates (``<|im_start|>``, ``<|eot_id|>``,
``</s>``, ``[INST]``, Mistral's ``[SYSTEM_PROMPT]``, Gemma's ``<start_of_turn>`` and ``<bos>``,
DeepSeek's ``<｜User｜>`` with fullwidth bars, ...): what a remote server's tokenizer, which is
not known here, most likely turns into control tokens."""


def neutralise_remote(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """A copy of ``messages`` for a remote chat server (``rollout.remote``): untrusted contents
    with every :data:`CHAT_MARKER` match broken as :func:`neutralise` breaks a tokenizer's own
    specials. The server applies its chat template to the text, so this is the only defence."""
    return _untrusted_mapped(messages, lambda text: CHAT_MARKER.sub(
        lambda match: match.group()[0] + BREAK + match.group()[1:], text))


def encode_chat(tokenizer, messages: list[dict[str, str]], specials: Iterable[str] | None = None) -> list[int]:
    """Token ids of ``messages`` in the tokenizer's chat template, ready for the assistant's
    answer, with untrusted contents neutralised. ``specials``: :func:`special_token_strings`
    of the tokenizer, precomputed by callers that encode many prompts."""
    return encode_chats(tokenizer, [messages], specials)[0]


def encode_chats(tokenizer, conversations: list[list[dict[str, str]]],
                 specials: Iterable[str] | None = None) -> list[list[int]]:
    """:func:`encode_chat` of each conversation, in one batched tokenizer call.

    transformers renders every conversation; the rendered texts are tokenized together, by the
    Rust tokenizer itself where there is one (transformers' own call would convert every
    encoding into Python objects the prompt path never reads: a tenth of a tiny-model play), so
    the arena encodes every pending prompt of a turn in one call. The ids are those of
    ``apply_chat_template(tokenize=True)``, conversation by conversation."""
    if not conversations:
        return []
    if specials is None:
        specials = special_token_strings(tokenizer)
    specials = tuple(specials)
    safe = [neutralise_messages(messages, specials) for messages in conversations]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a tokenizer without a Rust backend: transformers encodes
        encoded = tokenizer.apply_chat_template(safe, add_generation_prompt=True, tokenize=True, return_dict=False)
        return [list(ids) for ids in encoded]
    texts = tokenizer.apply_chat_template(safe, add_generation_prompt=True, tokenize=False)
    # encode_batch_fast (tokenizers >= 0.21) skips the character offsets, which are never read
    encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
    return [encoding.ids for encoding in encode(texts, add_special_tokens=False)]


class PromptEncoder:
    """:func:`encode_chats` for one tokenizer, remembering the prompts it encoded.

    Games show the same positions again and again (every game opens on the same board), and a
    prompt's ids depend on its messages alone, so the ids of the last ``cache_size`` distinct
    conversations are kept and only the others are rendered and tokenized, in one call."""

    def __init__(self, tokenizer, cache_size: int = 65536):
        self.tokenizer = tokenizer
        self.specials = special_token_strings(tokenizer)
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple, tuple[int, ...]] = OrderedDict()

    def encode(self, conversations: list[list[dict[str, str]]]) -> list[list[int]]:
        keys = [tuple((m.get("role"), m.get("content")) for m in messages) for messages in conversations]
        found = {key: self._cache[key] for key in keys if key in self._cache}
        missing = list(dict.fromkeys(key for key in keys if key not in found))
        if missing:
            first = {key: messages for key, messages in zip(keys, conversations)}
            for key, ids in zip(missing, encode_chats(self.tokenizer, [first[k] for k in missing], self.specials)):
                found[key] = tuple(ids)
        for key in keys:  # this call's prompts are the most recent; the oldest others go first
            self._cache[key] = found[key]
            self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return [list(found[key]) for key in keys]


def end_of_turn_ids(tokenizer) -> list[int]:
    """The token ids that end a completion: the tokenizer's end of turn, where it has one
    (generation also stops at the token budget)."""
    return [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
