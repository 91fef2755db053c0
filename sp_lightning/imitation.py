"""Imitation learners: a learner trained by cross-entropy on another policy's moves.

A learner of ``model.learners`` with an ``imitate`` block does not learn by policy gradient: each
training step it takes ``batch`` moves from a buffer of its teacher's moves and is trained to say
them (``loss_terms.Imitation``), with its own optimizer settings, in the same step as the other
learners. The buffer fills from the games the teacher plays in the run (every trainable game of
every batch, on every rank its own), so the teacher must sit somewhere in them: a learner of the
run, a bot or a checkpoint of the training mix::

    model:
      learners:
        main: {roles: ["*"]}
        average:                       # NFSP's average policy (Heinrich & Silver 2016)
          imitate: {teacher: "learner:main", size: 50000, batch: 256, anticipatory: 0.1}
          optimizer: {lr: 0.003}

- ``sampling: reservoir`` (the default) keeps every move ever seen with the same chance
  (Vitter's algorithm R), so the learner imitates the teacher's average over the whole run: the
  average strategy of fictitious play, which converges in two-player zero-sum games where the
  last iterate of gradient self-play cycles; ``recent`` keeps the last ``size`` moves.
- A teacher that is a model (a learner, a checkpoint, the base model) hands over its own tokens;
  a bot's move is tokenised as the learner would answer it (the prompt the seat was shown, the
  move's text, and the end of turn where ``max_new_tokens`` leaves room for it). Invalid moves
  are never imitated.
- ``anticipatory`` (NFSP's eta) makes this learner an opponent: wherever the teacher would play
  a second seat of a training game (mirror self-play, a league's mirror pick), the seat is
  played by the teacher with probability eta and by this learner otherwise; the teacher keeps
  one seat of its own. So the teacher learns a best response to a mix of itself and its average,
  and the average learns from the best responses.
- The learner's own moves (where it is seated) are never trained by policy gradient.
- ``teacher: log:<path>`` imitates logged games instead of a policy of the run: a JSONL file of
  moves (``LoggedMoves``), such as the decoded records an earlier run's episode log wrote
  (``data.episode_log.records``, from ``fit`` or from ``rollout --checkpoint``). The buffer takes
  the file's moves once, by the same sampling, before the first step.

The buffer is part of the run's state: a resumed run continues with the buffer the checkpoint
saved, and each batch's draws come from the batch's own random stream, as the games do.
"""

from __future__ import annotations

import json
import random
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lightning as L

from sp_lightning.learners import ImitationSettings, LoggedGames
from sp_lightning.types import PolicyKind, PolicyRef, Rollout, TrainingRecord

if TYPE_CHECKING:
    from sp_lightning.games import GameSettings, OpponentSampler


@dataclass
class WarmStartSettings:
    """``data.warm_start``: the run's first ``steps`` training steps imitate a teacher, then self-play
    goes on from there. Meanwhile the teacher plays every seat the learner would (so its moves
    are those of the training games' positions against the training opponents), the learner is
    trained by cross-entropy on moves drawn from a buffer of them, and after step ``steps`` the
    checkpoint ``warm_start.ckpt`` is written beside the run's checkpoints, to be evaluated like
    the result. The learner is the run's one learner (or the one of ``roles: ["*"]``)."""

    teacher: str = ""
    """The policy imitated: ``bot:<name>``, ``checkpoint:<id>`` or ``base``, or the logged games of
    ``log:<path>`` (a JSONL file of moves, ``LoggedMoves``; the learner then plays its own seats, and
    its moves there are not trained)."""
    steps: int = 0
    """Training steps of imitation (0: no warm start)."""
    size: int = 50_000
    """Moves the buffer keeps."""
    batch: int = 256
    """Moves trained on per step."""
    sampling: str = "reservoir"
    """reservoir | recent (as ``imitate.sampling``)."""
    min_reward: float | None = None
    """With a ``log:`` teacher, only the lines whose logged reward is at least this (as
    ``imitate.min_reward``)."""

    def check(self, key: str = "data.warm_start") -> PolicyRef | LoggedGames | None:
        """The teacher (None: no warm start); raises naming ``key`` on a bad setting."""
        if not (isinstance(self.steps, int) and self.steps >= 0):
            raise ValueError(f"{key}.steps: expected an int >= 0, got {self.steps!r}")
        if not self.steps:
            return None
        if str(self.teacher).partition(":")[0] == PolicyKind.LEARNER.value:
            raise ValueError(f"{key}.teacher: a warm start imitates a bot, a checkpoint, the base model or logged "
                             f"games, not {self.teacher}")
        return self.imitation().check(key)

    def imitation(self) -> ImitationSettings:
        """The warm start as the imitation settings of the learner it warms."""
        return ImitationSettings(self.teacher, self.size, self.batch, self.sampling, min_reward=self.min_reward)


Move = tuple[tuple[int, ...], tuple[int, ...], tuple[str, ...] | None]
"""One imitated move: prompt ids, completion ids, the legal moves (None: not known)."""


class MoveBuffer:
    """The teacher's moves, kept by reservoir sampling or as the most recent ones."""

    def __init__(self, size: int, sampling: str = "reservoir"):
        self.size, self.sampling = size, sampling
        self.moves: list[Move] | deque = [] if sampling == "reservoir" else deque(maxlen=size)
        self.seen = 0
        self._prompts: dict[tuple[int, ...], tuple[int, ...]] = {}  # one copy of each prompt kept

    def __len__(self) -> int:
        return len(self.moves)

    def add(self, moves: list[Move], rng: random.Random) -> None:
        for prompt, completion, legal in moves:
            move = (self._prompts.setdefault(prompt, prompt), completion, legal)
            self.seen += 1
            if self.sampling == "recent" or len(self.moves) < self.size:
                self.moves.append(move)
                continue
            slot = rng.randrange(self.seen)  # algorithm R: the n-th move replaces one w.p. size / n
            if slot < self.size:
                self.moves[slot] = move
        if len(self._prompts) > 4 * self.size:  # forget prompts no kept move uses
            self._prompts = {move[0]: move[0] for move in self.moves}

    def draw(self, count: int, rng: random.Random) -> list[Move]:
        if not self.moves:
            return []
        return [self.moves[rng.randrange(len(self.moves))] for _ in range(count)]

    def state_dict(self) -> dict[str, Any]:
        return {"moves": list(self.moves), "seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.moves = [] if self.sampling == "reservoir" else deque(maxlen=self.size)
        self._prompts = {}
        self.seen = 0
        self.add(list(state.get("moves", [])), random.Random(0))  # fits: at most size moves
        self.seen = int(state.get("seen", self.seen))


class TeacherMoves:
    """A teacher's valid moves in finished games, as token ids a learner can be trained on."""

    def __init__(self, teacher: PolicyRef, tokenizer, max_new_tokens: int):
        self.teacher = teacher
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self._answers: dict[str, tuple[int, ...]] = {}  # a bot's few distinct moves, each tokenised once

    def of(self, rollouts: list[Rollout]) -> list[Move]:
        """The teacher's valid moves, in play order; a bot's prompts encoded in one batched call."""
        from sp_lightning.rollout.chat import encode_chats

        steps: list = []
        for rollout in rollouts:
            self._collect(rollout, steps)
        bot_steps = [step for step in steps if not step.completion.completion_ids]
        prompts = iter(encode_chats(self.tokenizer, [step.info["messages"] for step in bot_steps]))
        moves = []
        for step in steps:
            c = step.completion
            legal = tuple(step.info["legal_actions"]) if step.info.get("legal_actions") else None
            if c.completion_ids:
                moves.append((tuple(c.prompt_ids), tuple(c.completion_ids), legal))
            else:  # a bot: its move as the game's template has a model answer it, tokenised
                moves.append((tuple(next(prompts)), self._answer(step.info.get("answer", c.text)), legal))
        return moves

    def once(self) -> list[Move]:
        """Moves that come before any game (none: a policy's moves come from the games it plays)."""
        return []

    def _collect(self, rollout: Rollout, steps: list) -> None:
        for step in rollout.steps:
            c = step.completion
            if (c.policy != self.teacher or not step.in_trainable_episode or step.info.get("invalid_move")
                    or c.refused):
                continue
            if c.completion_ids or (step.info.get("messages") and c.text):
                steps.append(step)
        for child in rollout.children:
            self._collect(child, steps)

    def _answer(self, text: str) -> tuple[int, ...]:
        if text not in self._answers:
            self._answers[text] = answer_ids(self.tokenizer, text, self.max_new_tokens)
        return self._answers[text]


def answer_ids(tokenizer, text: str, max_new_tokens: int) -> tuple[int, ...]:
    """A move's text as the learner would answer it: its tokens, then the end of turn where
    ``max_new_tokens`` leaves room for it."""
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    eos = tokenizer.eos_token_id
    return tuple(ids + [eos] if eos is not None and len(ids) < max_new_tokens else ids)


class LoggedMoves:
    """A teacher that is logged games: a JSONL file, one move a line, read once before the first step.

    A line is ``{"prompt": ..., "completion": "<text>"}``, optionally with ``legal_actions`` (the
    moves the game allowed) and ``invalid_move``:

    - ``prompt`` as text is the prompt as the model saw it, chat template applied, and the
      completion is taken as written (its end-of-turn token included where the model said it):
      the decoded records of an episode log (``data.episode_log.records``) are such lines, and the
      same tokenizer reads them back to the same ids;
    - ``prompt`` as chat messages (``[{"role": ..., "content": ...}, ...]``) is rendered with the
      learner's chat template, and the completion is answered as a bot's move is (``answer_ids``).

    Lines marked ``invalid_move`` are skipped (invalid moves are never imitated), as are an episode
    log's records that were a teacher's moves already (``imitation``) and, with ``min_reward``,
    those whose ``reward`` is below it (a line without one is refused). Any other line that cannot
    be read stops the run with the file, the line and what was expected.
    """

    teacher = None
    """No policy of the run plays for it (``Imitation.warm_teacher``)."""

    def __init__(self, logged: LoggedGames, tokenizer, max_new_tokens: int, key: str):
        self.path, self.tokenizer, self.max_new_tokens, self.key = logged.path, tokenizer, max_new_tokens, key
        self.min_reward = logged.min_reward

    def of(self, rollouts: list[Rollout]) -> list[Move]:
        return []

    def once(self) -> list[Move]:
        """Every valid move of the file, in its order."""
        from sp_lightning.rollout.chat import encode_chats

        with open(self.path, encoding="utf-8") as handle:
            rows = [row for row in (self._row(line, number) for number, line in enumerate(handle, 1) if line.strip())
                    if not (row.get("invalid_move") or row.get("imitation")) and self._rewarded(row)]
        if not rows:
            kept = f" with a reward of at least {self.min_reward}" if self.min_reward is not None else ""
            raise ValueError(f"{self.key}.teacher: {self.path} holds no valid move{kept} to imitate")
        chats = iter(encode_chats(self.tokenizer, [r["prompt"] for r in rows if not isinstance(r["prompt"], str)]))
        moves = []
        for row in rows:
            legal = tuple(row["legal_actions"]) if row.get("legal_actions") else None
            if isinstance(row["prompt"], str):  # as the model saw it: read back to its ids
                moves.append((tuple(self.tokenizer.encode(row["prompt"], add_special_tokens=False)),
                              tuple(self.tokenizer.encode(row["completion"], add_special_tokens=False)), legal))
            else:  # chat messages: rendered and answered as a bot's move
                moves.append((tuple(next(chats)), answer_ids(self.tokenizer, row["completion"], self.max_new_tokens),
                              legal))
        return moves

    def _row(self, line: str, number: int) -> dict:
        where = f"{self.key}.teacher: {self.path} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where}: not JSON ({error.msg})") from None
        prompt = row.get("prompt") if isinstance(row, dict) else None
        chat = (isinstance(prompt, list) and prompt
                and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in prompt))
        if not ((isinstance(prompt, str) or chat) and isinstance(row.get("completion"), str)):
            raise ValueError(f"{where}: expected {{\"prompt\": text or chat messages, \"completion\": text}}, got "
                             f"{line.strip()[:120]}")
        legal = row.get("legal_actions")
        if legal is not None and not (isinstance(legal, list) and all(isinstance(a, str) for a in legal)):
            raise ValueError(f"{where}: legal_actions: expected a list of strings, got {legal!r}")
        reward = row.get("reward")
        if self.min_reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
            raise ValueError(f"{where}: reward: {self.key}.min_reward keeps lines by their logged reward, and this "
                             f"line has {'none' if reward is None else repr(reward)}")
        return row

    def _rewarded(self, row: dict) -> bool:
        return self.min_reward is None or row["reward"] >= self.min_reward


@dataclass
class _Pupil:
    """A learner that imitates: its teacher's moves, their buffer, and until which batch (None: all run)."""

    settings: ImitationSettings
    teacher: TeacherMoves | LoggedMoves
    buffer: MoveBuffer
    until: int | None = None


class Imitation:
    """The run's imitation on the data side: after each batch is played, each imitating learner's
    buffer takes its teacher's moves, the learner's own records (where it was seated) are
    dropped, and its records for the step are drawn from the buffer. The imitation learners of
    ``model.learners`` imitate for the whole run; a warm start (``data.warm_start``) makes the
    run's learner one for its first ``steps`` batches."""

    def __init__(self, learners, tokenizer, max_new_tokens: int, seed: int, rank: int = 0,
                 warm_start: WarmStartSettings | None = None, bots=(), serve=lambda policy: policy):
        """``bots``: the names ``bot:<name>`` can seat (a bot teacher must be one of them); ``serve``:
        a teacher as the backend plays it (an adapter directory given as ``checkpoint:<dir>`` is
        registered and played by its name; ``Engine.served``)."""
        self.seed, self.rank = seed, rank
        self.pupils: dict[str, _Pupil] = {}

        def pupil(settings: ImitationSettings, key: str, until: int | None = None) -> _Pupil:
            teacher = settings.check(key)
            if isinstance(teacher, LoggedGames):
                moves = LoggedMoves(teacher, tokenizer, max_new_tokens, key)
            elif teacher.kind is PolicyKind.BOT and teacher.name not in bots:
                raise ValueError(f"{key}.teacher: no bot named {teacher.name!r}; expected one of "
                                 f"{', '.join('bot:' + b for b in sorted(bots))}")
            else:
                moves = TeacherMoves(serve(teacher), tokenizer, max_new_tokens)
            return _Pupil(settings, moves, MoveBuffer(settings.size, settings.sampling), until)

        for name in learners.imitating if learners is not None else []:
            self.pupils[name] = pupil(learners.settings[name].imitate, f"model.learners.{name}.imitate")
        if warm_start is not None and warm_start.check() is not None:
            whole = learners.whole() if learners is not None else None
            if whole is None:
                raise ValueError("data.warm_start: warms up the learner that plays every role; with model.learners "
                                 "give one roles: ['*']")
            settings = warm_start.imitation()
            self.pupils[whole.name] = pupil(settings, "data.warm_start", until=warm_start.steps)

    def __bool__(self) -> bool:
        return bool(self.pupils)

    def apply(self, batch, index: int) -> None:
        """Batch ``index``'s records made those training needs (see the class docstring), and its
        metrics ``imitation/<name>/...`` added."""
        pupils = {name: p for name, p in self.pupils.items() if p.until is None or index < p.until}
        for pupil in self.pupils.values():
            if pupil.until is not None and index >= pupil.until and pupil.buffer.seen:  # the warm start is over
                pupil.buffer = MoveBuffer(pupil.settings.size, pupil.settings.sampling)
        if not pupils:
            return
        batch.records = [r for r in batch.records if r.learner not in pupils]
        for name, pupil in pupils.items():
            new = self._fill(pupil, name) if not pupil.buffer.seen else []  # a log's moves, before the first step
            rng = random.Random(f"{self.seed}/{self.rank}/{index}/imitation/{name}")
            played = pupil.teacher.of(batch.rollouts)
            pupil.buffer.add(played, rng)
            new += played
            batch.records.extend(_record(move, name) for move in pupil.buffer.draw(pupil.settings.batch, rng))
            label = name or "learner"
            batch.metrics[f"imitation/{label}/new_moves"] = float(len(new))
            batch.metrics[f"imitation/{label}/buffer"] = float(len(pupil.buffer))
            batch.metrics[f"imitation/{label}/seen"] = float(pupil.buffer.seen)
            if name:  # where it was seated (imitate.anticipatory): the moves it played itself
                own = PolicyRef(PolicyKind.LEARNER, name)
                batch.metrics[f"imitation/{label}/played"] = float(sum(
                    1 for rollout in batch.rollouts for step in rollout.steps if step.completion.policy == own))

    def state_dict(self) -> dict[str, Any]:
        """Every buffer (a finished warm start's is empty: ``apply`` dropped it); a log's is read
        again from its file, so only what was read is kept."""
        return {name: ({"log": p.teacher.path, "seen": p.buffer.seen} if isinstance(p.teacher, LoggedMoves)
                       else p.buffer.state_dict()) for name, p in self.pupils.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, buffer_state in state.items():
            pupil = self.pupils.get(name)
            if pupil is None:
                continue
            if "log" not in buffer_state:
                pupil.buffer.load_state_dict(buffer_state)
            elif buffer_state["seen"] and len(self._fill(pupil, name)) != buffer_state["seen"]:
                raise ValueError(f"{pupil.teacher.key}.teacher: {pupil.teacher.path} holds {pupil.buffer.seen} valid "
                                 f"moves, and the checkpoint's run read {buffer_state['seen']}: the file changed "
                                 f"since; resume with the file it read")

    def _fill(self, pupil: _Pupil, name: str) -> list[Move]:
        """The moves that come before any game (a log's: ``once``) into the empty buffer, on a
        stream of their own, so that a resumed run reads them again to the same buffer."""
        moves = pupil.teacher.once()
        pupil.buffer.add(moves, random.Random(f"{self.seed}/{self.rank}/imitation/{name}/once"))
        return moves

    def warm_teacher(self, index: int) -> PolicyRef | None:
        """The warm start's teacher while batch ``index`` belongs to the warm start, else None."""
        return next((p.teacher.teacher for p in self.pupils.values() if p.until is not None and index < p.until), None)


def _record(move: Move, learner: str) -> TrainingRecord:
    prompt, completion, legal = move
    return TrainingRecord(prompt_ids=list(prompt), completion_ids=list(completion), logprobs=[0.0] * len(completion),
                          advantage=0.0, reward=0.0, action_mask=[1] * len(completion),
                          legal_actions=list(legal) if legal else None, learner=learner, logprobs_from_trainer=True,
                          imitation=True)


class SeatRewrite:
    """An opponent sampler (``games.OpponentSampler``'s interface) that wraps the run's own and
    rewrites the seats it draws (:meth:`rewrite`); its statistics and state stay the inner one's."""

    def __init__(self, inner: OpponentSampler):
        self.inner = inner

    def rewrite(self, seats: dict[str, PolicyRef], rng: random.Random) -> dict[str, PolicyRef]:
        raise NotImplementedError

    def seats(self, game: GameSettings, rng: random.Random) -> dict[str, PolicyRef]:
        return self.rewrite(self.inner.seats(game, rng), rng)

    def batch_seats(self, games: list[GameSettings], rng: random.Random) -> list[dict[str, PolicyRef]]:
        return [self.rewrite(seats, rng) for seats in self.inner.batch_seats(games, rng)]

    def observe(self, rollouts: list) -> None:
        self.inner.observe(rollouts)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)


class AnticipatoryPlay(SeatRewrite):
    """NFSP's mix of best response and average policy over the seats of training games: of the
    seats a learner teacher holds in a game, one (drawn uniformly) stays the teacher's, and each
    other is the teacher's with probability ``anticipatory`` and the imitating learner's
    otherwise."""

    def __init__(self, inner: OpponentSampler, teacher: PolicyRef, average: PolicyRef, anticipatory: float,
                 resolve):
        super().__init__(inner)
        self.teacher, self.average, self.anticipatory = teacher, average, anticipatory
        self.resolve = resolve  # (policy, role) -> the learner that plays it (Learners.resolve)

    def rewrite(self, seats: dict[str, PolicyRef], rng: random.Random) -> dict[str, PolicyRef]:
        held = [agent for agent, policy in seats.items() if self.resolve(policy, agent) == self.teacher]
        if len(held) < 2:
            return seats
        kept = rng.choice(held)
        return {agent: (self.average if agent in held and agent != kept and rng.random() >= self.anticipatory
                        else policy) for agent, policy in seats.items()}


class WarmStartSeats(SeatRewrite):
    """During a warm start, the teacher plays every seat of a training game that the learner
    would have played (``Imitation.warm_teacher`` of the batch being drawn, ``index_of()``); after
    it, the seats are as drawn."""

    def __init__(self, inner: OpponentSampler, imitation: Imitation, learner: PolicyRef, index_of, resolve):
        super().__init__(inner)
        self.imitation, self.learner, self.index_of, self.resolve = imitation, learner, index_of, resolve

    def rewrite(self, seats: dict[str, PolicyRef], rng: random.Random) -> dict[str, PolicyRef]:
        teacher = self.imitation.warm_teacher(self.index_of())
        if teacher is None:
            return seats
        return {agent: (teacher if self.resolve(policy, agent) == self.learner else policy)
                for agent, policy in seats.items()}

    def observe(self, rollouts: list) -> None:
        """A warm-start batch's games are the teacher's, not the learner's: the run's own sampler
        (a league's ratings, win rates, exploiters' results) sees none of them. (The arena shows a
        batch before counting it, so ``index_of()`` is still that batch's.)"""
        if self.imitation.warm_teacher(self.index_of()) is None:
            self.inner.observe(rollouts)


class WarmStartCheckpoint(L.Callback):
    """Writes ``warm_start.ckpt`` once the warm start's ``steps`` training steps are done, into the
    folder of the run's first ``ModelCheckpoint`` (else ``<default_root_dir>/checkpoints``): the
    policy the teacher gave, kept to be evaluated beside the result (and resumable like any
    checkpoint of the run). Installed by the DataModule with ``data.warm_start``.

    The warm start is the stream's first ``steps`` batches, as the data side counts them
    (:class:`Imitation`); so is this: at the end of the training step on batch ``steps - 1``
    (``Batch.index``, which a resumed run continues; Lightning's ``batch_idx`` starts again at 0).
    ``global_step`` would not do: a batch whose optimizer step was skipped (a non-finite loss) is
    not counted there, and the file would have held a self-play step."""

    FILENAME = "warm_start.ckpt"

    def __init__(self, steps: int):
        self.steps = steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        trained = pl_module.last_batch
        if trained is not None and trained.index == self.steps - 1:
            trainer.save_checkpoint(self.path(trainer), weights_only=False)  # whole: a run can resume from it

    @classmethod
    def path(cls, trainer) -> str:
        import os

        from lightning.pytorch.callbacks import ModelCheckpoint

        folder = next((c.dirpath for c in trainer.callbacks if isinstance(c, ModelCheckpoint) and c.dirpath), None)
        return os.path.join(folder or os.path.join(trainer.default_root_dir, "checkpoints"), cls.FILENAME)
