"""FSDP for a policy too large for one device: the frozen base sharded, the LoRA adapter whole.

Lightning's ``ModelParallelStrategy`` starts the processes and a device mesh and calls the
module's ``configure_model``, where the model is sharded with PyTorch's FSDP2 (``fully_shard``):
one unit per decoder layer and one for the rest. Only the frozen base is sharded: every
trainable parameter (the adapter, trainable token rows) is left out of the shards
(``ignored_params``) and stays a plain tensor, whole on every rank. What follows from that:

- the gradients of the trained weights are summed over the ranks once per optimizer step by the
  same collective as under DDP (``distributed.sum_gradients``), and the optimizer, clipping, the
  adapter checkpoints the league saves and the weights the rollout backend receives are the
  one-process ones (``PeftModel.from_pretrained`` and vLLM load them as they are);
- every forward and backward pass of the sharded model is a collective (each layer's weights are
  gathered from every rank), so every rank must run the same number of them in the same order:
  the training step agrees the number of micro-batches over the ranks and a rank with fewer runs
  filler passes (``SelfPlayModule._filler_pass``), and generation cannot run on the sharded
  model at all, since each rank's games ask for different numbers of forward passes. Rollouts
  come from the backend's own copy of the whole model (every backend keeps one: the Hugging Face
  worker's is taken when the DataModule sets up, before the model is sharded; vLLM in-process or
  servers load theirs).

Lightning's ``FSDPStrategy`` (FSDP1) refuses a CPU accelerator; ``ModelParallelStrategy`` runs on
gloo, which is how the tests run it on CPU processes.
"""

from __future__ import annotations

import torch

STRATEGY_KEY = "trainer.strategy"


def shards_model(strategy) -> bool:
    """Whether ``strategy`` (a Lightning strategy, or None) asks the module to shard its model."""
    try:
        from lightning.pytorch.strategies import ModelParallelStrategy
    except ImportError:  # pragma: no cover - Lightning without FSDP2
        return False
    return isinstance(strategy, ModelParallelStrategy)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks FSDP shards one by one: the modules of the classes the Hugging Face model
    names as never to be split across devices (``_no_split_modules``: its decoder layers)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or ())
    layers = [m for m in base.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"{STRATEGY_KEY}: cannot shard {type(base).__name__}: it names no decoder layer class "
                         f"(_no_split_modules); use a Hugging Face causal LM, or a data-parallel strategy (ddp)")
    return layers


def shard_frozen_base(model: torch.nn.Module, mesh) -> None:
    """Shard ``model``'s frozen weights over the 1-D device ``mesh`` in place (FSDP2), one unit
    per decoder layer and one for the rest; trainable parameters stay whole and replicated."""
    from torch.distributed.fsdp import fully_shard

    trained = {p for p in model.parameters() if p.requires_grad}
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, ignored_params=trained)
    fully_shard(model, mesh=mesh, ignored_params=trained)


def data_parallel_mesh(strategy):
    """The strategy's data-parallel mesh; tensor parallelism is refused by name (the policy
    would need a plan for splitting each layer, which this module does not write)."""
    mesh = strategy.device_mesh
    if mesh["tensor_parallel"].size() != 1:
        raise ValueError(f"{STRATEGY_KEY}.init_args.tensor_parallel_size: expected 1 (the frozen base is sharded "
                         f"by FSDP over data_parallel_size ranks; tensor parallelism is not supported), got "
                         f"{mesh['tensor_parallel'].size()}")
    return mesh["data_parallel"]
