"""A cross-play run's outputs: JSON, two PNGs (payoff heatmap, ratings with intervals) and
TensorBoard (the same figures, one scalar per agent and rating, the tables as text).

Plots need matplotlib (``pip install "sp-lightning[eval]"``); without it the JSON is still
written and the error says what to install. Figures are built on ``matplotlib.figure.Figure``
directly, not pyplot, so no global figure state or GUI backend is involved.
"""

from __future__ import annotations

import json
import os

from sp_lightning.evaluation.crossplay import CrossPlay
from sp_lightning.evaluation.crossplay_ratings import CrossPlayRatings


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError as e:  # pragma: no cover - matplotlib is in the eval and test extras
        raise ImportError('cross-play plots need matplotlib: pip install "sp-lightning[eval]"') from e
    return Figure


def heatmap_figure(table: CrossPlay):
    """The row agent's mean payoff against each column agent, annotated."""
    Figure = _figure_class()
    values = table.matrix("payoff_mean")
    n = len(table.labels)
    size = max(4.0, 0.55 * n + 2.0)
    fig = Figure(figsize=(size + 1.0, size))
    ax = fig.add_subplot()
    bound = max(1e-9, max(abs(v) for row in values for v in row))  # a colour scale centred on 0
    image = ax.imshow(values, cmap="RdBu", vmin=-bound, vmax=bound)
    ax.set_xticks(range(n), table.labels, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(n), table.labels, fontsize=8)
    ax.set_xlabel("column: opponent")
    ax.set_ylabel("row: agent")
    for r, row in enumerate(values):
        for c, v in enumerate(row):
            ax.text(c, r, f"{v:+.2f}", ha="center", va="center", fontsize=6)
    fig.colorbar(image, ax=ax, label="payoff_mean")
    ax.set_title(f"cross-play: row's payoff_mean (widest 95% CI ±{table.interval_halfwidth():.2f})", fontsize=9)
    fig.tight_layout()
    return fig


def ratings_figure(ratings: CrossPlayRatings):
    """Bradley-Terry and Elo of each agent (strongest first) with 95% bootstrap intervals."""
    Figure = _figure_class()
    order = sorted(range(len(ratings.labels)), key=lambda i: ratings.bradley_terry[i])
    n = len(order)
    fig = Figure(figsize=(8.0, max(3.0, 0.35 * n + 1.5)))
    ax = fig.add_subplot()
    height = 0.38
    for offset, name, values, cis, colour in (
        (-height / 2, "Bradley-Terry", ratings.bradley_terry, ratings.bradley_terry_ci, "tab:blue"),
        (height / 2, "Elo (sequential)", ratings.elo, ratings.elo_ci, "tab:orange"),
    ):
        ys = [k + offset for k in range(n)]
        xs = [values[i] for i in order]
        err = [[values[i] - cis[i][0] for i in order], [cis[i][1] - values[i] for i in order]]
        ax.barh(ys, xs, height=height, xerr=err, color=colour, alpha=0.8, capsize=2, label=name)
    ax.set_yticks(range(n), [ratings.labels[i] for i in order], fontsize=8)
    ax.axvline(0.0, color="black", linewidth=0.6)
    ax.set_xlabel("rating (Elo scale, mean 0), 95% bootstrap interval")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"cross-play ratings: {ratings.games} games, {ratings.resamples} bootstrap resamples", fontsize=9)
    fig.tight_layout()
    return fig


def write_report(table: CrossPlay, ratings: CrossPlayRatings, out_dir: str, meta: dict | None = None) -> dict[str, str]:
    """``crossplay.json``, ``crossplay_heatmap.png``, ``crossplay_ratings.png`` and an event file
    under ``out_dir/tb``; returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {"json": os.path.join(out_dir, "crossplay.json")}
    report = {
        **(meta or {}),
        "labels": table.labels,
        "payoff_matrix": table.matrix("payoff_mean"),
        "win_rate_matrix": table.matrix("win_rate"),
        "games_matrix": table.matrix("games"),
        "ratings": ratings.as_dict(),
    }
    with open(paths["json"], "w") as f:
        json.dump(report, f, indent=2)
    heatmap, bars = heatmap_figure(table), ratings_figure(ratings)
    paths["heatmap"] = os.path.join(out_dir, "crossplay_heatmap.png")
    paths["ratings"] = os.path.join(out_dir, "crossplay_ratings.png")
    heatmap.savefig(paths["heatmap"], dpi=120)
    bars.savefig(paths["ratings"], dpi=120)
    from torch.utils.tensorboard import SummaryWriter

    paths["tensorboard"] = os.path.join(out_dir, "tb")
    with SummaryWriter(paths["tensorboard"]) as writer:
        writer.add_figure("crossplay/payoff_heatmap", heatmap, close=False)
        writer.add_figure("crossplay/ratings", bars, close=False)
        for label, bt, elo in zip(ratings.labels, ratings.bradley_terry, ratings.elo):
            writer.add_scalar(f"crossplay/bradley_terry/{label}", bt, 0)
            writer.add_scalar(f"crossplay/elo/{label}", elo, 0)
        writer.add_text("crossplay/ratings", "```\n" + ratings.table() + "\n```", 0)
        writer.add_text("crossplay/payoff_matrix", "```\n" + table.table() + "\n```", 0)
    return paths
