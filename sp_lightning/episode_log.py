"""The episode log: what a run played, as lines a person reads and a script parses.

Switched on with ``data.episode_log.path`` (a file; appended to, so a resumed run continues it).
One event per line, ``<UTC timestamp> <event> key=value ...``, values as JSON (strings quoted and
escaped, so a completion with a newline stays on its line):

    2026-11-21T10:02:03.412Z episode_start batch=3 id="17" episode="tictactoe_v1" seed=1234 seats={...}
    2026-11-21T10:02:03.420Z model_call batch=3 id="17" role="player_0" policy="learner" version=41 ...
    2026-11-21T10:02:03.530Z episode_end batch=3 id="17" rewards={"player_0": 1.0, ...} steps=5 ...
    2026-11-21T10:02:03.900Z batch batch=3 episodes=64 records=290 reward_mean=0.12 ...

Episode ids are per batch: ``"17"`` is the batch's 18th episode, ``"17.2"`` its third child.
With ``data.episode_log.records`` each batch's training records are also written, decoded, to a
JSONL file (prompt, completion, action mask, reward, advantage, policy version): what the
optimizer step trained on.

Only rank 0 writes (one process's view of the run); the prompt text of model calls is cut to
``max_chars`` (its end, where the newest turn is).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import IO, Any

from sp_lightning.batch import decoded_record, record_means
from sp_lightning.errors import check_writable


@dataclass
class EpisodeLogSettings:
    """``data.episode_log``: where the run's episode log goes (off without a path)."""

    path: str | None = None
    """The log file (appended to); null: no log."""
    records: str | None = None
    """A JSONL file for each batch's decoded training records; null: none."""
    max_chars: int = 300
    """Characters of a model call's prompt kept in the log (its end)."""
    model_calls: bool = True
    """Log every model call (the largest part of the log)."""

    def __post_init__(self):
        if self.max_chars < 0:
            raise ValueError(f"data.episode_log.max_chars: expected >= 0, got {self.max_chars}")
        if self.records is not None and self.path is None:
            raise ValueError("data.episode_log.records: needs data.episode_log.path as well (the log it belongs to)")
        for name in ("path", "records"):
            if getattr(self, name) is not None:  # refused now, not at the first batch's write
                check_writable(getattr(self, name), f"data.episode_log.{name}")


def _timestamp() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


class EpisodeLog:
    """Writes the events of the arena's runs to ``settings.path`` (and records to ``records``).

    The arena calls ``episode_start`` / ``model_call`` / ``episode_end`` as episodes run and
    ``batch`` once a batch is built; ``tokenizer`` decodes the records.
    """

    def __init__(self, settings: EpisodeLogSettings, tokenizer=None):
        if settings.path is None:
            raise ValueError("EpisodeLog: settings.path is required")
        self.settings = settings
        self.tokenizer = tokenizer
        self.batch_index = 0
        self._file: IO[str] | None = None
        self._records: IO[str] | None = None

    def _open(self, path: str) -> IO[str]:
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        return open(path, "a", encoding="utf-8")

    def start_batch(self, index: int) -> None:
        """The events from now on belong to batch ``index`` (the arena calls it before it plays one)."""
        self.batch_index = index

    def write(self, event: str, **fields: Any) -> None:
        if self._file is None:
            self._file = self._open(self.settings.path)
            # runs appended to one file (a resumed fit, several rollout runs) start with this line
            self._file.write(f"{_timestamp()} log_open batch={self.batch_index} pid={os.getpid()}\n")
        body = " ".join(f"{key}={_json(value, default=str)}" for key, value in fields.items())
        self._file.write(f"{_timestamp()} {event} batch={self.batch_index} {body}\n")

    def episode_start(self, episode_id: str, episode, seed: int) -> None:
        seats = getattr(episode, "seats", None) or {}
        self.write("episode_start", id=episode_id, episode=episode.name, seed=seed,
                   seats={role: str(policy) for role, policy in seats.items()})

    def model_call(self, episode_id: str, request, completion) -> None:
        if not self.settings.model_calls:
            return
        prompt = request.messages[-1]["content"] if request.messages else ""
        cut = self.settings.max_chars
        self.write("model_call", id=episode_id, role=request.role, policy=str(request.policy),
                   version=completion.policy_version, prompt=prompt[-cut:] if cut else "",
                   completion=completion.text, tokens=len(completion.completion_ids),
                   **({"refused": completion.refused} if completion.refused else {}))

    def episode_end(self, episode_id: str, rollout) -> None:
        self.write("episode_end", id=episode_id, episode=rollout.episode, level=rollout.level,
                   steps=len(rollout.steps), outcome=rollout.outcome, rewards=rollout.rewards,
                   trainable=rollout.trainable)

    def batch(self, batch) -> None:
        """The summary line of the batch ``batch_index`` (see :meth:`start_batch`), and its
        decoded records where ``records`` is set."""
        records = batch.records
        reward_mean, advantage_mean = record_means(records)
        self.write("batch", episodes=len(batch.rollouts), records=len(records), reward_mean=reward_mean,
                   advantage_mean=advantage_mean, metrics={k: round(v, 6) for k, v in batch.metrics.items()})
        if self.settings.records is not None:
            if self._records is None:
                self._records = self._open(self.settings.records)
            for record in records:
                self._records.write(_json({"batch": self.batch_index, **decoded_record(record, self.tokenizer)}) + "\n")
            self._records.flush()
        self._file.flush()

    def close(self) -> None:
        for handle in (self._file, self._records):
            if handle is not None:
                handle.close()
        self._file = self._records = None


_LINE_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def _json(value: Any, **kwargs: Any) -> str:
    """``value`` as JSON on one line for every reader: non-ASCII text kept readable, but the
    characters that ``str.splitlines`` (and so a line-by-line reader) takes for line breaks,
    which a model may write, escaped (JSON escapes ``\\n`` and ``\\r`` itself). A lone surrogate
    (a remote server's JSON may carry ``\\ud83d``) has no UTF-8 form: such a value is written all
    escaped (``\\ud83d`` in the file, the same string read back)."""
    text = json.dumps(value, ensure_ascii=False, **kwargs).translate(_LINE_BREAKS)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, **kwargs)
    return text
