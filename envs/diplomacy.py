"""Diplomacy (seven powers on the standard map) on the text-game contract, over the ``diplomacy``
package (the DATC-compliant adjudicator behind DipNet): ``pip install diplomacy``.

Seats are the powers in alphabetical order (``player_0`` is AUSTRIA .. ``player_6`` TURKEY).
Orders are simultaneous in the game, sequential here: the env asks for them one decision at a
time and hands a phase's orders to the adjudicator once every power has given its own, so no
power ever sees another's orders of the phase before it is processed.

Two ways to ask for orders (``orders``):

- ``"unit"`` (the default; fits the tiny model): one decision per unit. The view lists the unit's
  legal orders, numbered ``[1] A PAR H  [2] A PAR - BUR ...`` (the hold, the retreat's disband or
  the build's waive first, the rest sorted), and the answer is a number or the order itself in
  brackets (``[2]`` or ``[a par - bur]``). The power's earlier choices of the phase are in its
  view.
- ``"power"`` (fits a real model): one call per power and phase. The view lists every unit's
  legal orders and the answer gives them an order per line (a bullet, a number or brackets
  around an order are allowed; other lines, prose, are not read). An order line that is not a
  legal order of one of its units (or orders a unit twice) is counted in ``invalid_moves``; what
  is left without an order takes its first option (a unit holds, a dislodged one disbands, a
  build is waived). The one listed move is ``[hold]``: no orders at all.

Retreats and adjustments are decisions too: a power with builds chooses them one at a time
(``WAIVE`` ends its builds), one with too many units chooses which to disband.

An invalid answer, by default, orders the decision's first option (a hold, a disband or a waive)
and is counted (``invalid_move="hold"``, as Diplomacy's adjudicators treat an illegal order);
with ``orders="unit"`` the contract's ``forfeit`` / ``retry`` / ``random`` can be asked for
instead.

The game ends with a solo victory or after ``max_years`` game years (the last year's winter
adjustments included). Each power's reward is its share of the supply centres
(``centres / 34``), plus ``win_bonus`` for the power that leads alone with at least
``win_centres`` centres (leaders tied at the top share it). The sum-of-squares score
(``centres^2 / sum of centres^2``) is reported beside it in ``final_scores``. Each power's final
info carries its ``result`` (``win`` for the sole leader the bonus goes to, ``draw`` for leaders
sharing it, ``loss`` for the rest) and its ``scores`` (centres, sum of squares): evaluations and
validation read a win and the mean centres from them, not from the sign of the reward.

A snapshot copies the game through the package's ``to_dict``/``from_dict`` (5 ms after five
game years; a ``deepcopy`` of the same game costs about 0.5 s).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
from typing import Any

import numpy as np

from .base import INVALID_MOVE_POLICIES, GameInfo, TextGameEnv, parse_move

logger = logging.getLogger(__name__)

POWERS = ("AUSTRIA", "ENGLAND", "FRANCE", "GERMANY", "ITALY", "RUSSIA", "TURKEY")
CENTRES = 34
"""Supply centres on the standard map."""
MAX_OPTIONS = 160
"""More legal orders than one unit ever has on the standard map (61 at most in random play)."""
MOVES = tuple(f"[{i}]" for i in range(1, MAX_OPTIONS + 1))
DECISIONS_PER_YEAR = 5 * 34
"""At most two movement phases, two retreat phases and one adjustment phase of 34 units each."""
HOLD_ALL = "[hold]"
"""With ``orders="power"``, the one listed move: no orders, every unit holds (what a bot sends)."""
ORDER_LINE = re.compile(r"^\s*(?:[-*]|\d+[.)])?\s*\[?\s*("
                        r"[AF]\s+[A-Z]{3}(?:/[A-Z]{2})?(?:\s*-\s*[^\]]*|\s+[HSCRDB](?:\s+[^\]]*)?)"
                        r"|WAIVE)\s*\]?\s*$", re.IGNORECASE)
"""A line of a power's answer that is an order (a bullet, a number or brackets around it allowed):
a unit and its site, then a move (``-``) or an order letter (hold, support, convoy,
retreat, disband, build) on its own; other lines (prose, such as "A few thoughts: hold.") are
not read."""
MAX_ORDER_LINE = 200
"""Characters of the longest line read as an order (the longest order is about 30)."""
PHASE_KINDS = {"M": "movement", "R": "retreats", "A": "adjustments"}
SEASONS = {"S": "spring", "F": "fall", "W": "winter"}


def _game_class():
    try:
        from diplomacy import Game
    except ImportError as error:  # an optional dependency
        raise ImportError("diplomacy_v1 needs the diplomacy package: pip install diplomacy") from error
    return Game


@dataclasses.dataclass
class Decision:
    """One order to give: which power, for which unit (or build slot), among which orders."""

    power: str
    subject: str
    """What is ordered: ``A PAR``; ``build 1 of 2``; ``disband 1 of 1``."""
    options: list[str]


def _first_is_default(orders: list[str]) -> list[str]:
    """Hold, disband or waive first (what an invalid answer orders), the rest sorted."""
    default = [o for o in orders if o == "WAIVE" or o.endswith((" H", " D"))]
    return sorted(default) + sorted(o for o in orders if o not in default)


class DiplomacyRules:
    """A game of Diplomacy asked one decision at a time; the adjudicator resolves each phase."""

    def __init__(self, max_years: int, win_centres: int, win_bonus: float, orders: str = "unit") -> None:
        self.game = _game_class()(map_name="standard", rules=["NO_PRESS", "IGNORE_ERRORS", "POWER_CHOICE"])
        self.max_years, self.win_centres, self.win_bonus = max_years, win_centres, win_bonus
        self.orders = orders
        self.last_year = self.year + max_years - 1
        self.chosen: dict[str, list[str]] = {p: [] for p in POWERS}
        self.pending: list[Decision] = []
        self._board_lines: tuple[tuple[str, int], list[str]] | None = None  # see _board
        self._start_phase()

    def __deepcopy__(self, memo: dict) -> DiplomacyRules:
        """The game through ``to_dict``/``from_dict`` (a deepcopy of it costs a hundred times more)."""
        twin = object.__new__(DiplomacyRules)
        for key, value in self.__dict__.items():
            twin.__dict__[key] = copy.deepcopy(value, memo) if key != "game" else type(value).from_dict(value.to_dict())
        return twin

    # ---- the game as the contract reads it -------------------------------------------------
    @property
    def year(self) -> int:
        return int(self.game.get_current_phase()[1:5])

    @property
    def is_terminal(self) -> bool:
        return self.game.is_game_done or self.year > self.last_year

    @property
    def current_player(self) -> int:
        return POWERS.index(self.pending[0].power)

    def legal_moves(self) -> list[str]:
        if not self.pending or self.is_terminal:
            return []
        return [HOLD_ALL] if self.orders == "power" else list(MOVES[: len(self.pending[0].options)])

    def order_of(self, move: str | None) -> str | None:
        """The order a parsed answer names: ``[2]`` or ``[a par - bur]``; None if neither."""
        if move is None or not self.pending:
            return None
        options = self.pending[0].options
        inner = move[1:-1]
        if inner.isascii() and inner.isdecimal() and 1 <= int(inner) <= len(options):  # not "²", "٣"
            return options[int(inner) - 1]
        return next((o for o in options if o.lower() == inner), None)

    def apply(self, move: str) -> None:
        order = self.order_of(move)
        if order is None:
            raise ValueError(f"{move!r} is not one of the {len(self.pending[0].options)} orders offered")
        self._choose(self.pending[0], order)
        if not self.pending:
            self._process()

    def give_orders(self, answer: Any) -> int:
        """``orders="power"``: the power to move gives every order of the phase in one answer, an
        order per line; returns how many of its order lines were not legal orders of its units
        (or ordered a unit twice). Each decision left without an order takes its first option (a
        hold, a disband or a waive), as an invalid one does."""
        power, illegal = self.pending[0].power, 0
        lines = answer.splitlines() if isinstance(answer, str) else []
        illegal += not isinstance(answer, str)
        for line in lines:
            # whitespace runs collapsed first: ORDER_LINE's optional parts around them backtrack
            # polynomially (a line of 400 spaces took 28 s); no order is anywhere near 200 characters
            line = " ".join(line.split())
            found = ORDER_LINE.match(line) if len(line) <= MAX_ORDER_LINE else None
            if found is None:
                continue  # prose around the orders
            order = " ".join(found.group(1).upper().replace("-", " - ").split())  # "A VIE-BUD" too
            decision = next((d for d in self.pending if d.power == power and order in d.options), None)
            if decision is None:
                illegal += 1
                continue
            self._choose(decision, order)
        while self.pending and self.pending[0].power == power:
            self._choose(self.pending[0], self.pending[0].options[0])
        if not self.pending:
            self._process()
        return illegal

    def _choose(self, decision: Decision, order: str) -> None:
        self.pending.remove(decision)
        self.chosen[decision.power].append(order)
        self._after_adjustment(decision, order)

    def centres(self) -> dict[str, int]:
        return {p: len(self.game.get_centers(p)) for p in POWERS}

    def leaders(self) -> list[str]:
        """The powers the win bonus goes to: those tied at the top with at least ``win_centres``."""
        centres = self.centres()
        top = max(centres.values())
        return [p for p in POWERS if centres[p] == top and top >= self.win_centres]

    def results(self) -> dict[str, str]:
        """Each power's result: ``win`` for the sole leader the bonus goes to, ``draw`` for leaders
        that share it, ``loss`` for every other power (and for all when no power reaches
        ``win_centres``: a capped game without a dominant power has no winner)."""
        leaders = self.leaders()
        return {p: ("win" if len(leaders) == 1 else "draw") if p in leaders else "loss" for p in POWERS}

    def scores(self) -> dict[str, dict[str, float]]:
        """Each power's centre share plus its part of the win bonus, and the sum-of-squares score."""
        centres = self.centres()
        leaders = self.leaders()
        squares = sum(c * c for c in centres.values()) or 1
        return {"reward": {p: centres[p] / CENTRES + (self.win_bonus / len(leaders) if p in leaders else 0.0)
                           for p in POWERS},
                "sum_of_squares": {p: centres[p] ** 2 / squares for p in POWERS},
                "centres": {p: float(centres[p]) for p in POWERS}}

    def returns(self) -> list[float]:
        reward = self.scores()["reward"]
        return [reward[p] for p in POWERS]

    # ---- phases ------------------------------------------------------------------------------
    def _start_phase(self) -> None:
        """The decisions of the phase now due; a phase that asks nothing is processed at once."""
        while not self.is_terminal:
            self.chosen = {p: [] for p in POWERS}
            possible = self.game.get_all_possible_orders()  # every location's orders, once a phase
            self.pending = [d for p in POWERS for d in self._decisions(p, possible)]
            if self.pending:
                return
            self.game.process()
        self.pending = []

    def _decisions(self, power: str, possible: dict[str, list[str]]) -> list[Decision]:
        locations = [loc for loc in self.game.get_orderable_locations(power) if possible.get(loc)]
        if self.game.phase_type != "A":
            units = {unit.split()[1][:3]: unit for unit in self._units_to_order(power)}
            return [Decision(power, units.get(loc[:3], loc), _first_is_default(possible[loc])) for loc in locations]
        owed = len(self.game.get_centers(power)) - len(self.game.get_units(power))
        if owed > 0:  # builds: one decision per build, among every site's builds and the waive
            orders = sorted({o for loc in locations for o in possible[loc]} | {"WAIVE"})
            return [Decision(power, f"build {i + 1} of {owed}", _first_is_default(orders)) for i in range(owed)]
        if owed < 0:  # disbands: one decision per unit to remove, among every unit's disband
            orders = sorted({o for loc in locations for o in possible[loc] if o.endswith(" D")})
            return [Decision(power, f"disband {i + 1} of {-owed}", orders) for i in range(-owed)]
        return []

    def _units_to_order(self, power: str) -> list[str]:
        if self.game.phase_type == "R":
            return [unit.lstrip("*") for unit in self.game.get_power(power).retreats]
        return list(self.game.get_units(power))

    def _after_adjustment(self, decision: Decision, order: str) -> None:
        """A build or disband chosen takes its site or unit off the power's later choices; a
        waive ends the power's builds."""
        if self.game.phase_type != "A":
            return
        later = [d for d in self.pending if d.power == decision.power]
        if order == "WAIVE":
            self.pending = [d for d in self.pending if d not in later]
            return
        place = order.split()[1][:3]
        for d in later:
            d.options = [o for o in d.options if o == "WAIVE" or o.split()[1][:3] != place]

    def _process(self) -> None:
        for power in POWERS:
            orders = [o for o in self.chosen[power] if o != "WAIVE"]
            if orders or self.game.phase_type == "A":
                self.game.set_orders(power, orders)
        self.game.process()
        self._start_phase()

    # ---- what a power sees ---------------------------------------------------------------------
    def view(self, power: str) -> str:
        phase = self.game.get_current_phase()
        lines = [f"Diplomacy, standard map, {self.max_years} year(s) from 1901: the game ends after "
                 f"{self.last_year} (or when a power holds 18 centres). You are {power}."]
        if not self.is_terminal:
            lines.append(f"Phase {phase}: {SEASONS[phase[0]]} {phase[1:5]}, {PHASE_KINDS[phase[-1]]}.")
        lines.extend(self._board())
        if self.is_terminal:
            scores = self.scores()
            lines.append(f"Final: you hold {int(scores['centres'][power])} supply centre(s); sum-of-squares score "
                         f"{scores['sum_of_squares'][power]:.3f}.")
        elif self.chosen.get(power):
            lines.append("Your orders so far this phase: " + ", ".join(self.chosen[power]))
        if self.pending and self.pending[0].power == power and not self.is_terminal:
            lines.extend(self._asked(power))
        return "\n".join(lines)

    def _board(self) -> list[str]:
        """The lines every power sees alike until the phase is processed: supply centres, units and
        the last phase's orders and results. Built once a phase (keyed by the phase and the length
        of the history, so a copy or a restored game cannot read another phase's), since the
        package's phase history costs about 2 ms a call and a phase is viewed once per decision."""
        key = (self.game.get_current_phase(), len(self.game.state_history))
        cached = self._board_lines
        if cached is None or cached[0] != key:
            lines = ["Supply centres: " + "; ".join(
                f"{p} {len(self.game.get_centers(p))} ({' '.join(sorted(self.game.get_centers(p)))})" for p in POWERS),
                "Units: " + "; ".join(f"{p}: {', '.join(sorted(self.game.get_units(p))) or '-'}" for p in POWERS),
                *self._last_phase()]
            cached = self._board_lines = (key, lines)
        return cached[1]

    def _asked(self, power: str) -> list[str]:
        """What the power is asked now: one unit's numbered orders, or (``orders="power"``) every
        decision of its phase with its legal orders, to answer an order per line."""
        if self.orders == "unit":
            decision = self.pending[0]
            listed = "  ".join(f"[{i}] {o}" for i, o in enumerate(decision.options, 1))
            return [f"Order for {decision.subject}: {listed}"]
        mine = [d for d in self.pending if d.power == power]
        return ["Give your orders, one per line, from the legal orders below (a unit without an order "
                "holds; an order not listed holds and is counted):",
                *(f"{d.subject}: {' | '.join(d.options)}" for d in mine)]

    def _last_phase(self) -> list[str]:
        history = self.game.get_phase_history()
        if not history:
            return []
        last = history[-1]
        results = {unit: ",".join(str(r) for r in found if str(r)) for unit, found in last.results.items()}
        results = {unit: text for unit, text in results.items() if text}
        orders = []
        for power in POWERS:
            given = last.orders.get(power) or []
            shown = [f"{o} ({results[' '.join(o.split()[:2])]})" if " ".join(o.split()[:2]) in results else o
                     for o in given]
            orders.append(f"{power}: {', '.join(shown) or '-'}")
        return [f"Last phase {last.name}: " + "; ".join(orders)]


class DiplomacyEnv(TextGameEnv):
    """Seven-power Diplomacy; see the module docstring."""

    game_info = GameInfo(
        name="diplomacy_v1",
        num_players=len(POWERS),
        zero_sum=False,
        reward_range=(0.0, 2.0),
        max_turns=2 * DECISIONS_PER_YEAR,
        moves=MOVES,
    )
    observation_max_length = 8192

    def __init__(self, render_mode: str | None = None, invalid_move: str = "hold", invalid_move_reward: float = -1.0,
                 max_retries: int = 2, *, max_years: int = 2, win_centres: int = 18, win_bonus: float = 1.0,
                 orders: str = "unit", list_legal_moves: bool | None = None) -> None:
        _check_settings(invalid_move, orders, max_years, win_centres, win_bonus)
        _game_class()  # the package is there, or the error says how to get it
        self.game_info = dataclasses.replace(type(self).game_info, max_turns=max_years * DECISIONS_PER_YEAR,
                                             reward_range=(0.0, 1.0 + float(win_bonus)),
                                             moves=MOVES if orders == "unit" else (HOLD_ALL,))
        hold = invalid_move == "hold"
        listed = orders == "unit" if list_legal_moves is None else list_legal_moves  # a power's answer is free text
        super().__init__(render_mode, "forfeit" if hold else invalid_move, invalid_move_reward, max_retries,
                         list_legal_moves=listed)
        self.invalid_move, self.orders = invalid_move, orders
        self.max_years, self.win_centres, self.win_bonus = max_years, win_centres, float(win_bonus)
        self.final_scores: dict[str, dict[str, float]] = {}

    def _new_game(self) -> DiplomacyRules:
        self.final_scores = {}
        return DiplomacyRules(self.max_years, self.win_centres, self.win_bonus, self.orders)  # the game has no chance

    def is_legal(self, move: str | None, legal: list[str]) -> bool:
        return self.game.order_of(move) is not None

    def _on_invalid(self, agent: str, action: Any, move: str | None, legal: list[str]) -> str | None:
        if self.invalid_move != "hold":
            return super()._on_invalid(agent, action, move, legal)
        self.invalid_moves[agent] += 1
        logger.debug("diplomacy_v1: invalid order by %s (parsed %r); it holds", agent, move)
        return legal[0]  # the decision's first option: a hold, a disband or a waive

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.orders == "unit" or self.terminations[agent] or self.truncations[agent]:
            super().step(action)
        else:  # a power's orders, an order per line: illegal lines hold and are counted, never forfeit
            self._cumulative_rewards[agent] = 0.0
            illegal = self.game.give_orders(action)
            self.invalid_moves[agent] += illegal
            self.infos[agent] = {**self.infos[agent], "invalid_move": illegal > 0, "parsed_move": parse_move(action)}
            self._finish_turn(agent)

    def _end_game(self) -> None:
        """The game's verdicts in each power's final info, which the episode records: ``result``
        (the win is the bonus's, see ``DiplomacyRules.results``) and ``scores`` (its centres and
        sum-of-squares score, which evaluations and validation report beside the reward)."""
        super()._end_game()
        if self.forfeited_by is None:
            self.final_scores = self.game.scores()
            results = self.game.results()
            for agent in self.agents:
                power = POWERS[self._seat[agent]]
                scores = {key: self.final_scores[key][power] for key in ("centres", "sum_of_squares")}
                self.infos[agent] = {**self.infos[agent], "result": results[power], "scores": scores}

    def _view(self, seat: int) -> str:
        return self.game.view(POWERS[seat])

    def _render_text(self) -> str:
        centres, pending = self.game.centres(), self.game.pending
        text = f"{self.game.game.get_current_phase()}: " + ", ".join(f"{p} {centres[p]}" for p in POWERS)
        return text + (f"; to order: {pending[0].power} {pending[0].subject}" if pending else "")


def _check_settings(invalid_move: str, orders: str, max_years: int, win_centres: int, win_bonus: float) -> None:
    """Refuse a setting the game cannot play, naming the key and what it takes."""
    if invalid_move not in ("hold", *INVALID_MOVE_POLICIES):
        raise ValueError(f"invalid_move: expected one of {('hold', *INVALID_MOVE_POLICIES)}, got {invalid_move!r}")
    if orders not in ("unit", "power"):
        raise ValueError(f"orders: expected 'unit' (a decision per unit) or 'power' (a call per power), "
                         f"got {orders!r}")
    if orders == "power" and invalid_move != "hold":
        raise ValueError(f"invalid_move: with orders 'power' an illegal order line holds; expected 'hold', "
                         f"got {invalid_move!r}")
    if isinstance(max_years, bool) or not isinstance(max_years, int) or max_years < 1:
        raise ValueError(f"max_years: expected an int >= 1, got {max_years!r}")
    if isinstance(win_centres, bool) or not isinstance(win_centres, int) or not 1 <= win_centres <= CENTRES:
        raise ValueError(f"win_centres: expected an int in [1, {CENTRES}], got {win_centres!r}")
    if not isinstance(win_bonus, (int, float)) or isinstance(win_bonus, bool) or win_bonus < 0:
        raise ValueError(f"win_bonus: expected a number >= 0, got {win_bonus!r}")


class PlannerBot:
    """A yardstick better than random for ``diplomacy_v1``: each unit heads for the nearest supply
    centre its power does not own and holds what it has. It reads its power, the centres and the
    offered orders from its observation and ranks the orders:

    - a unit standing on a centre its power does not own holds (it takes the centre in the fall);
    - else a move (or retreat) into such a centre, a neutral one first;
    - else the move that brings it nearest to one (steps on the map, for its unit type);
    - else it holds; supports and convoys are never chosen.

    Builds are taken (armies before fleets), never waived; a disband removes the unit farthest
    from any centre to take. Ties are broken by the seeded random stream. Registered as
    ``bot:diplomacy_planner``; on another game's observation it raises ValueError."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self._map = None
        self._walks: dict[tuple[str, str], int] = {}

    def act(self, observation: str, legal_actions: list[str]) -> str:
        if not legal_actions:
            raise ValueError("PlannerBot.act needs at least one legal action, got an empty list")
        power, owners, decisions, numbered = _read_decisions(observation)
        targets = {sc for sc in self.map.scs if owners.get(sc) != power}
        self._walks = {}  # this decision's walks: every option asks for its unit's

        def best(options: list[str]) -> int:
            scores = [self._score(order, targets, owners) + float(self.rng.random()) * 1e-3 for order in options]
            return max(range(len(options)), key=scores.__getitem__)

        if numbered:  # orders="unit": the number of the best option
            return f"[{1 + best(decisions[0])}]"
        return _per_line(decisions, lambda free: free[best(free)])

    __call__ = act

    @property
    def map(self):
        if self._map is None:
            self._map = _game_class()().map
        return self._map

    def _score(self, order: str, targets: set[str], owners: dict[str, str]) -> float:
        words = order.split()
        if order == "WAIVE":
            return 0.0
        kind, here = words[0], words[1]
        if words[-1] == "B":
            return 2.0 if kind == "A" else 1.5
        if words[-1] == "D":
            return float(self._steps(kind, here, targets)) if len(words) == 3 else -1.0
        if words[2] == "H":
            return 100.0 if here[:3] in targets else 1.0
        if words[2] in ("-", "R"):
            there = words[3]
            if there[:3] in targets:
                return 50.0 + (1.0 if there[:3] not in owners else 0.0)  # a neutral centre first
            nearer = self._steps(kind, there, targets)
            return 10.0 - nearer if nearer < self._steps(kind, here, targets) else 0.5
        return 0.0  # a support or a convoy

    def _steps(self, kind: str, start: str, targets: set[str]) -> int:
        """Moves a unit of ``kind`` needs from ``start`` to the nearest of ``targets`` (99 if none
        within 30): a breadth-first walk over the map's adjacencies for that unit type, once per
        decision and start."""
        if (kind, start) not in self._walks:
            self._walks[kind, start] = self._walk(kind, start, targets)
        return self._walks[kind, start]

    def _walk(self, kind: str, start: str, targets: set[str]) -> int:
        seen, frontier = {start}, [start]
        for steps in range(30):
            if any(loc[:3] in targets for loc in frontier):
                return steps
            reached = []
            for loc in frontier:
                for step in (n.upper() for n in self.map.abut_list(loc, incl_no_coast=True)):
                    if step not in seen and self.map.abuts(kind, loc, "-", step):
                        seen.add(step)
                        reached.append(step)
            frontier = reached
        return 99


class DiplomacyRandomBot:
    """Uniformly random legal orders for ``diplomacy_v1`` in either order mode (the generic
    RandomBot, given a power's one listed move ``[hold]``, would only hold): with ``orders="unit"``
    a random listed option, with ``orders="power"`` a random legal order for each of the power's
    units (builds on distinct sites), an order per line. Registered as ``bot:diplomacy_random``."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, observation: str, legal_actions: list[str]) -> str:
        if not legal_actions:
            raise ValueError("DiplomacyRandomBot.act needs at least one legal action, got an empty list")
        _, _, decisions, numbered = _read_decisions(observation)
        if numbered:
            return legal_actions[int(self.rng.integers(len(legal_actions)))]
        return _per_line(decisions, lambda free: free[int(self.rng.integers(len(free)))])

    __call__ = act


def _per_line(decisions: list[list[str]], pick) -> str:
    """A power's answer with ``orders="power"``: ``pick(free options)`` for each decision in turn,
    an order per line, skipping a decision its earlier orders left nothing for (``_not_taken``)."""
    chosen: list[str] = []
    for options in decisions:
        if free := _not_taken(options, chosen):
            chosen.append(pick(free))
    return "\n".join(chosen)


def _not_taken(options: list[str], chosen: list[str]) -> list[str]:
    """``options`` less those a power's earlier orders of the phase rule out: a build's or a
    disband's site already used, and every build once it waived (a waive ends its builds).
    Empty when nothing is left: the decision then gets no line (and takes its first option)."""
    if "WAIVE" in chosen:
        return []
    used = {order.split()[1][:3] for order in chosen if order.split()[-1] in ("B", "D")}
    return [o for o in options if o == "WAIVE" or o.split()[-1] not in ("B", "D") or o.split()[1][:3] not in used]


def _read_decisions(observation: str) -> tuple[str, dict[str, str], list[list[str]], bool]:
    """(the power, each owned centre's owner, the options of each decision it is asked, whether
    they are numbered) from a diplomacy_v1 view: one numbered decision with ``orders="unit"``,
    every decision of the power's phase with ``orders="power"``."""
    power = re.search(r"You are ([A-Z]+)\.", observation)
    centres = re.search(r"^Supply centres: (.*)$", observation, re.M)
    offered = re.search(r"^Order for [^:]+: (.*)$", observation, re.M)
    asked = observation.split("\nGive your orders, one per line", 1)
    if power is None or centres is None or (offered is None and len(asked) == 1):
        raise ValueError(f"expected a diplomacy_v1 observation with an order to give, got {observation[:120]!r}")
    owners = {sc: owner for owner, held in re.findall(r"([A-Z]+) \d+ \(([A-Z ]*)\)", centres.group(1))
              for sc in held.split()}
    if offered is not None:
        options = [o.strip() for o in re.split(r"\s*\[\d+\]\s*", offered.group(1)) if o.strip()]
        return power.group(1), owners, [options], True
    lines = asked[1].splitlines()[1:]  # after the instruction: "<unit or build>: order | order ..."
    decisions = [[o.strip() for o in line.split(": ", 1)[1].split(" | ")] for line in lines if ": " in line]
    return power.group(1), owners, decisions, False


__all__ = ["DiplomacyEnv", "DiplomacyRandomBot", "DiplomacyRules", "PlannerBot", "POWERS"]
