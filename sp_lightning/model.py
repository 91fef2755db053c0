"""The policy factory: a Hugging Face causal LM from a name or a local directory, with LoRA.

``model: tiny`` builds a small random-init Qwen2-style model and a byte-level BPE tokenizer with a
chat template in-process, with no download, so that the default config runs on a fresh machine.
The tiny tokenizer holds every move of the built-in games as a single token: learning a legal
move is then "copy one token from the prompt", which a tiny model learns in minutes.
Everything is built from a seed, so the same config rebuilds the same base weights; that is what
lets checkpoints store only the adapter.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from sp_lightning.errors import UserError, check_int

log = logging.getLogger(__name__)

TINY = "tiny"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TINY_SEED = 0
"""The tiny model's tokenizer corpus and weights come from this seed, always: adapter-only
checkpoints hold no base weights, so every process must rebuild the very same base."""


@dataclass
class LoraSettings:
    """LoRA adapter settings (peft)."""

    r: int = 8
    """Adapter rank."""
    alpha: int = 16
    """Scaling numerator: the update is scaled by alpha / r."""
    target_modules: list[str] | str = "all-linear"
    """Module names to adapt, or "all-linear"."""
    trainable_tokens: list[str] | None = None
    """Tokens whose embedding rows train with the adapter (peft trainable_token_indices), as
    for tokens added to a pretrained vocabulary; the entry "moves" stands for every move of the
    games of policy.tiny.games.
    The base embedding stays frozen: the rows' deltas live in the adapter."""

    def __post_init__(self):
        # peft's own check of r runs only when the adapter is built, and its message speaks of
        # target_modules (it lists every module it could not adapt)
        check_int(self.r, "policy.lora.r", 1)
        if not self.alpha > 0:
            raise ValueError(f"policy.lora.alpha: expected > 0, got {self.alpha!r}")


@dataclass
class TinyModelSettings:
    """The built-in random-init model (``model: tiny``)."""

    hidden_size: int = 64
    layers: int = 2
    heads: int = 2
    """hidden_size / heads is the head dim; keep it >= 32 so vLLM's CPU attention accepts it."""
    intermediate_size: int = 256
    vocab_size: int = 512
    """Byte-level BPE vocabulary size before the move tokens and special tokens are added."""
    max_positions: int = 1024
    initializer_range: float = 0.1
    """Std of the random init. With frozen tied embeddings a logit is at most about
    |embedding row| * |normed hidden state| = initializer_range * hidden_size: with the usual 0.02
    and hidden size 64 that is ~1.3, too small a range to make any of ~400 tokens likely, and no
    LoRA adapter can change it (entropy stays at log vocab). 0.1 (a range of ~6) trains well."""
    games: list[str] = field(default_factory=lambda: ["tictactoe_v1", "kuhn_poker_v1"])
    """Games (ids or class paths) whose observations train the tokenizer and whose moves become
    single tokens. Fixed by the config, not by what is registered, so that the same config always
    rebuilds the same base model: adapter-only checkpoints depend on it."""
    extra_tokens: list[str] = field(default_factory=list)
    """More strings to hold as single tokens (moves of your own game)."""

    def __post_init__(self):
        for name in ("hidden_size", "layers", "heads", "intermediate_size", "vocab_size", "max_positions"):
            check_int(getattr(self, name), f"policy.tiny.{name}", 1)
        if self.hidden_size % self.heads:
            raise ValueError(f"policy.tiny.heads: expected a divisor of hidden_size ({self.hidden_size}), got "
                             f"{self.heads}")
        if not self.initializer_range > 0:
            raise ValueError(f"policy.tiny.initializer_range: expected > 0, got {self.initializer_range!r}")


@dataclass
class PolicySettings:
    """Which model plays and learns."""

    model: str = TINY
    """A Hugging Face model name, a local directory saved by save_pretrained, or "tiny"."""
    lora: LoraSettings | None = field(default_factory=LoraSettings)
    """LoRA settings; null trains every weight."""
    adapter_path: str | None = None
    """Warm start: a peft adapter directory to continue training from."""
    tiny: TinyModelSettings = field(default_factory=TinyModelSettings)
    dtype: str = "float32"
    """Weights' dtype when loading a model: float32, bfloat16 or float16."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward to save memory."""


def _game_move_tokens(games: list[str]) -> list[str]:
    """Every move of the given games, so that each move is one token."""
    from envs import make

    moves: list[str] = []
    for game_id in games:
        env = make(game_id)
        moves.extend(m for m in env.game_info.moves if m not in moves)
        env.close()
    return moves


def _tokenizer_corpus(games: list[str], seed: int, episodes: int = 60) -> list[str]:
    """Observation texts from random games of ``games``: the text the tiny model reads."""
    from envs import RandomBot, make

    texts = ["system\nuser\nassistant\n"] * 50
    texts.append("You are playing a game. Answer with your move in brackets, e.g. [move].")
    bot = RandomBot(seed=seed)
    for index, game_id in enumerate(games):
        env = make(game_id)
        for game_seed in range(episodes):
            env.reset(seed=seed + 1000 * index + game_seed)
            for agent in env.agent_iter(max_iter=1000):
                obs, _, term, trunc, info = env.last()
                texts.append(obs["text"])
                legal = info.get("legal_actions") or ["[0]"]
                env.step(None if term or trunc else bot.act(obs["text"], legal))
        env.close()
    return texts


def build_tiny_tokenizer(settings: TinyModelSettings) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained in-process, with moves as single tokens and ChatML."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=settings.vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
    )
    tok.train_from_iterator(_tokenizer_corpus(settings.games, TINY_SEED), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    moves = _game_move_tokens(settings.games) + [t for t in settings.extra_tokens if t]
    tokenizer.add_tokens(moves)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(settings: TinyModelSettings, vocab_size: int, eos_id: int, pad_id: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size,
        num_hidden_layers=settings.layers,
        num_attention_heads=settings.heads,
        num_key_value_heads=settings.heads,
        max_position_embeddings=settings.max_positions,
        tie_word_embeddings=True,
        initializer_range=settings.initializer_range,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng():
        torch.manual_seed(TINY_SEED)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    return model


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_base(settings: PolicySettings):
    """The base model and tokenizer, before any adapter."""
    if settings.dtype not in _DTYPES:
        raise ValueError(f"policy.dtype: expected one of {sorted(_DTYPES)}, got {settings.dtype!r}")
    if settings.model == TINY:
        tokenizer = build_tiny_tokenizer(settings.tiny)
        model = build_tiny_model(
            settings.tiny, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id
        )
        return model, tokenizer
    source = settings.model
    offline = os.path.isdir(source)
    if not offline and _names_a_directory(source):
        raise UserError(f"model.policy.model: directory {source!r} does not exist (from {os.getcwd()}); expected "
                        f"a directory written by save_pretrained, a hub name (org/name) or 'tiny'")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=offline)
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=_DTYPES[settings.dtype], local_files_only=offline
        )
    except OSError as err:
        raise ValueError(
            f"model.policy.model: could not load {source!r} as a local directory or a hub model "
            f"({err}). Pass a directory written by save_pretrained, a hub name this machine can "
            f"download, or 'tiny' for the built-in model."
        ) from err
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        tokenizer.chat_template = CHAT_TEMPLATE
    return model, tokenizer


def _names_a_directory(source: str) -> bool:
    """Whether ``model.policy.model`` can only be a path (a hub name is ``name`` or ``org/name``):
    absolute, relative to ``.``, ``..`` or ``~``, or with more than one ``/``."""
    return source.startswith(("/", "./", "../", "~", ".\\")) or source.count("/") > 1 or os.path.isfile(source)


def _lora_config(lora: LoraSettings, tokenizer, settings: PolicySettings, key: str):
    from peft import LoraConfig

    token_ids = _trainable_token_ids(lora.trainable_tokens, tokenizer, settings.tiny.games)
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=0.0,  # the shared-prompt forward is exact only without dropout
        target_modules=lora.target_modules,
        trainable_token_indices=token_ids or None,
        task_type="CAUSAL_LM",
    )


def _with_adapter(model, config, adapter_name: str, key: str):
    from peft import get_peft_model

    try:
        return get_peft_model(model, config, adapter_name=adapter_name)
    except ValueError as err:  # peft's NoMatchingPeftModuleError among them
        linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                         if isinstance(module, torch.nn.Linear)})
        raise ValueError(
            f"{key}.target_modules: {config.target_modules!r} does not fit this model ({err}); "
            f"its linear modules are {linear}, or use 'all-linear'"
        ) from err


def load_policy(settings: PolicySettings, learners: dict | None = None):
    """Base model + (new or warm-started) LoRA adapter, and the tokenizer.

    Returns ``(model, tokenizer)``. With LoRA, only the adapter's weights require grad; the base
    model is the reference policy (``model.disable_adapter()``). With ``learners`` (name ->
    ``sp_lightning.learners.LearnerSettings``), one adapter per learner, each with
    ``settings.lora`` updated by the learner's own ``lora`` keys, all trainable.
    """
    from peft import PeftModel

    from sp_lightning.learners import adapter_of, overridden, trainable_again

    model, tokenizer = load_base(settings)
    if learners and (settings.lora is None or settings.adapter_path is not None):
        raise ValueError("model.learners: each learner is a new LoRA adapter of the base model: set "
                         "model.policy.lora (and no policy.adapter_path)")
    if settings.adapter_path is not None:
        if not os.path.isdir(settings.adapter_path):
            raise ValueError(
                f"policy.adapter_path: expected a peft adapter directory, got "
                f"{settings.adapter_path!r} (no such directory)"
            )
        model = PeftModel.from_pretrained(model, settings.adapter_path, is_trainable=True)
    elif learners:
        for index, (name, learner) in enumerate(learners.items()):
            lora = overridden(settings.lora, learner.lora, f"model.learners.{name}.lora")
            config = _lora_config(lora, tokenizer, settings, f"model.learners.{name}.lora")
            if index == 0:
                model = _with_adapter(model, config, adapter_of(name), f"model.learners.{name}.lora")
            else:
                model.add_adapter(adapter_of(name), config)
        trainable_again(model)
    elif settings.lora is not None:
        model = _with_adapter(model, _lora_config(settings.lora, tokenizer, settings, "policy.lora"),
                              "default", "policy.lora")
    if settings.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    return model, tokenizer


def _trainable_token_ids(tokens: list[str] | None, tokenizer, games: list[str]) -> list[int]:
    names: list[str] = []
    for token in tokens or []:
        names.extend(_game_move_tokens(games) if token == "moves" else [token])
    ids = []
    for name in names:
        token_id = tokenizer.convert_tokens_to_ids(name)
        if token_id is None or token_id == tokenizer.unk_token_id or token_id >= len(tokenizer):
            raise ValueError(
                f"policy.lora.trainable_tokens: {name!r} is not a single token of this tokenizer; "
                f"add it to policy.tiny.extra_tokens (tiny model) or to the tokenizer first"
            )
        ids.append(token_id)
    return ids
