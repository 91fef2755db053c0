"""Hand-computed checks of the credit assigners."""

import math

import pytest

from sp_lightning.credit import GRPO, RAE, Constant, EpisodicRewardCredit, apply_credit, rollout_ids, step_return
from sp_lightning.types import LEARNER, Completion, PolicyRef, Rollout, Step


def learner(role, reward=0.0):
    return Step(role, Completion("move", prompt_ids=[1], completion_ids=[2, 3]), reward=reward)


def bot(role):
    return Step(role, Completion("move", completion_ids=[2], policy=PolicyRef("bot", "random")))


def empty(role):
    """The learner's turn, but no tokens came back (e.g. a truncated prompt): not trainable."""
    return Step(role, Completion("", prompt_ids=[1], completion_ids=[]))


def rollout(rewards, steps=None, episode="ttt", **kwargs):
    """One learner step per role in ``rewards`` unless ``steps`` is given."""
    steps = [learner(role) for role in rewards] if steps is None else steps
    return Rollout(episode, steps=steps, rewards=rewards, **kwargs)


def advantages(rollouts):
    return [s.advantage for r in rollouts for sub in r.walk() for s in sub.steps]


def test_step_return_adds_step_reward():
    """Episode reward 1 for x, invalid-move penalty -0.5 on one step: returns 1 and 0.5."""
    ok, bad = learner("x"), learner("x", reward=-0.5)
    r = rollout({"x": 1.0}, steps=[ok, bad])
    assert step_return(r, ok) == pytest.approx(1.0)
    assert step_return(r, bad) == pytest.approx(0.5)


def test_step_return_names_missing_role():
    s = learner("o")
    with pytest.raises(KeyError, match="'o'"):
        step_return(rollout({"x": 1.0}, steps=[s]), s)


def test_grpo_without_normalization():
    """Returns [2, 0, 1]: mean 1 -> advantages [1, -1, 0] (Dr. GRPO)."""
    rs = [rollout({"x": v}) for v in (2.0, 0.0, 1.0)]
    credit = GRPO(normalize=False)
    credit.assign(rs)
    assert advantages(rs) == pytest.approx([1.0, -1.0, 0.0])
    assert credit.last_stats["num_groups"] == 1
    assert credit.last_stats["advantage_mean"] == pytest.approx(0.0)
    assert credit.last_stats["advantage_std"] == pytest.approx(math.sqrt(2 / 3))


def test_grpo_normalized():
    """Returns [3, 1, 3, 1]: mean 2, population std sqrt((1+1+1+1)/4) = 1
    -> advantages (R - 2) / (1 + 1e-6) = [1, -1, 1, -1].
    """
    rs = [rollout({"x": v}) for v in (3.0, 1.0, 3.0, 1.0)]
    GRPO().assign(rs)
    assert advantages(rs) == pytest.approx([1.0, -1.0, 1.0, -1.0])


def test_grpo_uses_step_returns():
    """One rollout with x steps of step reward 0 and -1 (episode reward 1), another with
    episode reward 0: returns [1, 0, 0], mean 1/3 -> [2/3, -1/3, -1/3] unnormalized.
    """
    rs = [
        rollout({"x": 1.0}, steps=[learner("x"), learner("x", reward=-1.0)]),
        rollout({"x": 0.0}),
    ]
    GRPO(normalize=False).assign(rs)
    assert advantages(rs) == pytest.approx([2 / 3, -1 / 3, -1 / 3])


def test_grpo_positive_only():
    """Returns [3, 1, 2]: mean 2 -> [1, -1, 0] -> clamped below at 0 -> [1, 0, 0]."""
    rs = [rollout({"x": v}) for v in (3.0, 1.0, 2.0)]
    GRPO(normalize=False, positive_only=True).assign(rs)
    assert advantages(rs) == pytest.approx([1.0, 0.0, 0.0])


def test_grpo_groups_by_role():
    """Two games, x rewards [1, 0], o rewards [-1, 0].

    By (episode, role): x mean 0.5 -> [0.5, -0.5]; o mean -0.5 -> [-0.5, 0.5].
    Pooled roles (group_by=("episode",)): mean of [1, -1, 0, 0] is 0 -> [1, -1, 0, 0].
    Steps are listed game by game: [x1, o1, x2, o2].
    """
    def make():
        return [rollout({"x": 1.0, "o": -1.0}), rollout({"x": 0.0, "o": 0.0})]

    rs = make()
    credit = GRPO(normalize=False)
    credit.assign(rs)
    assert advantages(rs) == pytest.approx([0.5, -0.5, -0.5, 0.5])
    assert credit.last_stats["num_groups"] == 2
    rs = make()
    GRPO(normalize=False, group_by=("episode",)).assign(rs)
    assert advantages(rs) == pytest.approx([1.0, -1.0, 0.0, 0.0])


def test_grpo_groups_by_episode_and_group():
    """ttt x rewards [2, 0] (mean 1) -> [1, -1]; nim x rewards [5, 3] (mean 4) -> [1, -1];
    ttt group "b" x rewards [7] alone -> 0. Mixed together they would not center at 0 per game.
    """
    rs = [
        rollout({"x": 2.0}),
        rollout({"x": 5.0}, episode="nim"),
        rollout({"x": 0.0}),
        rollout({"x": 3.0}, episode="nim"),
        rollout({"x": 7.0}, group="b"),
    ]
    credit = GRPO(normalize=False)
    credit.assign(rs)
    assert advantages(rs) == pytest.approx([1.0, 1.0, -1.0, -1.0, 0.0])
    assert credit.last_stats["num_groups"] == 3


def test_grpo_says_when_every_group_holds_one_game(caplog):
    """A league that seats its learner in one of seven roles, seven games a batch: each
    (episode, role) group is one game, whose steps share one return, so the outcome gives no
    advantage. GRPO says so once, and logs the share of such groups."""
    rs = [rollout({f"player_{k}": float(k)}, steps=[learner(f"player_{k}"), learner(f"player_{k}")])
          for k in range(7)]
    credit = GRPO()
    with caplog.at_level("WARNING", logger="sp_lightning.credit"):
        credit.assign(rs)
        credit.assign(rs)
    assert advantages(rs) == pytest.approx([0.0] * 14)
    assert credit.last_stats["single_game_groups"] == 1.0
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "every GRPO group of this batch holds one game" in caplog.records[0].message
    assert "sp_lightning.credit.RAE" in caplog.records[0].message
    caplog.clear()
    pooled = [rollout({"x": 1.0}), rollout({"x": 0.0})]
    credit = GRPO()
    with caplog.at_level("WARNING", logger="sp_lightning.credit"):
        credit.assign(pooled)
    assert credit.last_stats["single_game_groups"] == 0.0 and not caplog.records


def test_grpo_separates_levels():
    """Parents (level 0) rewards [4, 2], mean 3 -> [1, -1]. Their children share the episode
    name and role but sit at level 1, rewards [0, 10], mean 5 -> [-5, 5].
    walk() order: parent 1, child 1, parent 2, child 2.
    """
    rs = [
        rollout({"x": 4.0}, children=[rollout({"x": 0.0}, level=1)]),
        rollout({"x": 2.0}, children=[rollout({"x": 10.0}, level=1)]),
    ]
    GRPO(normalize=False).assign(rs)
    assert advantages(rs) == pytest.approx([1.0, -5.0, -1.0, 5.0])


def test_grpo_singleton_group_is_zero():
    """One step alone in its group: R - mean = 0, and normalizing 0 / (0 + eps) stays 0."""
    rs = [rollout({"x": 5.0})]
    for credit in (GRPO(), GRPO(normalize=False), GRPO(positive_only=True)):
        credit.assign(rs)
        assert advantages(rs) == pytest.approx([0.0])


def test_grpo_rejects_unknown_group_field():
    with pytest.raises(ValueError, match="group_by"):
        GRPO(group_by=("episode", "seat"))


def test_grpo_group_key_is_overridable():
    """Grouping everything together: ttt x [2], nim x [0] -> mean 1 -> [1, -1]."""

    class OneGroup(GRPO):
        def group_key(self, rollout, step):
            return ()

    rs = [rollout({"x": 2.0}), rollout({"x": 0.0}, episode="nim")]
    OneGroup(normalize=False).assign(rs)
    assert advantages(rs) == pytest.approx([1.0, -1.0])


@pytest.mark.parametrize("make_credit", [GRPO, RAE, EpisodicRewardCredit, Constant])
def test_untrainable_steps_left_none(make_credit):
    """Bot moves and empty completions get no advantage, and their (large) returns do not
    enter the statistics: trainable x returns [1, 0] only -> GRPO (R - 0.5) / (0.5 + eps) =
    [1, -1],
    RAE [1 - 0, 0 - 0.05] (baseline 0.05 * 1 after game 1), EpisodicRewardCredit [1, 0],
    Constant [1, 1].
    """
    rs = [
        rollout({"x": 1.0, "o": 100.0}, steps=[learner("x"), bot("o"), empty("x")]),
        rollout({"x": 0.0, "o": 100.0}, steps=[bot("o"), learner("x"), empty("o")]),
    ]
    credit = make_credit()
    credit.assign(rs)
    expected = {GRPO: [1.0, -1.0], RAE: [1.0, -0.05], EpisodicRewardCredit: [1.0, 0.0],
                Constant: [1.0, 1.0]}[make_credit]
    got = advantages(rs)
    assert [i for i, a in enumerate(got) if a is None] == [1, 2, 3, 5]
    assert [got[0], got[4]] == pytest.approx(expected, rel=1e-5)
    assert credit.last_stats["num_steps"] == 2


def test_rae_baseline_subtracted_before_update():
    """decay 0.5, baselines start at 0.

    Batch 1, game A (x 1, o -1): A_x = 1 - 0 = 1, A_o = -1 - 0 = -1;
      then b_x = 0.5*0 + 0.5*1 = 0.5, b_o = -0.5.
    Batch 1, game B (x -1, o 1): A_x = -1 - 0.5 = -1.5, A_o = 1 + 0.5 = 1.5;
      then b_x = 0.5*0.5 + 0.5*(-1) = -0.25, b_o = 0.25.
    Batch 2, game C (x 1, o -1), two x steps with step rewards [0, -0.5]:
      A_x = [1 + 0.25, 0.5 + 0.25] = [1.25, 0.75], A_o = -1 - 0.25 = -1.25;
      one update per role: b_x = 0.5*(-0.25) + 0.5*1 = 0.375, b_o = 0.5*0.25 - 0.5 = -0.375.
    """
    credit = RAE(decay=0.5)
    batch1 = [rollout({"x": 1.0, "o": -1.0}), rollout({"x": -1.0, "o": 1.0})]
    credit.assign(batch1)
    assert advantages(batch1) == pytest.approx([1.0, -1.0, -1.5, 1.5])
    assert credit.last_stats["num_baselines"] == 2
    batch2 = [
        rollout(
            {"x": 1.0, "o": -1.0},
            steps=[learner("x"), learner("o"), learner("x", reward=-0.5)],
        )
    ]
    credit.assign(batch2)
    assert advantages(batch2) == pytest.approx([1.25, -1.25, 0.75])
    assert credit.state_dict() == {"baselines": {"ttt": {"x": 0.375, "o": -0.375}}}


def test_rae_baselines_per_episode_and_nested():
    """decay 0.5. Parent "debate" (x 2) with child "judge" (x 4): both baselines 0, so A = [2, 4];
    then b_debate = 1, b_judge = 2. Second parent (x 2) with child (x 4): A = [2 - 1, 4 - 2].
    """
    def make():
        child = rollout({"x": 4.0}, episode="judge", level=1)
        return rollout({"x": 2.0}, episode="debate", children=[child])

    credit = RAE(decay=0.5)
    rs = [make(), make()]
    credit.assign(rs)
    assert advantages(rs) == pytest.approx([2.0, 4.0, 1.0, 2.0])
    assert credit.state_dict() == {"baselines": {"debate": {"x": 1.5}, "judge": {"x": 3.0}}}


def test_rae_bot_seat_does_not_move_baseline():
    """decay 0.5. o is a bot in game 1 (reward 10): b_o stays 0, so the learner's o in game 2
    (reward 1) gets A = 1 - 0 = 1; only then b_o = 0.5 * 0 + 0.5 * 1 = 0.5. b_x stays 0.
    """
    credit = RAE(decay=0.5)
    rs = [
        rollout({"x": 0.0, "o": 10.0}, steps=[learner("x"), bot("o")]),
        rollout({"x": 0.0, "o": 1.0}),
    ]
    credit.assign(rs)
    assert rs[1].steps[1].advantage == pytest.approx(1.0)
    assert credit.state_dict() == {"baselines": {"ttt": {"x": 0.0, "o": 0.5}}}


def test_rae_state_dict_round_trip():
    """A resumed RAE continues exactly where the saved one stopped: after game x = 1 with
    decay 0.5, b_x = 0.5, so a next game with x = 0 gives A = -0.5 on both.
    """
    saved = RAE(decay=0.5)
    saved.assign([rollout({"x": 1.0})])
    state = saved.state_dict()
    resumed = RAE(decay=0.5)
    resumed.load_state_dict(state)
    a, b = [rollout({"x": 0.0})], [rollout({"x": 0.0})]
    saved.assign(a)
    resumed.assign(b)
    assert advantages(a) == advantages(b) == pytest.approx([-0.5])
    assert state == {"baselines": {"ttt": {"x": 0.5}}}  # a copy, not changed by later updates


def test_rae_by_opponent_keeps_one_baseline_per_opponent_type():
    """decay 0.5, the learner as x. Against RandomBot it wins (x 1), against the tactical bot it
    loses (x -1), against two past checkpoints it draws. Per opponent, the second game against
    each gets A = R - 0.5 R: [0.5, -0.5, 0, 0]; one shared baseline would have mixed them.
    Both checkpoints share one baseline; a mirror game (learner in both seats) has its own."""
    def game(x, opponent):
        return rollout({"x": x, "o": -x}, steps=[learner("x"), bot("o")],
                       seats={"x": LEARNER, "o": opponent})

    opponents = [PolicyRef("bot", "random"), PolicyRef("bot", "tactical"),
                 PolicyRef("checkpoint", "ckpt-10"), PolicyRef("checkpoint", "ckpt-20")]
    credit = RAE(decay=0.5, by_opponent=True)
    credit.assign([game(1.0, opponents[0]), game(-1.0, opponents[1]), game(0.0, opponents[2])])
    second = [game(1.0, opponents[0]), game(-1.0, opponents[1]), game(0.0, opponents[3])]
    credit.assign(second)
    assert [r.steps[0].advantage for r in second] == pytest.approx([0.5, -0.5, 0.0])
    mirror = rollout({"x": 1.0, "o": -1.0}, seats={"x": LEARNER, "o": LEARNER})
    credit.assign([mirror])
    assert advantages([mirror]) == pytest.approx([1.0, -1.0])
    assert credit.state_dict() == {"baselines": {"ttt": {
        "x vs bot:random": 0.75, "x vs bot:tactical": -0.75, "x vs checkpoint": 0.0,
        "x vs learner": 0.5, "o vs learner": -0.5}}}
    restored = RAE(decay=0.5, by_opponent=True)
    restored.load_state_dict(credit.state_dict())
    assert restored.baselines == credit.baselines


def test_two_learners_in_one_role_never_share_a_baseline_or_a_group():
    """A league's exploiter and the main agent both play x (the exploiters overlay: main plays
    every role). Main's mirror game (x vs learner:main) and the exploiter's game against main
    (also x vs learner:main) keep RAE baselines of their own, and GRPO puts them in groups of
    their own: the exploiter's advantage is its return against its own baseline (0), not
    against main's self-play."""
    main, exploiter = PolicyRef("learner", "main"), PolicyRef("learner", "main_exploiter")
    mirror = rollout({"x": 1.0, "o": -1.0}, seats={"x": main, "o": main})
    exploit = rollout({"x": -2.0, "o": 2.0}, steps=[learner("x"), bot("o")], seats={"x": exploiter, "o": main})
    credit = RAE(decay=0.5, by_opponent=True)
    credit.assign([mirror, exploit])
    assert exploit.steps[0].advantage == pytest.approx(-2.0)  # main's mirror game moved no baseline of its
    assert credit.state_dict()["baselines"]["ttt"] == {
        "x (main) vs learner:main": 0.5, "o (main) vs learner:main": -0.5, "x (main_exploiter) vs learner:main": -1.0}
    plain = RAE(decay=0.5)
    plain.assign([rollout({"x": 1.0}, seats={"x": LEARNER})])
    assert plain.state_dict()["baselines"]["ttt"] == {"x": 0.5}  # the one unnamed learner: as before
    grpo = [rollout({"x": 1.0, "o": -1.0}, seats={"x": main, "o": main}),
            rollout({"x": -1.0, "o": 1.0}, steps=[learner("x"), bot("o")], seats={"x": exploiter, "o": main})]
    GRPO(normalize=False, group_by=("episode", "role")).assign(grpo)
    assert grpo[1].steps[0].advantage == 0.0  # alone in its group, not -1 against main's +1


def test_rae_discount_pays_the_last_move_most():
    """discount 0.5, x moves three times and wins (x 1), o moves twice with an invalid-move
    penalty -0.5 on its last move and loses (o -1); baselines 0. x's moves get [0.25, 0.5, 1],
    o's [-0.5, -1 - 0.5]: the step's own reward is not discounted."""
    steps = [learner("x"), learner("o"), learner("x"), learner("o", reward=-0.5), learner("x")]
    rs = [rollout({"x": 1.0, "o": -1.0}, steps=steps)]
    credit = RAE(decay=0.5, discount=0.5)
    credit.assign(rs)
    assert advantages(rs) == pytest.approx([0.25, -0.5, 0.5, -1.5, 1.0])
    assert credit.state_dict() == {"baselines": {"ttt": {"x": 0.5, "o": -0.5}}}
    with pytest.raises(ValueError, match="discount"):
        RAE(discount=0.0)


def at(role, prompt, reward=0.0):
    """A learner step from the state whose prompt tokens are ``prompt``."""
    return Step(role, Completion("move", prompt_ids=list(prompt), completion_ids=[2]), reward=reward)


def test_episodic_reward_credit_is_the_return():
    """Episode reward 1 plus step rewards [0, -0.5], and o's -1: advantages [1, 0.5, -1]."""
    rs = [rollout({"x": 1.0, "o": -1.0}, steps=[learner("x"), learner("x", -0.5), learner("o")])]
    credit = EpisodicRewardCredit()
    credit.assign(rs)
    assert advantages(rs) == pytest.approx([1.0, 0.5, -1.0])
    assert credit.last_stats["advantage_mean"] == pytest.approx(0.5 / 3)


def test_constant_weighs_every_trainable_step_alike():
    """value 0.5 on x's two steps and o's one, whatever the rewards; the bot's step gets none."""
    rs = [rollout({"x": 1.0, "o": -1.0}, steps=[learner("x"), learner("x", -0.5), bot("o"), learner("o")])]
    Constant(0.5).assign(rs)
    assert advantages(rs) == [0.5, 0.5, None, 0.5]
    with pytest.raises(ValueError, match="credit.value: expected a finite number"):
        Constant(float("nan"))


# ---- a small result tree: compute's keys, and every assigner by hand --------------------------------

def _tree():
    """Two proposals (rewards 1 and -1 for p); the first has two solver children (group q0,
    rewards 1 and 0 for s) and a non-trainable child (a hidden check); the second has one child
    (group q1, reward 1) whose solver step carries a step reward of -0.5."""
    kids0 = [rollout({"s": 1.0}, episode="solve", group="q0", level=1),
             rollout({"s": 0.0}, episode="solve", group="q0", level=1)]
    hidden = rollout({"s": 5.0}, episode="solve", group="q0", level=1)
    hidden.steps[0].in_trainable_episode = False
    kids1 = [rollout({"s": 1.0}, steps=[learner("s", reward=-0.5)], episode="solve", group="q1", level=1)]
    return [rollout({"p": 1.0}, episode="propose", children=[*kids0, hidden]),
            rollout({"p": -1.0}, episode="propose", children=kids1)]


def test_rollout_ids_are_paths_in_the_tree():
    assert [rid for rid, _ in rollout_ids(_tree())] == ["0", "0.0", "0.1", "0.2", "1", "1.0"]


@pytest.mark.parametrize("make_credit, expected", [
    # proposers against each other: [1, -1] - 0 over std 1; each question's solvers against their
    # siblings: q0 [1, 0] -> [+1, -1] (std 0.5), q1 alone -> 0
    (lambda: GRPO(eps=0.0), {("0", 0): 1.0, ("0.0", 0): 1.0, ("0.1", 0): -1.0, ("1", 0): -1.0, ("1.0", 0): 0.0}),
    # Dr. GRPO: the same without the std
    (lambda: GRPO(normalize=False), {("0", 0): 1.0, ("0.0", 0): 0.5, ("0.1", 0): -0.5, ("1", 0): -1.0,
                                     ("1.0", 0): 0.0}),
    # RAE, decay 0.5, baselines from 0, in tree order: p 0 -> +1 (b_p 0.5); s 0 -> +1 (b_s 0.5);
    # s: 0 - 0.5 (b_s 0.25); p: -1 - 0.5 (b_p -0.25); s: 1 - 0.5 - 0.25 = 0.25
    (lambda: RAE(decay=0.5), {("0", 0): 1.0, ("0.0", 0): 1.0, ("0.1", 0): -0.5, ("1", 0): -1.5, ("1.0", 0): 0.25}),
    (EpisodicRewardCredit, {("0", 0): 1.0, ("0.0", 0): 1.0, ("0.1", 0): 0.0, ("1", 0): -1.0, ("1.0", 0): 0.5}),
    (lambda: Constant(2.0), {("0", 0): 2.0, ("0.0", 0): 2.0, ("0.1", 0): 2.0, ("1", 0): 2.0, ("1.0", 0): 2.0}),
])
def test_every_assigner_on_a_result_tree(make_credit, expected):
    """compute gives exactly the trainable steps' keys (the hidden child's step has none), and
    assign sets the same numbers on the steps."""
    credit = make_credit()
    computed = credit.compute(_tree())
    assert computed.keys() == expected.keys()
    assert computed == pytest.approx(expected)
    tree = _tree()
    make_credit().assign(tree)
    steps = dict(((rid, i), s) for rid, r in rollout_ids(tree) for i, s in enumerate(r.steps))
    assert {key: steps[key].advantage for key in expected} == pytest.approx(expected)
    assert steps[("0.2", 0)].advantage is None


def test_apply_credit_names_a_trainable_step_left_without_an_advantage():
    tree = _tree()
    with pytest.raises(KeyError, match=r"\('1.0', 0\)"):
        apply_credit(tree, {("0", 0): 1.0, ("0.0", 0): 1.0, ("0.1", 0): 1.0, ("1", 0): 1.0})
