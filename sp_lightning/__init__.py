"""sp_lightning: self-play reinforcement learning for language models on PyTorch Lightning."""

from sp_lightning.threads import set_wait_policy

set_wait_policy()  # before anything loads torch's OpenMP runtime; see sp_lightning.threads

__version__ = "0.1.0"
