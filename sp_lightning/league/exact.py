"""Exact exploitability and exact best responses in the league, for every game of the run that
has them.

Kuhn Poker (OpenSpiel) and Tic-Tac-Toe (expectimax over its boards) have an exact
exploitability computation (``sp_lightning.evaluation.strategy.EXPLOITABILITY``), which also
finds the best response to the policy it reads. The league logs the one every
``exploitability_every`` steps and adds the other as an opponent every ``best_response_every``
steps, in each game of the run that has them; the games without are skipped. A setting that
asks for them where no game of the run has them is refused when training starts, naming its key:
it would silently do nothing.
"""

from __future__ import annotations

from sp_lightning.evaluation.exploitability import ExploitabilityResult
from sp_lightning.evaluation.strategy import (
    EXPLOITABILITY, MIXTURE_EXPLOITABILITY, model_action_probs, not_covered, policy_exploitability,
)
from sp_lightning.games import GameSettings
from sp_lightning.league import best_responses
from sp_lightning.league.metrics import per_game
from sp_lightning.league.settings import LeagueSettings
from sp_lightning.types import PolicyKind, PolicyRef


def check_games(settings: LeagueSettings, games: list[GameSettings]) -> None:
    """Refuse ``best_response_every`` / ``exploitability_every`` when no game of the run has
    what it asks for; the message names the key, the games and those that have it."""
    names = [game.name for game in games]
    wanted = (("best_response_every", settings.best_response_every, best_responses.OBSERVATION_KEYS, "best response"),
              ("exploitability_every", settings.exploitability_every, EXPLOITABILITY, "exploitability"))
    limits = [(game.name, not_covered(game)) for game in games]  # why a game's settings have none
    for key, every, known, what in wanted:
        if every and not any(name in known and limit is None for name, limit in limits):
            games_phrase = f"the game {names[0]!r} has" if len(names) == 1 else f"none of the games {names} has"
            settings_phrase = "".join(f" ({name} with {limit})" for name, limit in limits if name in known and limit)
            raise ValueError(f"data.league.{key}: {games_phrase} no exact {what}{settings_phrase}; "
                             f"expected one of {sorted(known)}, or 0")


def learner_results(worker, games: list[GameSettings],
                    learner: PolicyRef | None) -> list[tuple[GameSettings, ExploitabilityResult]]:
    """The learner's exact exploitability (with its best response) in each game that has one,
    in the games' order (a game name met twice is computed once: its figures share one name)."""
    results, seen = [], set()
    for game in games:
        if game.name in seen:
            continue
        seen.add(game.name)
        result = policy_exploitability(worker, game, learner)
        if result is not None:
            results.append((game, result))
    return results


def exploitability_metrics(worker, results: list[tuple[GameSettings, ExploitabilityResult]], checkpoints: list[str],
                           several: bool) -> dict[str, float]:
    """Per game: the learner's exploitability and legal mass and, where the game has the
    computation and the league has checkpoints, the league mixture's exploitability."""
    metrics = {}
    for game, result in results:
        prefix = per_game("league/exploitability", game.name, several)
        metrics[f"{prefix}/learner"] = result.exploitability
        metrics[f"{prefix}/learner_legal_mass"] = result.legal_mass_mean
        if checkpoints and game.name in MIXTURE_EXPLOITABILITY:
            members = [model_action_probs(worker, PolicyRef(PolicyKind.CHECKPOINT, agent), game.prompt_template)
                       for agent in checkpoints]
            metrics[f"{prefix}/mixture"] = MIXTURE_EXPLOITABILITY[game.name](members).exploitability
    return metrics
