"""A checkpoint the user names (``--checkpoint``, ``--ckpt_path``): read it, or say why it
cannot be read; check that it fits the config's model, or name the settings that differ.

Without these checks a corrupt file surfaces as ``torch.load``'s unpickling error (or its page on
``weights_only``), and a checkpoint of another config as a dump of ``size mismatch for
...lora_B...``, or worse, under ``fit --ckpt_path``, as weights of the wrong shape loaded without
a word. A checkpoint records the module's settings (Lightning saves ``hyper_parameters``), so the
message can name what differs: ``model.policy.tiny.hidden_size: 64 in the checkpoint, 128 in
this config``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from typing import Any

from sp_lightning.errors import UserError

SHAPING = ("policy", "learners")
"""The module settings that decide the shape of what a checkpoint holds (the model, its LoRA,
its trainable tokens, the learners' adapters)."""


def unreadable(path, key: str, error: BaseException) -> UserError:
    """The error for a checkpoint file ``key`` names that cannot be read: missing, or not a
    checkpoint (truncated, corrupt, another kind of file)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        return UserError(f"{key} {path}: no such file; expected a Lightning .ckpt written by sp-lightning fit "
                         f"(e.g. runs/<run>/checkpoints/last.ckpt)")
    if os.path.isdir(path):
        return UserError(f"{key} {path}: a directory; expected a Lightning .ckpt file")
    previous = f"; the one before it is {path}.prev" if os.path.exists(path + ".prev") else ""
    return UserError(f"{key} {path}: not a readable checkpoint ({unreadable_reason(path, error)}); expected a "
                     f"Lightning .ckpt written by sp-lightning fit{previous}")


def unreadable_reason(path, error: BaseException) -> str:
    """What is wrong with the existing file ``path`` that did not load with ``error``."""
    if os.path.getsize(path) == 0:
        return "an empty file"
    if not zipfile.is_zipfile(path):
        return "not a torch archive: truncated, or another kind of file"
    text = str(error).strip()  # torch's own words, without its page on weights_only
    return f"a torch archive that does not load: {text.rpartition('WeightsUnpickler error:')[2].strip()[:160]}"


def read_checkpoint(path, key: str) -> dict:
    """The checkpoint dictionary in the file ``path`` (named by the flag ``key``)."""
    import torch

    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # torch raises several kinds for a missing, truncated or foreign file
        raise unreadable(path, key, error) from error
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise UserError(f"{key} {os.fspath(path)}: a torch file without a state_dict; expected a Lightning .ckpt "
                        f"written by sp-lightning fit")
    return checkpoint


def _plain(value: Any) -> Any:
    """Settings as plain data: dataclasses and namespaces as dicts, all the way down."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif hasattr(value, "as_dict") and callable(value.as_dict):
        value = value.as_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if not str(k).startswith("_")}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    return value


def _leaves(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_leaves(v, f"{prefix}.{k}"))
        return out
    return {prefix: value}


def differing_settings(saved: dict | None, own: dict) -> list[str]:
    """``key: <checkpoint's> in the checkpoint, <config's> in this config`` for every setting of
    :data:`SHAPING` that differs between a checkpoint's ``hyper_parameters`` and the module's."""
    if not saved:
        return []
    theirs, ours = {}, {}
    for name in SHAPING:
        theirs.update(_leaves(_plain(saved.get(name)), f"model.{name}"))
        ours.update(_leaves(_plain(own.get(name)), f"model.{name}"))
    return [f"{key}: {theirs.get(key, 'unset')!r} in the checkpoint, {ours.get(key, 'unset')!r} in this config"
            for key in sorted(set(theirs) | set(ours)) if theirs.get(key) != ours.get(key)]


def misfits(state: dict, params: dict) -> list[str]:
    """What of the checkpoint's ``state`` does not fit a model with ``params`` (name ->
    parameter; only the trainable ones are expected in the state): weights it lacks, holds in
    excess or holds in another shape. A value head the model has none of is no misfit (a run's
    credit may learn values; the policy is the same)."""
    out = [f"{name} is {tuple(value.shape)} there, {tuple(params[name].shape)} here"
           for name, value in state.items() if name in params and tuple(value.shape) != tuple(params[name].shape)]
    out += [f"{name} is not in this model" for name in state
            if name not in params and not name.startswith("value_heads.")]
    out += [f"{name} is not in the checkpoint" for name, p in params.items()
            if p.requires_grad and name not in state and not name.startswith("value_heads.")]
    return out


def check_fits(checkpoint: dict, module, where: str) -> None:
    """Refuse a checkpoint whose weights do not fit ``module``'s model: the settings that differ
    when the checkpoint recorded its own, else the first weights that do not fit. ``where``
    names the file and its flag (``--checkpoint runs/x/last.ckpt``). A checkpoint whose weights
    the strategy loads apart (``ModelParallelStrategy`` hands the hook no ``state_dict``) is left
    to the strategy."""
    state = checkpoint.get("state_dict")
    if not isinstance(state, dict):
        return
    bad = misfits(state, dict(module.named_parameters()))
    if not bad:
        return
    differ = differing_settings(checkpoint.get("hyper_parameters"), _plain(dict(module.hparams)))
    detail = ("; ".join(differ[:6]) + ("; ..." if len(differ) > 6 else "")) if differ else \
        f"its weights do not fit the config's model ({'; '.join(bad[:3])})"
    raise UserError(f"{where}: the checkpoint was made with another config: {detail}; pass the --config the "
                    f"checkpoint was trained with (and the same overrides)")


def check_adapter_dir(path: str, key: str) -> None:
    """Refuse a directory that is not a peft adapter (``adapter_config.json`` and
    ``adapter_model.safetensors``, as ``save_adapter`` and the league write them)."""
    missing = [name for name in ("adapter_config.json", "adapter_model.safetensors")
               if not os.path.isfile(os.path.join(path, name))]
    if missing:
        raise UserError(f"{key} {path}: a directory without {' and '.join(missing)}; expected a peft adapter "
                        f"directory (a league's adapters/<id>, or save_adapter's) or a Lightning .ckpt file")


_ADAPTER_TENSORS = ((".lora_A.weight", 1, "in_features"), (".lora_B.weight", 0, "out_features"),
                    (".token_adapter.trainable_tokens_delta", 1, "embedding_dim"))
"""A saved adapter tensor's name ending, the dimension of it that the base module fixes, and
that module's attribute for it."""


def check_adapter_fits(path: str, key: str, model) -> None:
    """Refuse, before anything is played, an adapter directory whose tensors cannot sit on
    ``model``'s base model (an adapter of another config's model: another hidden size, depth or
    architecture), from the shapes in its file's header: nothing is loaded. Another LoRA rank or
    other target modules fit (peft loads an adapter with its own LoRA settings beside the
    learner's). Without it the misfit surfaces when the adapter first plays, as a dump of
    ``size mismatch for ...lora_A...``."""
    if not hasattr(model, "peft_config"):
        return  # served as a checkpoint only with LoRA: refused elsewhere with its key
    from safetensors import safe_open

    file = os.path.join(path, "adapter_model.safetensors")
    try:
        with safe_open(file, "pt") as f:
            shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118 (not a dict)
    except Exception as error:  # truncated, or not a safetensors file
        raise UserError(f"{key} {path}: {file} cannot be read ({_first_line(error)}); expected the adapter "
                        f"save_adapter writes") from error
    modules = dict(model.named_modules())
    for name, shape in shapes.items():
        for ending, dim, attribute in _ADAPTER_TENSORS:
            if not name.endswith(ending):
                continue
            owner = name[: -len(ending)]
            if owner not in modules:
                raise UserError(f"{key} {path}: the adapter does not fit the config's model (its {owner} is not a "
                                f"module of this model); pass the --config it was trained with")
            size = _base_size(modules[owner], attribute)
            if size is not None and shape[dim] != size:
                raise UserError(f"{key} {path}: the adapter does not fit the config's model ({owner}: {attribute} "
                                f"{shape[dim]} in the adapter, {size} here); pass the --config it was trained with")


def check_adapter_opponent(path: str, key: str, model) -> None:
    """An opponent given as ``checkpoint:<adapter dir>``, refused before any game unless it is a
    directory holding a peft adapter that fits ``model``."""
    if not os.path.isdir(path):
        raise UserError(f"{key} checkpoint:{path}: no directory {path!r}; expected checkpoint:<peft adapter directory>")
    check_adapter_dir(path, key)
    check_adapter_fits(path, key, model)


def check_policy_dir(path: str, key: str, model, learners: list[str]) -> None:
    """An adapter directory to load as the policy of a run whose learners are ``learners``: a
    peft adapter, one policy (a run of several learners keeps theirs in its .ckpt), that fits."""
    check_adapter_dir(path, key)
    if len(learners) > 1:
        raise UserError(f"{key} {path}: an adapter directory holds one policy, and model.learners names "
                        f"{len(learners)} ({', '.join(learners)}); pass the run's Lightning .ckpt, which holds "
                        f"every learner's adapter")
    check_adapter_fits(path, key, model)


def _base_size(module, attribute: str) -> int | None:
    """``module``'s ``attribute`` (in_features, ...), or its wrapped base layer's (peft wraps it)."""
    while module is not None:
        if isinstance(getattr(module, attribute, None), int):
            return getattr(module, attribute)
        module = getattr(module, "base_layer", None)
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:200]


def adapter_misfit(path: str, key: str, model, error: Exception) -> UserError:
    """The error for an adapter directory whose weights do not fit ``model``'s adapter: its
    LoRA settings beside the model's."""
    with open(os.path.join(path, "adapter_config.json")) as f:
        theirs = json.load(f)
    ours = model.peft_config["default"].to_dict() if hasattr(model, "peft_config") else {}
    keys = ("r", "lora_alpha", "target_modules", "trainable_token_indices")
    differ = [f"{k}: {theirs.get(k)!r} in the adapter, {_plain(ours.get(k))!r} here" for k in keys
              if _plain(theirs.get(k)) != _plain(ours.get(k))]
    detail = "; ".join(differ) or str(error).strip().splitlines()[-1][:200]
    return UserError(f"{key} {path}: the adapter does not fit the config's model ({detail}); pass the --config "
                     f"it was trained with")
