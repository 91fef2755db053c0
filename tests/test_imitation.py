"""Imitation learners (sp_lightning.imitation): the buffer of a teacher's moves, the moves as the
learner's tokens, NFSP's anticipatory seats, the settings' errors, and fits that train an imitation
learner beside a policy-gradient one (learning, exact resume, both exploitabilities)."""

from __future__ import annotations

import json
import os
import random
from statistics import mean

import lightning as L
import pytest
import torch

from sp_lightning import build_from_config, make_trainer
from sp_lightning.games import FixedMix, GameSettings
from sp_lightning.imitation import AnticipatoryPlay, Imitation, LoggedMoves, MoveBuffer, TeacherMoves
from sp_lightning.learners import ImitationSettings, LearnerSettings, Learners, LoggedGames, adapter_of
from sp_lightning.model import PolicySettings, load_policy
from sp_lightning.rollout.chat import encode_chat
from sp_lightning.batch import Batch
from sp_lightning.types import Completion, PolicyKind, PolicyRef, Rollout, Step
from tests.helpers import checkpointed_fit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")
MAIN, AVERAGE = PolicyRef(PolicyKind.LEARNER, "main"), PolicyRef(PolicyKind.LEARNER, "average")


def _move(k: int):
    return ((1, 2, 3), (k,), None)


# ---- the buffer -------------------------------------------------------------------------------------
def test_reservoir_keeps_every_move_seen_with_the_same_chance():
    """Algorithm R: after 20,000 moves into 1,000 slots each move was kept w.p. 1/20, early or late."""
    kept_early, kept_late = [], []
    for trial in range(20):
        buffer = MoveBuffer(1000, "reservoir")
        rng = random.Random(trial)
        for start in range(0, 20_000, 500):  # in batches, as the run adds them
            buffer.add([_move(k) for k in range(start, start + 500)], rng)
        ids = [move[1][0] for move in buffer.moves]
        assert len(ids) == 1000 and buffer.seen == 20_000
        kept_early.append(sum(i < 10_000 for i in ids))
        kept_late.append(sum(i >= 10_000 for i in ids))
    assert abs(mean(kept_early) - 500) < 25 and abs(mean(kept_late) - 500) < 25


def test_recent_keeps_the_last_moves_and_both_resume_from_their_state():
    recent = MoveBuffer(3, "recent")
    recent.add([_move(k) for k in range(10)], random.Random(0))
    assert [m[1][0] for m in recent.moves] == [7, 8, 9]
    for sampling in ("reservoir", "recent"):
        buffer = MoveBuffer(50, sampling)
        buffer.add([_move(k) for k in range(120)], random.Random(1))
        again = MoveBuffer(50, sampling)
        again.load_state_dict(buffer.state_dict())
        assert list(again.moves) == list(buffer.moves) and again.seen == buffer.seen == 120
        more = [_move(k) for k in range(120, 200)]
        buffer.add(more, random.Random(2))
        again.add(more, random.Random(2))
        assert list(again.moves) == list(buffer.moves)
        assert buffer.draw(5, random.Random(3)) == again.draw(5, random.Random(3))
    assert MoveBuffer(5).draw(4, random.Random(0)) == []


# ---- a teacher's moves as the learner's tokens ------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer():
    _, tok = load_policy(PolicySettings(model="tiny"))
    return tok


def test_a_bots_move_is_tokenised_on_the_prompt_its_seat_was_shown(tokenizer):
    messages = [{"role": "user", "content": "Board ... Legal moves: [0] [4]"}]
    bot = PolicyRef(PolicyKind.BOT, "tictactoe_tactical")
    steps = [Step("player_0", Completion("[4]", policy=bot), info={"messages": messages, "legal_actions": ["[0]", "[4]"]}),
             Step("player_1", Completion("[0]", policy=bot), info={"messages": messages, "invalid_move": True}),
             Step("player_0", Completion("[4]", policy=PolicyRef(PolicyKind.BOT, "random")),
                  info={"messages": messages})]
    moves = TeacherMoves(bot, tokenizer, max_new_tokens=1).of([Rollout("tictactoe_v1", steps=steps)])
    assert len(moves) == 1, "the invalid move and the other bot's are not imitated"
    prompt, completion, legal = moves[0]
    assert list(prompt) == encode_chat(tokenizer, messages)
    assert list(completion) == tokenizer.encode("[4]", add_special_tokens=False) and legal == ("[0]", "[4]")
    roomy = TeacherMoves(bot, tokenizer, max_new_tokens=8).of([Rollout("tictactoe_v1", steps=steps[:1])])
    assert roomy[0][1][-1] == tokenizer.eos_token_id, "the end of turn is said where the budget has room"


def test_a_bot_teachers_moves_are_imitated_as_the_games_template_has_a_model_answer(tokenizer):
    """A bot answers a bare move (``[4]``), which the ``reasoning`` template's parser refuses (it
    reads ``\\boxed{[4]}`` after the thinking): imitating the bare move would teach the learner
    invalid moves. Each move is imitated as the game's template has a model answer it: every
    imitation record of a warm start on that template reads back, by the template, to a legal
    move, well formed."""
    from sp_lightning.prompts import make_template

    games = [{"id": "tictactoe_v1", "template": "reasoning", "opponents": {"bot:random": 1.0}}]
    module, dm = build_from_config("--config", os.path.join(CONFIGS, "tictactoe_tiny.yaml"), *WARM,
                                   "--data.games", json.dumps(games), "--data.episodes_per_batch", "4",
                                   "--data.sampling.max_new_tokens", "32")
    engine = dm.build_engine(module)
    engine.start()
    try:
        records = [r for r in engine.next_batch().records if r.imitation]
    finally:
        engine.close()
    assert records
    template = make_template("reasoning")
    for record in records:
        parsed = template.parse(tokenizer.decode(record.completion_ids, skip_special_tokens=True))
        assert parsed.well_formed and parsed.action_text in record.legal_actions, parsed


def test_a_learner_teachers_own_tokens_are_imitated_in_nested_episodes_that_train(tokenizer):
    played = Completion("x", prompt_ids=[5, 6], completion_ids=[7, 8], policy=MAIN)
    child = Rollout("sub", steps=[Step("a", played)])
    ignored = Step("a", Completion("y", prompt_ids=[1], completion_ids=[2], policy=MAIN), in_trainable_episode=False)
    rollout = Rollout("top", steps=[Step("a", played), ignored, Step("b", Completion("z", [9], [9], policy=AVERAGE))],
                      children=[child])
    assert TeacherMoves(MAIN, tokenizer, 1).of([rollout]) == [((5, 6), (7, 8), None)] * 2


# ---- logged games as the teacher --------------------------------------------------------------------
def _log(path, rows):
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return LoggedGames(str(path))


def test_logged_moves_read_a_records_line_to_its_ids_and_chat_messages_as_a_bots_move(tokenizer, tmp_path):
    """A text prompt (an episode log's decoded record) reads back to the ids it was decoded from;
    chat messages are rendered with the learner's chat template and answered as a bot's move; the
    invalid moves and a teacher's moves logged before are skipped."""
    messages = [{"role": "user", "content": "Board ... Legal moves: [0] [4]"}]
    prompt_ids = encode_chat(tokenizer, messages)
    said = list(tokenizer.encode("[4]", add_special_tokens=False)) + [tokenizer.eos_token_id]
    logged = _log(tmp_path / "moves.jsonl", [
        {"prompt": tokenizer.decode(prompt_ids), "completion": tokenizer.decode(said), "legal_actions": ["[0]", "[4]"]},
        {"prompt": tokenizer.decode(prompt_ids), "completion": "[1]", "invalid_move": True},
        "",
        {"prompt": messages, "completion": "[0]"},
        {"prompt": "x", "completion": "[0]", "imitation": True}])
    moves = LoggedMoves(logged, tokenizer, max_new_tokens=8, key="k").once()
    answer = tuple(tokenizer.encode("[0]", add_special_tokens=False)) + (tokenizer.eos_token_id,)
    assert moves == [(tuple(prompt_ids), tuple(said), ("[0]", "[4]")), (tuple(prompt_ids), answer, None)]


@pytest.mark.parametrize("rows, message", [
    (["{not json"], "moves.jsonl line 1: not JSON"),
    ([{"prompt": "p"}], r"line 1: expected \{\"prompt\": text or chat messages, \"completion\": text\}"),
    ([{"prompt": "p", "completion": "c"}, {"prompt": [{"role": "user"}], "completion": "c"}], "line 2: expected"),
    ([{"prompt": "p", "completion": "c", "legal_actions": "[0]"}], "legal_actions: expected a list of strings"),
    ([{"prompt": "p", "completion": "c", "invalid_move": True}], "holds no valid move to imitate"),
])
def test_a_log_that_cannot_be_read_names_the_key_the_file_and_the_line(tokenizer, tmp_path, rows, message):
    logged = _log(tmp_path / "moves.jsonl", rows)
    with pytest.raises(ValueError, match=f"model.learners.student.imitate.teacher: .*{message}"):
        LoggedMoves(logged, tokenizer, 8, "model.learners.student.imitate").once()


def test_a_missing_log_and_a_log_with_anticipatory_seats_are_refused_naming_the_key(tmp_path):
    with pytest.raises(ValueError, match="model.learners.student.imitate.teacher: no file '.*nowhere.jsonl'"):
        ImitationSettings(f"log:{tmp_path / 'nowhere.jsonl'}").check("model.learners.student.imitate")
    (tmp_path / "moves.jsonl").write_text("")
    with pytest.raises(ValueError, match="anticipatory: the seats it shares are a learner teacher's"):
        ImitationSettings(f"log:{tmp_path / 'moves.jsonl'}", anticipatory=0.1).check("k")


def test_min_reward_imitates_only_the_logged_moves_of_games_rewarded_enough(tokenizer, tmp_path):
    """Rejection sampling over a log: the lines whose reward reaches ``min_reward`` (an episode
    log's records carry the role's reward); one without a reward is refused naming the line, and
    a live teacher's moves cannot be filtered so."""
    rows = [{"prompt": "a", "completion": "[0]", "reward": 1.0}, {"prompt": "b", "completion": "[1]", "reward": -1.0},
            {"prompt": "c", "completion": "[2]", "reward": 0.5}, {"prompt": "d", "completion": "[3]", "reward": 0}]
    settings = ImitationSettings(f"log:{_log(tmp_path / 'moves.jsonl', rows).path}", min_reward=0.5)
    kept = LoggedMoves(settings.check("k"), tokenizer, 8, "k").once()
    assert [tokenizer.decode(list(prompt)) for prompt, _, _ in kept] == ["a", "c"]
    unfiltered = LoggedMoves(ImitationSettings(settings.teacher).check("k"), tokenizer, 8, "k").once()
    assert len(unfiltered) == 4
    rows.append({"prompt": "e", "completion": "[4]"})
    _log(tmp_path / "moves.jsonl", rows)
    with pytest.raises(ValueError, match=r"k.teacher: .*moves.jsonl line 5: reward: k.min_reward keeps lines by their "
                                         r"logged reward, and this line has none"):
        LoggedMoves(settings.check("k"), tokenizer, 8, "k").once()
    with pytest.raises(ValueError, match="k.min_reward: filters logged moves .* bot:random, whose moves are all"):
        ImitationSettings("bot:random", min_reward=1.0).check("k")
    _log(tmp_path / "moves.jsonl", rows[:4])
    with pytest.raises(ValueError, match="holds no valid move with a reward of at least 2.0 to imitate"):
        LoggedMoves(ImitationSettings(settings.teacher, min_reward=2.0).check("k"), tokenizer, 8, "k").once()


def test_a_logs_buffer_fills_before_the_first_step_and_a_resumed_run_reads_it_again_alike(tokenizer, tmp_path):
    """The log's moves go to the buffer once (their own random stream); the run's state keeps only
    how many were read, and a resumed run's buffer, read again, draws what the first one drew.
    A file that changed since is refused."""
    path = tmp_path / "moves.jsonl"
    _log(path, [{"prompt": f"prompt {k}", "completion": f"[{k % 9}]"} for k in range(40)])
    learners = Learners({"main": LearnerSettings(roles=["*"]), "student": LearnerSettings(
        imitate=ImitationSettings(f"log:{path}", size=10, batch=6))})

    def imitation():
        return Imitation(learners, tokenizer, max_new_tokens=4, seed=3)

    first = imitation()
    batches = [Batch(records=[], rollouts=[]) for _ in range(3)]
    for index, batch in enumerate(batches):
        first.apply(batch, index)
    assert [b.metrics["imitation/student/new_moves"] for b in batches] == [40, 0, 0]
    assert batches[0].metrics["imitation/student/buffer"] == 10 and len(batches[2].records) == 6
    state = first.state_dict()
    assert state == {"student": {"log": str(path), "seen": 40}}, "the moves themselves stay in the file"
    resumed = imitation()
    resumed.load_state_dict(json.loads(json.dumps(state)))
    again = Batch(records=[], rollouts=[])
    resumed.apply(again, 2)
    assert [(r.prompt_ids, r.completion_ids) for r in again.records] == [
        (r.prompt_ids, r.completion_ids) for r in batches[2].records]
    _log(path, [{"prompt": "p", "completion": "c"}])
    with pytest.raises(ValueError, match="holds 1 valid moves, and the checkpoint's run read 40: the file changed"):
        imitation().load_state_dict(state)


# ---- NFSP's anticipatory mix ------------------------------------------------------------------------
def _learners(anticipatory=0.1):
    return Learners({"main": LearnerSettings(roles=["*"]), "average": LearnerSettings(
        imitate=ImitationSettings(teacher="learner:main", anticipatory=anticipatory))})


@pytest.mark.parametrize("anticipatory", [0.0, 0.3])
def test_the_teacher_keeps_one_seat_and_shares_the_others_with_its_average(anticipatory):
    learners = _learners(anticipatory)
    game = GameSettings(id="kuhn_poker_v1", opponents={"learner": 0.5, "bot:random": 0.5})
    mix = AnticipatoryPlay(FixedMix(), MAIN, AVERAGE, anticipatory, learners.resolve)
    rng = random.Random(0)
    mirror = teacher_second = 0
    for seats in mix.batch_seats([game] * 4000, rng):
        resolved = [learners.resolve(p, a) for a, p in seats.items()]
        if PolicyRef(PolicyKind.BOT, "random") in resolved:
            assert sorted(map(str, resolved)) == ["bot:random", "learner:main"], "a game without a second seat is as drawn"
            continue
        mirror += 1
        assert resolved.count(MAIN) >= 1
        teacher_second += resolved.count(MAIN) == 2
    assert mirror > 1800
    assert abs(teacher_second / mirror - anticipatory) < 0.035


# ---- settings ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("imitate, extra, message", [
    ({}, {}, "imitate.teacher: required"),
    ({"teacher": "learner"}, {}, "name the learner imitated"),
    ({"teacher": "learner:nobody"}, {}, "is not another learner"),
    ({"teacher": "learner:average"}, {}, "is not another learner"),
    ({"teacher": "remote:gpt"}, {}, "text only"),
    ({"teacher": "bot:random", "size": 0}, {}, "imitate.size: expected an int >= 1"),
    ({"teacher": "bot:random", "batch": 0}, {}, "imitate.batch: expected an int >= 1"),
    ({"teacher": "bot:random", "sampling": "fifo"}, {}, "imitate.sampling: expected one of reservoir, recent"),
    ({"teacher": "bot:random", "anticipatory": 0.5}, {}, "anticipatory: the seats it shares are a learner"),
    ({"teacher": "learner:main", "anticipatory": 1.0}, {}, "anticipatory: expected a probability in [0, 1)"),
    ({"teacher": "learner:main"}, {"roles": ["player_0"]}, "give it no roles"),
    ({"teacher": "learner:main"}, {"loss": {"clip_high": 0.3}}, "drop loss"),
])
def test_bad_imitation_settings_name_their_key(imitate, extra, message):
    settings = {"main": LearnerSettings(roles=["*"]),
                "average": LearnerSettings(imitate=ImitationSettings(**imitate), **extra)}
    with pytest.raises(ValueError, match=f"model.learners.average.*{message}".replace("[", r"\[").replace(")", r"\)")):
        Learners(settings)


def test_a_bot_teacher_the_run_does_not_have_is_refused_before_any_game():
    module, dm = build_from_config("--config", os.path.join(CONFIGS, "tictactoe_tiny.yaml"), "--model.learners",
                                   json.dumps({"main": {"roles": ["*"]},
                                               "student": {"imitate": {"teacher": "bot:grandmaster"}}}))
    with pytest.raises(ValueError, match="model.learners.student.imitate.teacher: no bot named 'grandmaster'"):
        dm.build_engine(module)


# ---- fits -------------------------------------------------------------------------------------------
STUDENT = ["--model.learners", json.dumps({"main": {"roles": ["*"]}, "student": {
    "imitate": {"teacher": "bot:tictactoe_tactical", "size": 2000, "batch": 128}, "optimizer": {"lr": 0.003}}}),
    "--data.games", json.dumps([{"id": "tictactoe_v1", "env_kwargs": {"invalid_move": "random"},
                                 "opponents": {"bot:tictactoe_tactical": 1.0},
                                 "reward": {"outcome": "payoff", "invalid_move_penalty": 3.0}}]),
    "--data.episodes_per_batch", "16", "--data.eval.held_out", "[]"]


class _Metrics(L.Callback):
    def __init__(self):
        self.rows = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.rows.append({k: float(v) for k, v in trainer.callback_metrics.items()})


@pytest.mark.slow  # a fit
def test_an_imitation_learner_learns_its_teachers_moves_while_the_other_learns_by_policy_gradient(tmp_path):
    """Eight steps against the tactical bot: the student's likelihood of the bot's moves rises
    far above where it started, from a buffer that grows with every game; its own adapter moves and
    the main learner's records are its own moves, never the bot's."""
    module, dm = build_from_config("--config", os.path.join(CONFIGS, "tictactoe_tiny.yaml"), *STUDENT)
    start = {k: v.detach().clone() for k, v in module.named_parameters() if v.requires_grad}
    seen = _Metrics()
    trainer = make_trainer(max_steps=8, limit_val_batches=0, logger=False, enable_checkpointing=False,
                           default_root_dir=str(tmp_path), callbacks=[seen], enable_progress_bar=False)
    trainer.fit(module, datamodule=dm)
    nll = [row["train/student/imitation_nll"] for row in seen.rows]
    assert nll[0] > 4.0 and max(nll[-2:]) < 0.6 * nll[0], nll
    buffer = [row["imitation/student/buffer"] for row in seen.rows]
    assert buffer == sorted(buffer) and buffer[-1] > 6 * 30
    assert all(row["train/student/records"] == 128 for row in seen.rows)
    assert "train/student/pg_loss" not in seen.rows[-1] and "train/main/pg_loss" in seen.rows[-1]
    moved = {name for name, value in module.named_parameters() if value.requires_grad
             and not torch.equal(value.detach(), start[name])}
    assert any(adapter_of("student") in name for name in moved) and any(adapter_of("main") in name for name in moved)
    records = module.last_batch.records
    assert {r.learner for r in records} == {"main", "student"}
    assert all(r.advantage == 0.0 for r in records if r.learner == "student")


NFSP = ["--model.learners", json.dumps({"main": {"roles": ["*"]}, "average": {
    "imitate": {"teacher": "learner:main", "size": 500, "batch": 32, "anticipatory": 0.25}}}),
    "--data.episodes_per_batch", "12", "--data.games", json.dumps([{
        "id": "kuhn_poker_v1", "env_kwargs": {"invalid_move": "random"}, "opponents": {"learner": 1.0},
        "reward": {"outcome": "payoff", "invalid_move_penalty": 3.0}}])]
# (the untrained tiny model's Kuhn moves are nearly all invalid, and invalid moves are never
# imitated: a resume test of a few steps imitates the random bot, whose moves are all legal)
RANDOM_STUDENT = ["--model.learners", json.dumps({"main": {"roles": ["*"]}, "student": {
    "imitate": {"teacher": "bot:random", "size": 20, "batch": 16}}}), "--data.episodes_per_batch", "12"]


def _checkpointed_fit(config: str, root, steps: int, *args: str):
    checkpointed_fit(os.path.join(CONFIGS, config), root, steps, *args)


def _resumable_fit(root, steps: int, *args: str):
    _checkpointed_fit("kuhn_poker_tiny.yaml", root, steps, *RANDOM_STUDENT, *args)


@pytest.mark.slow  # a fit
def test_a_resumed_fit_continues_the_buffer_and_both_learners_exactly(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _resumable_fit(straight, 4)
    _resumable_fit(resumed, 2)
    _resumable_fit(resumed, 4, "--ckpt_path", str(resumed / "ckpt" / "last.ckpt"))
    ours = torch.load(resumed / "ckpt" / "last.ckpt", weights_only=False)
    theirs = torch.load(straight / "ckpt" / "last.ckpt", weights_only=False)
    buffer = theirs["SelfPlayDataModule"]["imitation"]["student"]
    assert buffer["seen"] > 20 and len(buffer["moves"]) == 20, "the reservoir filled and then sampled"
    assert ours["SelfPlayDataModule"]["imitation"] == theirs["SelfPlayDataModule"]["imitation"]
    for key, value in theirs["state_dict"].items():
        assert torch.equal(ours["state_dict"][key], value), key
    assert any(adapter_of("student") in key for key in theirs["state_dict"])


@pytest.mark.slow  # a fit
def test_the_episode_logs_records_are_what_each_step_trained_on(tmp_path, tokenizer):
    """``data.episode_log.records`` is written once the batch is complete: each step's records as
    trained (the student's imitated moves flagged ``imitation``; its own moves, which it does not
    train on, absent). Read back as a teacher, only the moves played and trained by policy
    gradient are taken, never those that were themselves imitated."""
    from tests.helpers import fit_batches

    records = tmp_path / "records.jsonl"
    _, batches = fit_batches(os.path.join(CONFIGS, "tictactoe_tiny.yaml"), tmp_path, 2, *RANDOM_STUDENT,
                             "--data.eval.held_out", "[]", "--data.episode_log.path", str(tmp_path / "episodes.log"),
                             "--data.episode_log.records", str(records))
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(rows) == sum(len(batch.records) for batch in batches)
    for index, batch in enumerate(batches):
        logged = [(row["learner"], row["imitation"], row["completion"]) for row in rows if row["batch"] == index]
        assert logged == [(r.learner, r.imitation, tokenizer.decode(r.completion_ids)) for r in batch.records]
    assert {(row["learner"], row["imitation"]) for row in rows} == {("main", False), ("student", True)}
    played = sum(1 for row in rows if not row["imitation"] and not row["invalid_move"])
    if played:  # (the untrained main learner's moves are mostly invalid: maybe all)
        assert len(LoggedMoves(LoggedGames(str(records)), tokenizer, 4, "k").once()) == played
    else:  # the student's rows are valid moves, and still not taken
        with pytest.raises(ValueError, match="holds no valid move to imitate"):
            LoggedMoves(LoggedGames(str(records)), tokenizer, 4, "k").once()


def test_validation_reports_the_exploitability_of_the_best_response_and_of_the_average():
    module, dm = build_from_config("--config", os.path.join(CONFIGS, "kuhn_poker_tiny.yaml"), *NFSP,
                                   "--data.eval.exploitability", "true", "--data.eval.games", "8")
    engine = dm.build_engine(module)
    try:
        game, prefix, opponents, games = engine.validations()[0]
        metrics, line = engine.validate(game, prefix, opponents, games)
    finally:
        engine.close()
    assert 0 < metrics[f"{prefix}/exploitability"] and 0 < metrics[f"{prefix}/average/exploitability"]
    assert "exploitability (average)" in line


# ---- a warm start -----------------------------------------------------------------------------------
WARM = ["--data.warm_start", json.dumps({"teacher": "bot:tictactoe_tactical", "steps": 3, "batch": 64, "size": 500}),
        "--data.episodes_per_batch", "8", "--data.eval.held_out", "[]"]


class _Batches(L.Callback):
    def __init__(self):
        self.batches = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches.append(pl_module.last_batch)


def _warm_fit(root, steps: int, *args: str):
    _checkpointed_fit("tictactoe_tiny.yaml", root, steps, *WARM, *args)


@pytest.mark.slow  # a fit
def test_a_warm_start_imitates_the_teacher_in_the_learners_seats_then_self_play_goes_on(tmp_path):
    module, dm = build_from_config("--config", os.path.join(CONFIGS, "tictactoe_tiny.yaml"), *WARM)
    kept = _Batches()
    trainer = make_trainer(max_steps=5, limit_val_batches=0, logger=False, default_root_dir=str(tmp_path),
                           callbacks=[kept], enable_progress_bar=False)
    trainer.fit(module, datamodule=dm)
    warm, after = kept.batches[:3], kept.batches[3:]
    for batch in warm:
        seats = {str(p) for r in batch.rollouts for p in r.seats.values()}
        assert "learner" not in seats and "bot:tictactoe_tactical" in seats
        assert len(batch.records) == 64 and all(r.imitation and r.learner == "" for r in batch.records)
    for batch in after:
        assert all(any(p.kind is PolicyKind.LEARNER for p in r.seats.values()) for r in batch.rollouts)
        assert batch.records and not any(r.imitation for r in batch.records)
    saved = tmp_path / "checkpoints" / "warm_start.ckpt"
    state = torch.load(saved, weights_only=False)
    assert state["global_step"] == 3 and "SelfPlayDataModule" in state, "a whole checkpoint, resumable"
    fresh, _ = build_from_config("--config", os.path.join(CONFIGS, "tictactoe_tiny.yaml"))
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    fresh.load_policy_weights(saved)
    assert any(not torch.equal(v, before[k]) for k, v in fresh.state_dict().items()), "it holds what was imitated"


class _NaNAtBatch(L.Callback):
    """Fault injection into the real module: the training batch numbered ``at`` (0-based) gets a
    NaN loss (its optimizer step is skipped, as for any non-finite loss), and the trainable
    weights are noted at the end of every batch."""

    def __init__(self, monkeypatch, at: int):
        from sp_lightning.policy_forward import PolicyForward

        self.at, self.batch, self.weights = at, -1, []
        original, injector = PolicyForward.__call__, self

        def forward(policy_forward, batch, disable_adapter=False, hidden=False):
            logprobs, logits, final = original(policy_forward, batch, disable_adapter, hidden)
            if injector.batch == injector.at and not disable_adapter:
                logprobs = logprobs * float("nan")
            return logprobs, logits, final

        monkeypatch.setattr(PolicyForward, "__call__", forward)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batch = batch_idx

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.weights.append({k: v.detach().clone() for k, v in pl_module.state_dict().items()})


@pytest.mark.slow  # a fit
def test_the_warm_start_checkpoint_is_its_last_batchs_even_when_a_step_was_skipped(tmp_path, monkeypatch):
    """The warm start is its first ``steps`` batches (the data side counts them): a warm-start
    batch whose optimizer step is skipped (a non-finite loss) still counts, so
    ``warm_start.ckpt`` holds the weights after the third batch, not after a self-play step."""
    module, dm = build_from_config("--config", os.path.join(CONFIGS, "tictactoe_tiny.yaml"), *WARM)
    nan = _NaNAtBatch(monkeypatch, at=1)
    kept = _Batches()
    trainer = make_trainer(max_steps=4, limit_val_batches=0, logger=False, default_root_dir=str(tmp_path),
                           callbacks=[nan, kept], enable_progress_bar=False)
    trainer.fit(module, datamodule=dm)
    assert all(r.imitation for b in kept.batches[:3] for r in b.records)
    assert not any(r.imitation for r in kept.batches[3].records), "batch 3 is self-play"
    state = torch.load(tmp_path / "checkpoints" / "warm_start.ckpt", weights_only=False)
    assert state["global_step"] == 2, "two optimizer steps in the three warm-start batches"
    assert all(torch.equal(v, nan.weights[2][k]) for k, v in state["state_dict"].items())
    assert any(not torch.equal(v, nan.weights[3][k]) for k, v in state["state_dict"].items())


@pytest.mark.slow  # a fit
def test_a_fit_resumed_during_its_warm_start_continues_it_exactly(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _warm_fit(straight, 5)
    _warm_fit(resumed, 2)
    _warm_fit(resumed, 5, "--ckpt_path", str(resumed / "ckpt" / "last.ckpt"))
    ours = torch.load(resumed / "ckpt" / "last.ckpt", weights_only=False)
    theirs = torch.load(straight / "ckpt" / "last.ckpt", weights_only=False)
    for key, value in theirs["state_dict"].items():
        assert torch.equal(ours["state_dict"][key], value), key
    warm = [torch.load(root / "ckpt" / "warm_start.ckpt", weights_only=False) for root in (resumed, straight)]
    assert warm[0]["global_step"] == warm[1]["global_step"] == 3
    for key, value in warm[1]["state_dict"].items():
        assert torch.equal(warm[0]["state_dict"][key], value), f"the resumed run's warm start ends elsewhere: {key}"


@pytest.mark.parametrize("warm_start, extra, message", [
    ({"teacher": "learner", "steps": 5}, [], "data.warm_start.teacher: a warm start imitates a bot"),
    ({"teacher": "bot:random", "steps": -1}, [], r"data.warm_start.steps: expected an int >= 0"),
    ({"steps": 5}, [], "data.warm_start.teacher: required"),
    ({"teacher": "bot:nobody", "steps": 5}, [], "data.warm_start.teacher: no bot named 'nobody'"),
    ({"teacher": "bot:random", "steps": 5, "min_reward": 1.0}, [], "data.warm_start.min_reward: filters logged"),
    ({"teacher": "bot:random", "steps": 5}, ["--model.learners", json.dumps(
        {"x": {"roles": ["player_0"]}, "o": {"roles": ["player_1"]}})], "plays every role"),
])
def test_bad_warm_start_settings_name_their_key(warm_start, extra, message):
    with pytest.raises(ValueError, match=message):
        module, dm = build_from_config("--config", os.path.join(CONFIGS, "tictactoe_tiny.yaml"),
                                       "--data.warm_start", json.dumps(warm_start), *extra)
        dm.build_engine(module)


@pytest.mark.slow  # a fit
def test_a_league_rates_only_the_learners_own_games_after_a_warm_start_in_its_seats(tmp_path):
    """The warm start's teacher (here a bot the league does not have) plays the learner's seats,
    mirror games included, for 3 steps: no game of those is rated or counted as the learner's, and
    the league goes on as usual from step 4."""
    league = tmp_path / "league"
    _checkpointed_fit("kuhn_poker_league_tiny.yaml", tmp_path, 6, "--data.league.dir", str(league),
                      "--data.league.evaluator", '{"every": 0}', "--data.episodes_per_batch", "8",
                      "--data.league.games_per_match", "1",
                      "--data.warm_start", json.dumps({"teacher": "bot:kuhn_poker_nash", "steps": 3, "batch": 32}))
    with open(league / "league.json") as f:
        state = json.load(f)
    steps = sorted({match["step"] for match in state["matches"]})
    assert steps and steps[0] > 3, f"games rated at steps {steps}"
    assert "bot:kuhn_poker_nash" not in json.dumps(state["agents"])
    assert (tmp_path / "ckpt" / "warm_start.ckpt").exists()


@pytest.mark.slow  # a fit
def test_a_warm_start_can_imitate_a_checkpoint_given_as_an_adapter_directory(tmp_path):
    """The teacher ``checkpoint:<dir>`` is registered with the backend and plays the learner's
    seats by its name; its own tokens are what the learner imitates."""
    teacher, _ = build_from_config("--config", os.path.join(CONFIGS, "tictactoe_tiny.yaml"))
    teacher.save_adapter(tmp_path / "teacher")
    module, dm = build_from_config("--config", os.path.join(CONFIGS, "tictactoe_tiny.yaml"), *WARM,
                                   "--data.warm_start.teacher", f"checkpoint:{tmp_path / 'teacher'}")
    kept = _Batches()
    trainer = make_trainer(max_steps=2, limit_val_batches=0, logger=False, enable_checkpointing=False,
                           default_root_dir=str(tmp_path), callbacks=[kept], enable_progress_bar=False)
    trainer.fit(module, datamodule=dm)
    taught = set()
    for batch in kept.batches:
        assert "checkpoint:teacher" in {str(p) for r in batch.rollouts for p in r.seats.values()}
        played = [s for r in batch.rollouts for s in r.steps if str(s.completion.policy) == "checkpoint:teacher"]
        assert played and all(s.completion.completion_ids for s in played)
        taught |= {(tuple(s.completion.prompt_ids), tuple(s.completion.completion_ids)) for s in played
                   if not s.info["invalid_move"]}
        assert batch.metrics["imitation/learner/new_moves"] == sum(not s.info["invalid_move"] for s in played)
        assert all(r.imitation and (tuple(r.prompt_ids), tuple(r.completion_ids)) in taught for r in batch.records)
    assert taught, "the untrained teacher played some legal moves to imitate"


@pytest.mark.slow  # two fits
def test_a_warm_start_imitates_the_records_an_earlier_runs_episode_log_wrote(tmp_path):
    """One run logs its records (``data.episode_log.records``); they read back to the very ids it
    played, its invalid moves left out; a second run warm-starts on them (``log:<path>``): its
    first steps train on those moves only, while its learner plays its own seats."""
    from tests.helpers import fit_batches

    records = tmp_path / "records.jsonl"
    config = os.path.join(CONFIGS, "tictactoe_tiny.yaml")
    _, logged = fit_batches(config, tmp_path / "first", 2, "--data.episodes_per_batch", "8", "--data.eval.held_out",
                            "[]", "--data.episode_log.path", str(tmp_path / "episodes.log"),
                            "--data.episode_log.records", str(records))
    played = [(tuple(r.prompt_ids), tuple(r.completion_ids)) for b in logged for r in b.records if not r.invalid_move]
    assert played and len(played) < sum(len(b.records) for b in logged), "some moves were invalid, some not"
    _, tok = load_policy(PolicySettings(model="tiny"))
    assert [m[:2] for m in LoggedMoves(LoggedGames(str(records)), tok, 4, "k").once()] == played

    _, warm = fit_batches(config, tmp_path / "second", 2, "--data.episodes_per_batch", "8", "--data.eval.held_out",
                          "[]", "--data.warm_start", json.dumps({"teacher": f"log:{records}", "steps": 2, "batch": 32}))
    for batch in warm:
        assert any(p.kind is PolicyKind.LEARNER for r in batch.rollouts for p in r.seats.values())
        assert len(batch.records) == 32 and all(r.imitation for r in batch.records)
        assert {(tuple(r.prompt_ids), tuple(r.completion_ids)) for r in batch.records} <= set(played)
    assert warm[0].metrics["imitation/learner/new_moves"] == len(played)


@pytest.mark.slow  # a fit
def test_imitation_learners_train_on_a_server_fleet_and_the_average_is_served_as_its_own_adapter(serve, tmp_path):
    """The server backend (``ServerRolloutWorker`` against a scripted vLLM-like server on loopback):
    a student of the random bot trains on the bot's moves, and NFSP's average, seated by
    ``anticipatory``, is loaded onto the server as its own adapter each step and plays from it."""
    from tests.helpers import fit_batches

    server = serve()
    learners = {"main": {"roles": ["*"]},
                "student": {"imitate": {"teacher": "bot:random", "size": 200, "batch": 16}},
                "average": {"imitate": {"teacher": "learner:main", "size": 200, "batch": 16, "anticipatory": 0.0}}}
    rollout = {"class_path": "sp_lightning.rollout.ServerRolloutWorker",
               "init_args": {"base_urls": [server.url], "served_model": "m", "adapter_dir": str(tmp_path / "adapters")}}
    games = [{"id": "tictactoe_v1", "env_kwargs": {"invalid_move": "random"},
              "opponents": {"learner": 0.5, "bot:random": 0.5}, "reward": {"outcome": "payoff"}}]
    _, batches = fit_batches(os.path.join(CONFIGS, "tictactoe_tiny.yaml"), tmp_path, 2, "--model.learners",
                             json.dumps(learners), "--data.rollout", json.dumps(rollout), "--data.games",
                             json.dumps(games), "--data.episodes_per_batch", "8", "--data.eval.held_out", "[]")
    for batch in batches:
        student = [r for r in batch.records if r.learner == "student"]
        assert len(student) == 16 and all(r.imitation for r in student)
        assert batch.metrics["imitation/student/new_moves"] > 0
        assert batch.metrics["imitation/average/played"] > 0
    loaded = {body["lora_name"] for body in server.bodies if "lora_name" in body}
    asked = {body["model"] for body in server.bodies if "prompt" in body}
    average = {name for name in asked if name.startswith("learner-average-")}
    assert len(average) == 2 and average <= loaded, "each version of the average loaded, then played from"
