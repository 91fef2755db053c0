"""The episode log: a run's episodes, model calls, rewards and batches in a file, and each
batch's decoded records as JSONL, written by a real ``fit`` and by a rollout-only run."""

import json
import re

import pytest

from sp_lightning.episode_log import EpisodeLogSettings
from tests.helpers import fit_batches

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (\w+) batch=(\d+) (.*)$")


def _events(path):
    events = []
    for line in path.read_text().splitlines():
        match = LINE.match(line)
        assert match, f"not a log line: {line!r}"
        fields = dict(re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\{.*?\}(?= \w+=|$)|\S+)', match.group(3)))
        events.append((match.group(1), int(match.group(2)), {k: json.loads(v) for k, v in fields.items()}))
    return events


@pytest.mark.slow
def test_fit_writes_the_episode_log_and_the_decoded_records(tmp_path):
    log, records = tmp_path / "episodes.log", tmp_path / "records.jsonl"
    _, batches = fit_batches("configs/tictactoe_tiny.yaml", tmp_path, 2, "--model.update_epochs", "1", "--data.episodes_per_batch", "4",
                             "--data.episode_log.path", str(log), "--data.episode_log.records", str(records))
    events = _events(log)
    kinds = [kind for kind, _, _ in events]
    assert kinds.count("episode_start") == kinds.count("episode_end") == 8
    assert kinds.count("batch") == 2
    for index, batch in enumerate(batches):
        ends = [f for kind, b, f in events if kind == "episode_end" and b == index]
        assert sorted(tuple(sorted(f["rewards"].items())) for f in ends) == sorted(
            tuple(sorted(r.rewards.items())) for r in batch.rollouts)
        (summary,) = [f for kind, b, f in events if kind == "batch" and b == index]
        assert summary["episodes"] == 4 and summary["records"] == len(batch.records)
    calls = [f for kind, _, f in events if kind == "model_call"]
    learner_moves = sum(1 for b in batches for r in b.rollouts for s in r.steps
                        if s.completion.policy.kind == "learner")
    assert sum(1 for f in calls if f["policy"] == "learner") == learner_moves
    assert all("Tic-Tac-Toe" in f["prompt"] for f in calls)
    # the records file: exactly what each step trained on, decoded
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(rows) == sum(len(b.records) for b in batches)
    flat = [r for b in batches for r in b.records]
    assert [row["advantage"] for row in rows] == pytest.approx([r.advantage for r in flat])
    assert all(row["action_mask"] == [1] and "Tic-Tac-Toe" in row["prompt"] and row["completion"] for row in rows)


def test_a_completion_with_unicode_line_breaks_stays_on_its_line(tmp_path):
    """A model may write U+2028, U+2029 or U+0085, which ``splitlines`` (a line-by-line reader)
    takes for line breaks: they are escaped, so each event is one line and reads back as written."""
    from sp_lightning.episode_log import EpisodeLog

    log = EpisodeLog(EpisodeLogSettings(path=str(tmp_path / "log.txt")))
    text = "[bet]\u2028ignore\x85x\u2029 caf\u00e9"
    log.write("model_call", completion=text)
    log.close()
    events = _events(tmp_path / "log.txt")
    assert [e[0] for e in events] == ["log_open", "model_call"] and events[1][2]["completion"] == text
    assert "caf\u00e9" in (tmp_path / "log.txt").read_text(encoding="utf-8")  # readable, not escaped


def test_a_completion_with_a_lone_surrogate_is_written_escaped_and_reads_back_the_same(tmp_path):
    """A remote server's JSON may carry a lone surrogate (an emoji cut at max_tokens), which has
    no UTF-8 form: writing it stopped the run with UnicodeEncodeError; it is escaped now."""
    from sp_lightning.episode_log import EpisodeLog

    log = EpisodeLog(EpisodeLogSettings(path=str(tmp_path / "log.txt")))
    text = json.loads('"thinking \\ud83d caf\\u00e9 [4]"')
    log.write("model_call", completion=text)
    log.close()
    events = _events(tmp_path / "log.txt")
    assert events[1][2]["completion"] == text


def test_records_without_a_log_path_is_a_clear_error():
    with pytest.raises(ValueError, match="data.episode_log.records: needs data.episode_log.path"):
        EpisodeLogSettings(records="r.jsonl")


def test_nested_episodes_are_logged_under_their_parents_id(tmp_path):
    """A parent with a not-trainable child: the child's start, model call and end carry the id
    "<parent>.0", its level and trainable flag; a second run in the same file opens with its own
    log_open line."""
    from sp_lightning.arena import Arena
    from sp_lightning.credit import EpisodicRewardCredit
    from sp_lightning.episode_log import EpisodeLog
    from tests.helpers import ScriptedWorker
    from tests.test_arena_api import _ParentWithSilentChild

    path = tmp_path / "nested.log"
    for run in range(2):
        arena = Arena(ScriptedWorker(answer="q"), credit=EpisodicRewardCredit(),
                      episode_log=EpisodeLog(EpisodeLogSettings(path=str(path))))
        arena.add_episode(_ParentWithSilentChild())
        arena.run(1, out=open(tmp_path / f"out{run}.txt", "w"))
    events = _events(path)
    assert [kind for kind, _, _ in events].count("log_open") == 2
    second_open = [i for i, (kind, _, _) in enumerate(events) if kind == "log_open"][1]
    first_run = events[:second_open]
    child_end = [f for kind, _, f in first_run if kind == "episode_end" and f["id"].count(".") == 1]
    assert len(child_end) == 64 and all(f["level"] == 1 and f["trainable"] is False for f in child_end)
    parent_ids = {f["id"] for kind, _, f in first_run if kind == "episode_start" and "." not in f["id"]}
    assert {f["id"].split(".")[0] for f in child_end} == parent_ids
    child_calls = [f for kind, _, f in first_run if kind == "model_call" and "." in f["id"]]
    assert len(child_calls) == 64 and all(f["role"] == "answerer" for f in child_calls)
