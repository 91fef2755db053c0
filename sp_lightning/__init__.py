"""sp_lightning: self-play reinforcement learning for language models on PyTorch Lightning."""

__version__ = "0.1.0"
