"""The learners' adapters as directories a serving engine loads (vLLM in-process, a fleet of
servers), written from the weights the trainer sends.

An engine that holds its own copy of the model takes a learner's new weights as a LoRA adapter
directory (``adapter_config.json`` + ``adapter_model.safetensors``, peft's layout, which vLLM
and ``PeftModel.from_pretrained`` load). Every update is written under a name of its own: an
engine serves stale weights, from its prefix cache, under a name it has seen (vLLM #42125,
#48352), and a league may reset an exploiter within one optimizer step, so the version alone is
not enough. The engine-side loading (and its retries) stays the backend's: this only writes.
"""

from __future__ import annotations

import copy
import os
import shutil

import torch

from sp_lightning.learners import adapter_of, learner_names, trainable_state
from sp_lightning.rollout.base import WeightUpdate


class AdapterFiles:
    """Adapter directories of the learners of ``model`` under ``root``: the adapters' configs and
    shapes are read from ``model`` when this is made (the model itself is not kept), and each
    :meth:`write` of a :class:`WeightUpdate` makes a new directory per learner."""

    def __init__(self, model, root: str):
        self.root = root
        self.learners = learner_names(model)  # [] for a model without adapter
        self.configs = {name: copy.deepcopy(model.peft_config[adapter_of(name)]) for name in self.learners}
        first = self.learners[0] if self.learners else None
        self._zeros = ({key: torch.zeros(t.shape, dtype=t.dtype) for key, t in trainable_state(model, first).items()}
                       if first is not None else {})
        self.current: dict[str, tuple[str, str]] = {}
        """Learner -> (adapter name, directory) of the newest weights written."""
        self._written = 0

    @property
    def has_adapter(self) -> bool:
        return bool(self.learners)

    def write(self, update: WeightUpdate, tag: str = "") -> list[tuple[str, str]]:
        """Each learner's weights of ``update`` as a new directory, now its current one; returns
        the (name, directory) pairs they replaced, for the backend to unload and delete once the
        new ones serve."""
        replaced = []
        for learner, tensors in update.tensors.items():
            if learner not in self.configs:
                raise ValueError(f"load_weights: learner {learner!r} has no adapter here (known: {self.learners})")
            self._written += 1
            label = f"learner-{learner}" if learner else "learner"
            name = f"{label}-v{update.version}-{self._written}{'-' + tag if tag else ''}"
            path = os.path.join(self.root, name)
            write_adapter(path, self.configs[learner], tensors)
            if learner in self.current:
                replaced.append(self.current[learner])
            self.current[learner] = (name, path)
        return replaced

    def discard(self, replaced: list[tuple[str, str]], serving: set[str]) -> None:
        """Delete the directories ``replaced`` that the engine does not serve: weights written
        and replaced before any generate loaded them (two sends in a row, a reset exploiter).
        The ones in ``serving`` are the backend's to delete once their successor serves."""
        for _, path in replaced:
            if path not in serving:
                shutil.rmtree(path, ignore_errors=True)

    def write_zero(self, path: str) -> str:
        """The first learner's adapter layout with every weight zero: served, it is the base model
        exactly (LoRA adds B @ A = 0)."""
        return write_adapter(path, self.configs[self.learners[0]], self._zeros)


def write_adapter(path: str, config, tensors: dict[str, torch.Tensor]) -> str:
    """A peft adapter directory at ``path`` (replaced if it exists): ``config`` (a peft config)
    and ``tensors`` named as peft saves them."""
    from safetensors.torch import save_file

    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    config.save_pretrained(path)
    save_file({key: t.detach().to("cpu").contiguous() for key, t in tensors.items()},
              os.path.join(path, "adapter_model.safetensors"))
    return path
