"""Rollout protocols beyond two-player games, each an episode source for ``data.episodes``."""
