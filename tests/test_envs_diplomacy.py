"""Diplomacy on the text-game contract (``envs/diplomacy.py``): PettingZoo's API test, the
adjudicator's phases asked one unit at a time, each power's own view, invalid orders as holds,
scores with the win bonus, cheap snapshots."""

import pytest

pytest.importorskip("diplomacy")

from pettingzoo.test import api_test  # noqa: E402

from envs import BOTS, RandomBot  # noqa: E402
from envs.diplomacy import CENTRES, POWERS, DiplomacyEnv, DiplomacyRules  # noqa: E402


def _play(env, seed, bots=None, until=None):
    """Random orders from ``reset(seed=seed)`` to the end (or until ``until(env)``); returns
    every phase the adjudicator was asked to order, in turn."""
    env.reset(seed=seed)
    bots = bots or {a: RandomBot(seed * 10 + i) for i, a in enumerate(env.possible_agents)}
    phases = []
    for agent in env.agent_iter():
        observation, _, terminated, truncated, info = env.last()
        if terminated or truncated:
            env.step(None)
            continue
        if until is not None and until(env):
            return phases
        phase = env.game.game.get_current_phase()
        if not phases or phases[-1] != phase:
            phases.append(phase)
        env.step(bots[agent].act(observation["text"], info["legal_actions"]))
    return phases


def test_a_view_built_once_a_phase_is_the_view_built_afresh_in_every_state_and_every_copy():
    """``DiplomacyRules`` keeps the lines every power sees alike (centres, units, the last phase)
    for the phase; at every decision of a game through retreats and builds, each power's view
    equals one built with nothing kept, and a copy taken mid-phase and played on leaves the
    original's view as it was."""
    import copy

    def afresh(rules, power):
        rules._board_lines = None
        return rules.view(power)

    env = DiplomacyEnv(max_years=2)
    copied = None
    for agent in _play_iter(env, seed=3):
        rules = env.game
        views = {p: rules.view(p) for p in POWERS}
        assert views == {p: afresh(rules, p) for p in POWERS}
        if copied is None and rules.game.get_current_phase() == "F1901M":
            copied, twin = views, copy.deepcopy(rules)
            while twin.game.get_current_phase() == "F1901M":
                twin.apply(twin.legal_moves()[-1])
            assert twin.view(POWERS[0]) != copied[POWERS[0]]
            assert {p: rules.view(p) for p in POWERS} == copied
    assert copied is not None


def _play_iter(env, seed):
    """Each agent in turn over a game of random orders, before its move is made."""
    env.reset(seed=seed)
    bots = {a: RandomBot(seed * 10 + i) for i, a in enumerate(env.possible_agents)}
    for agent in env.agent_iter():
        observation, _, terminated, truncated, info = env.last()
        if terminated or truncated:
            env.step(None)
            continue
        yield agent
        env.step(bots[agent].act(observation["text"], info["legal_actions"]))


def test_the_pettingzoo_api_test_passes():
    api_test(DiplomacyEnv(max_years=1), num_cycles=60)


def test_seven_powers_play_movement_retreats_and_adjustments_to_the_year_cap():
    env = DiplomacyEnv(max_years=3)
    seen = set()
    for seed in range(4):
        phases = _play(env, seed)
        seen |= {phase[-1] for phase in phases}
        assert phases[0] == "S1901M" and phases[-1].startswith(("F1903", "W1903"))
        assert env.game.is_terminal and env.game.game.get_current_phase() == "S1904M"
        assert sum(env.final_scores["centres"].values()) <= CENTRES
        rewards = env.final_scores["reward"]
        assert env.final_rewards == {a: pytest.approx(rewards[p]) for a, p in zip(env.possible_agents, POWERS)}
    assert seen == {"M", "R", "A"}


def test_adjustments_leave_no_power_with_more_units_than_centres():
    env = DiplomacyEnv(max_years=4)
    for seed in range(3):
        env.reset(seed=seed)
        bots = {a: RandomBot(seed * 10 + i) for i, a in enumerate(env.possible_agents)}
        last_phase = None
        for agent in env.agent_iter():
            observation, _, terminated, _, info = env.last()
            game = env.game.game
            if game.get_current_phase() != last_phase and game.get_current_phase().startswith("S"):
                for power in POWERS:  # a new year: the winter's builds and disbands are done
                    assert len(game.get_units(power)) <= len(game.get_centers(power))
            last_phase = game.get_current_phase()
            env.step(None if terminated else bots[agent].act(observation["text"], info["legal_actions"]))


def test_a_power_sees_its_own_orders_of_the_phase_and_no_one_elses():
    env = DiplomacyEnv()
    env.reset(seed=0)
    austria = env.agent_selection
    first = env.observe(austria)["text"]
    assert "You are AUSTRIA" in first and "Order for A BUD: [1] A BUD H  [2] A BUD - GAL" in first
    assert first.endswith("Legal moves: " + " ".join(f"[{i}]" for i in range(1, 14)))
    env.step("[2]")  # A BUD - GAL
    assert "Order for F TRI: [1] F TRI H" in env.observe(austria)["text"]
    env.step("[F Tri - Alb]")  # an order named in full is taken too
    mine = env.observe(austria)["text"]
    assert "Your orders so far this phase: A BUD - GAL, F TRI - ALB" in mine
    while env.agent_selection == austria:
        env.step("[1]")
    england = env.observe(env.agent_selection)["text"]
    assert "You are ENGLAND" in england and "GAL" not in england.split("Units:")[1].split("Order for")[0]
    assert "A BUD - GAL" not in england and "Your orders so far" not in england  # Austria's orders are its own
    assert "Waiting for player" in env.observe("player_2")["text"]


def test_an_invalid_order_holds_and_is_counted():
    env = DiplomacyEnv()
    env.reset(seed=0)
    agent = env.agent_selection
    env.step("I move to Galicia")  # no bracket token
    env.step("[99]")  # no such option
    assert env.invalid_moves[agent] == 2 and env.infos[agent]["invalid_move"]
    assert env.game.chosen["AUSTRIA"] == ["A BUD H", "F TRI H"]
    assert not env.terminations[agent]


def test_a_digit_of_another_script_is_no_option_number():
    """``str.isdigit`` takes "²" and "①", which ``int`` refuses (the step raised), and "٣", which
    ``int`` reads as 3: each is an invalid order now, held and counted, under every rule."""
    env = DiplomacyEnv()
    env.reset(seed=0)
    agent = env.agent_selection
    for answer in ("I'll take option [²]", "[①]", "[٣]"):
        env.step(answer)
    assert env.invalid_moves[agent] == 3 and env.game.chosen["AUSTRIA"] == ["A BUD H", "F TRI H", "A VIE H"]


def test_forfeit_can_be_asked_for():
    env = DiplomacyEnv(invalid_move="forfeit")
    env.reset(seed=0)
    env.step("nonsense")
    assert all(env.terminations.values()) and env.final_rewards["player_0"] == -1.0


def test_scores_give_the_bonus_to_a_sole_leader_and_share_it_between_tied_leaders():
    rules = DiplomacyRules(max_years=1, win_centres=5, win_bonus=1.0)
    game = rules.game
    game.set_centers("FRANCE", ["BRE", "MAR", "PAR", "SPA", "POR", "BEL"])
    scores = rules.scores()
    assert scores["reward"]["FRANCE"] == pytest.approx(6 / CENTRES + 1.0)
    assert scores["reward"]["RUSSIA"] == pytest.approx(4 / CENTRES)
    squares = 6 * 6 + 4 * 4 + 5 * 9
    assert scores["sum_of_squares"]["FRANCE"] == pytest.approx(36 / squares)
    assert sum(scores["sum_of_squares"].values()) == pytest.approx(1.0)
    game.set_centers("GERMANY", ["BER", "KIE", "MUN", "HOL", "DEN", "SWE"])
    scores = rules.scores()  # two leaders at 6: the bonus is shared
    assert scores["reward"]["FRANCE"] == pytest.approx(6 / CENTRES + 0.5) == scores["reward"]["GERMANY"]
    rules.win_centres = 7
    assert rules.scores()["reward"]["FRANCE"] == pytest.approx(6 / CENTRES)  # under the threshold: no bonus


def test_the_result_is_the_bonus_s_a_sole_leader_wins_tied_leaders_draw_and_no_leader_means_no_winner():
    rules = DiplomacyRules(max_years=1, win_centres=5, win_bonus=1.0)
    rules.game.set_centers("FRANCE", ["BRE", "MAR", "PAR", "SPA", "POR", "BEL"])
    results = rules.results()
    assert results["FRANCE"] == "win" and {results[p] for p in POWERS if p != "FRANCE"} == {"loss"}
    rules.game.set_centers("GERMANY", ["BER", "KIE", "MUN", "HOL", "DEN", "SWE"])
    results = rules.results()
    assert results["FRANCE"] == results["GERMANY"] == "draw" and results["RUSSIA"] == "loss"
    rules.win_centres = 7
    assert set(rules.results().values()) == {"loss"}  # nobody dominant: nobody wins a capped game


def test_each_power_s_final_info_carries_its_result_and_scores_and_a_played_game_records_them():
    """The episode records the verdicts from the final infos, and an evaluation counts a win
    from them: a power with centres but no bonus has a positive reward and is not a winner."""
    from sp_lightning.evaluation.matches import summarize
    from sp_lightning.types import PolicyKind, PolicyRef

    env = DiplomacyEnv(max_years=1, win_centres=18)
    finals = {}
    env.reset(seed=3)
    bots = {a: RandomBot(i) for i, a in enumerate(env.possible_agents)}
    for agent in env.agent_iter():
        observation, _, terminated, truncated, info = env.last()
        if terminated or truncated:
            finals[agent] = info
            env.step(None)
        else:
            env.step(bots[agent].act(observation["text"], info["legal_actions"]))
    assert set(finals) == set(env.possible_agents)
    for agent, power in zip(env.possible_agents, POWERS):
        assert finals[agent]["result"] == "loss"  # nobody has 18 centres after a year
        assert finals[agent]["scores"] == {"centres": env.final_scores["centres"][power],
                                           "sum_of_squares": env.final_scores["sum_of_squares"][power]}

    from sp_lightning.arena import Arena
    from sp_lightning.games import GameSettings
    from sp_lightning.rollout.base import SamplingSettings
    from envs import make_bots
    from tests.helpers import ScriptedWorker

    game = GameSettings(id="diplomacy_v1", env_kwargs={"max_years": 1, "win_centres": 18})
    (rollout,) = Arena(ScriptedWorker(), SamplingSettings(), bots=make_bots(0)).play(
        [game.episode({a: PolicyRef(PolicyKind.BOT, "random") for a in env.possible_agents})], seeds=[3])
    assert set(rollout.results.values()) == {"loss"} and set(rollout.scores) == set(env.possible_agents)
    seat = max(rollout.outcome, key=rollout.outcome.get)
    assert rollout.outcome[seat] > 0
    result = summarize([(seat, rollout)], "bot:random", "bot:random", env.possible_agents)
    assert (result.wins, result.losses) == (0, 1)
    assert result.scores["centres"][0] == rollout.scores[seat]["centres"]
    assert "diplomacy/centres" in result.as_metrics("diplomacy")


def test_the_planner_and_the_diplomacy_random_bot_give_a_power_s_orders_per_line_as_per_unit():
    """With ``orders="power"`` both bots answer an order per line, every one legal (builds on
    distinct sites, nothing after a waive), and play the very games they play unit by unit; the
    planner takes more centres than random orders in the same seat."""
    from envs.diplomacy import DiplomacyRandomBot, PlannerBot

    for seed in range(6):
        hero = seed % 7
        finals = []
        for orders in ("unit", "power"):
            env = DiplomacyEnv(max_years=2, orders=orders)
            bots = {a: (PlannerBot(seed) if i == hero else DiplomacyRandomBot(seed * 7 + i))
                    for i, a in enumerate(env.possible_agents)}
            _play(env, seed, bots)
            assert sum(env.invalid_moves.values()) == 0, (orders, seed)
            finals.append(env.final_scores)
        assert finals[0] == finals[1], seed
    env = DiplomacyEnv(max_years=2, orders="power")
    planner, randomly = [], []
    for seed in range(14):
        hero = env.possible_agents[seed % 7]
        others = {a: DiplomacyRandomBot(seed * 10 + i) for i, a in enumerate(env.possible_agents)}
        planner.append(_centres_of(env, {**others, hero: PlannerBot(seed)}, seed)[POWERS[seed % 7]])
        randomly.append(_centres_of(env, others, seed)[POWERS[seed % 7]])
    assert sum(planner) / 14 > sum(randomly) / 14 + 1.5, (planner, randomly)


def test_a_snapshot_plays_on_without_touching_the_original():
    env = DiplomacyEnv(max_years=2)
    _play(env, 3, until=lambda e: e.game.game.get_current_phase() == "F1901M" and len(e.game.pending) < 10)
    phase, pending = env.game.game.get_current_phase(), [d.subject for d in env.game.pending]
    before = {a: env.observe(a)["text"] for a in env.possible_agents}
    twin = env.snapshot(seed=7)
    assert twin.game.game is not env.game.game
    bots = {a: RandomBot(i) for i, a in enumerate(env.possible_agents)}
    for agent in twin.agent_iter():
        observation, _, terminated, _, info = twin.last()
        twin.step(None if terminated else bots[agent].act(observation["text"], info["legal_actions"]))
    assert twin.game.is_terminal
    assert env.game.game.get_current_phase() == phase and [d.subject for d in env.game.pending] == pending
    assert {a: env.observe(a)["text"] for a in env.possible_agents} == before


def test_the_same_seed_and_bots_give_the_same_game():
    first, second = DiplomacyEnv(max_years=2), DiplomacyEnv(max_years=2)
    _play(first, 5)
    _play(second, 5)
    assert first.final_scores == second.final_scores
    assert first.observe("player_3")["text"] == second.observe("player_3")["text"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_years": 0}, "max_years: expected an int >= 1"),
    ({"win_centres": 40}, r"win_centres: expected an int in \[1, 34\]"),
    ({"win_bonus": -1}, "win_bonus: expected a number >= 0"),
    ({"orders": "both"}, "orders: expected 'unit'"),
    ({"orders": "power", "invalid_move": "forfeit"}, "invalid_move: with orders 'power' an illegal order line holds"),
    ({"invalid_move": "skip"}, "invalid_move: expected one of"),
])
def test_bad_settings_name_the_key(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DiplomacyEnv(**kwargs)


def _centres_of(env, seat_bots, seed):
    env.reset(seed=seed)
    for agent in env.agent_iter():
        observation, _, terminated, _, info = env.last()
        env.step(None if terminated else seat_bots[agent].act(observation["text"], info["legal_actions"]))
    return env.final_scores["centres"]


def test_the_planner_takes_more_centres_than_random_orders_in_the_same_seat():
    """``bot:diplomacy_planner`` against six random powers, each power in turn: more centres after
    two years than a random power ends with in the same seat and games (40 games each)."""
    env = DiplomacyEnv(max_years=2)
    planner, randomly = [], []
    for seed in range(40):
        hero = env.possible_agents[seed % 7]
        others = {a: RandomBot(seed * 10 + i) for i, a in enumerate(env.possible_agents)}
        planner.append(_centres_of(env, {**others, hero: BOTS["diplomacy_planner"](seed=seed)}, seed)[POWERS[seed % 7]])
        randomly.append(_centres_of(env, others, seed)[POWERS[seed % 7]])
    assert sum(planner) / 40 > sum(randomly) / 40 + 1.5  # 6.4 against 3.5 when written


def test_the_planner_holds_a_centre_it_stands_on_and_moves_into_a_neutral_one():
    bot = BOTS["diplomacy_planner"](seed=0)
    head = "You are FRANCE.\nSupply centres: FRANCE 3 (BRE MAR PAR); GERMANY 3 (BER KIE MUN)\n"
    legal = ["[1]", "[2]", "[3]", "[4]"]
    into = head + "Order for A MAR: [1] A MAR H  [2] A MAR - PIE  [3] A MAR - SPA  [4] A MAR S A PAR - BUR"
    assert bot.act(into, legal) == "[3]"  # SPA: a neutral centre, one move away
    nearer = head + "Order for A PAR: [1] A PAR H  [2] A PAR - PIC  [3] A PAR S A MAR  [4] A PAR S A MAR - BUR"
    assert bot.act(nearer, legal) == "[2]"  # PIC is next to BEL; PAR itself is two moves from any centre to take
    on_centre = head + "Order for A BEL: [1] A BEL H  [2] A BEL - BUR  [3] A BEL - HOL  [4] A BEL - PIC"
    assert bot.act(on_centre, legal) == "[1]"  # BEL is not France's: hold it to take it
    with pytest.raises(ValueError, match="expected a diplomacy_v1 observation"):
        bot.act("Tic-Tac-Toe. You are X.", ["[0]"])


def test_the_pettingzoo_api_test_passes_with_a_call_per_power():
    api_test(DiplomacyEnv(max_years=1, orders="power"), num_cycles=60)


def test_a_power_gives_its_orders_one_per_line_and_illegal_lines_hold_and_are_counted():
    env = DiplomacyEnv(orders="power")
    env.reset(seed=0)
    view = env.observe("player_0")["text"]
    assert "A BUD: A BUD H | A BUD - GAL" in view and "F TRI: F TRI H" in view and view.endswith("Your move.")
    assert env.infos["player_0"]["legal_actions"] == ["[hold]"]
    env.step("My plan: the Balkans.\n- A BUD - SER\n[A VIE - GAL]\n3. f tri - alb\nA BUD - RUM\nF XYZ H")
    assert env.game.chosen["AUSTRIA"] == ["A BUD - SER", "A VIE - GAL", "F TRI - ALB"]
    assert env.invalid_moves["player_0"] == 2 and env.infos["player_0"]["invalid_move"]  # BUD twice; no F XYZ
    assert env.agent_selection == "player_1"  # one call for the whole power
    env.step(None)  # not text: every unit holds, counted once
    assert sorted(env.game.chosen["ENGLAND"]) == ["A LVP H", "F EDI H", "F LON H"] and env.invalid_moves["player_1"] == 1
    for agent in env.possible_agents[2:]:
        env.step("[hold]")
    assert env.game.game.get_current_phase() == "F1901M"  # the phase went to the adjudicator
    assert "Last phase S1901M: AUSTRIA: A BUD - SER, A VIE - GAL, F TRI - ALB" in env.observe("player_0")["text"]


def test_prose_that_starts_like_a_unit_is_not_read_as_an_order():
    """A sentence whose first words look like a unit and a site ("A few ...", "F you") is prose:
    not an illegal order; an order is a unit, its site, then a move or an order letter."""
    env = DiplomacyEnv(orders="power")
    env.reset(seed=0)
    env.step("A few thoughts: hold the line.\nF you\nA war is coming.\nA VIE-BUD\nA BUD H\nF TRI H")
    assert env.game.chosen["AUSTRIA"] == ["A VIE - BUD", "A BUD H", "F TRI H"]
    assert env.invalid_moves["player_0"] == 0 and not env.infos["player_0"]["invalid_move"]



def test_an_order_line_padded_with_whitespace_is_read_as_its_words():
    """Runs of whitespace are collapsed before a line is matched (the order pattern backtracked
    polynomially on them: 400 spaces took 28 s), and a line too long to be an order is prose."""
    env = DiplomacyEnv(orders="power")
    env.reset(seed=0)
    env.step("A VIE" + " " * 400 + "-\tBUD\nA BUD H" + " " * 400 + "] (hold, for now)\nF TRI H " + "x" * 300)
    assert env.game.chosen["AUSTRIA"] == ["A VIE - BUD", "A BUD H", "F TRI H"]
    assert env.invalid_moves["player_0"] == 0


def test_a_game_of_calls_per_power_runs_to_the_cap():
    env = DiplomacyEnv(orders="power", max_years=2)
    phases = _play(env, 0)
    assert env.game.is_terminal and phases[0] == "S1901M" and sum(env.final_scores["centres"].values()) <= CENTRES


@pytest.mark.slow
def test_the_league_config_seats_the_learner_as_one_power_among_six_league_members(tmp_path):
    """``configs/diplomacy_league_tiny.yaml`` for two steps: every game of the league's record has
    seven agents, the learner in exactly one seat (recorded first), the six others drawn from the
    league; validation against the planner reports a payoff."""
    import json
    import os

    from sp_lightning.cli import main

    config = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs",
                          "diplomacy_league_tiny.yaml")
    main(["fit", "--config", config, "--trainer.max_steps", "2", "--trainer.val_check_interval", "2",
          "--data.episodes_per_batch", "4", "--data.eval.games", "7",
          "--trainer.default_root_dir", str(tmp_path), "--data.league.dir", str(tmp_path / "league"),
          "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", str(tmp_path),
          "--trainer.callbacks", "[]", "--trainer.enable_progress_bar", "false"])
    league = json.loads((tmp_path / "league" / "league.json").read_text())
    matches = league["matches"]
    assert len(matches) == 8  # two batches of 4 games
    assert all(len(m["agents"]) == 7 and m["agents"].count("learner") == 1 for m in matches)
    assert all(m["agents"][0] == "learner" and len(m["scores"]) == 7 for m in matches)
    assert {a for m in matches for a in m["agents"]} - {"learner"} <= set(league["agents"])
    (metrics,) = tmp_path.glob("**/metrics.csv")
    assert "val/diplomacy_v1/payoff" in metrics.read_text()


def test_the_gpu_league_config_s_game_plays_with_its_baselines_a_call_per_power():
    """``configs/diplomacy_league_qwen3_vllm_gpu.yaml`` (not run here: it needs a GPU and vLLM):
    its game settings build, its baselines are bots the league knows, and a game of its length
    with those bots in every seat gives every power legal orders per line to the year cap."""
    import os

    import yaml

    from sp_lightning.league.settings import baseline_policy

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "configs", "diplomacy_league_qwen3_vllm_gpu.yaml")) as f:
        config = yaml.safe_load(f)
    (game,) = config["data"]["games"]
    policies = [baseline_policy(b) for b in config["data"]["league"]["baselines"]]
    assert policies == ["base", "bot:diplomacy_random", "bot:diplomacy_planner"]
    env = DiplomacyEnv(**game["env_kwargs"])
    assert env.orders == "power" and env.game_info.moves == ("[hold]",)
    bots = {a: BOTS[policies[1 + i % 2].removeprefix("bot:")](seed=i) for i, a in enumerate(env.possible_agents)}
    phases = _play(env, 0, bots)
    assert phases[-1].startswith(("F1904", "W1904")) and sum(env.invalid_moves.values()) == 0
