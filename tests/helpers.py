"""Shared test doubles and runners.

``ScriptedWorker`` is a test double of the rollout backend only: it answers model calls with
scripted text (so the arena, episodes, rubrics, credit and records under test are the real ones)
and keeps every generate call, so tests can count how requests were batched.
``ScriptedOpenAIServer`` is a test double of a remote model's server only: a real HTTP server on
loopback speaking the chat-completions protocol, scripted to fail, stall or answer.
``fit_batches`` runs a real ``fit`` of a shipped config on the tiny model and returns the batches
it trained on; ``checkpointed_fit`` runs one that writes ``last.ckpt`` after every step;
``ForkedFit`` runs ``sp-lightning fit`` in a process of its own, forked from this one, for the
tests whose point is a process that SIGKILL ends; ``ForkedRanks`` runs it as several ranks so
forked, each told its rank by the environment, for the strategies without a fork launcher.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import lightning as L

from sp_lightning.rollout.base import RolloutWorker
from sp_lightning.types import Completion, ModelRequest


class ScriptedWorker(RolloutWorker):
    """Test double: answers each request with ``answer`` (None: the request's first legal move;
    a string; or a function of the request), as the tokens ``completion_ids`` (a list, or a
    function of the request), and records every generate call and every weight update. It serves
    no checkpoint and scores nothing (capabilities False, those calls refused). Its logprobs stand
    in for the trainer's own (``logprobs_from_trainer``), so the loss corrects nothing for them, as
    for the Hugging Face worker's."""

    trains = True
    supports_async = False
    serves_checkpoints = False
    scores_completions = False

    def __init__(self, answer: str | Callable[[ModelRequest], str] | None = None,
                 completion_ids: Sequence[int] | Callable[[ModelRequest], list[int]] = (3, 4)):
        self.calls: list[list[ModelRequest]] = []
        self.versions: list[int] = []  # of every weight update it was sent
        self.answer = answer
        self.completion_ids = completion_ids

    def _text(self, request: ModelRequest) -> str:
        if self.answer is None:
            return request.legal_actions[0]
        return self.answer(request) if callable(self.answer) else self.answer

    def generate(self, requests, sampling):
        self.calls.append(list(requests))
        out = []
        for r in requests:
            ids = list(self.completion_ids(r) if callable(self.completion_ids) else self.completion_ids)
            out.append(Completion(text=self._text(r), prompt_ids=[1, 2], completion_ids=ids,
                                  logprobs=[-0.5] * len(ids), policy=r.policy, logprobs_from_trainer=True))
        return out

    def load_weights(self, update):
        self.versions.append(update.version)
        self.policy_version = update.version

    def completion_logprobs(self, requests, completions):
        raise NotImplementedError("ScriptedWorker scores nothing")

    def register_adapter(self, name, path):
        raise NotImplementedError("ScriptedWorker serves no checkpoint")

    def forget_adapter(self, name):
        pass

    def close(self):
        pass


class KeepBatches(L.Callback):
    """Keeps every training step's Batch (records, rollouts, metrics)."""

    def __init__(self):
        self.batches = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches.append(pl_module.last_batch)


def checkpointed_fit(config: str, root, steps: int, *args: str) -> None:
    """``sp-lightning fit --config <config> <args>`` in this process for ``steps`` steps, no
    validation or logger, ``last.ckpt`` written to ``root / "ckpt"`` after every step: the run a
    resume test stops and resumes, and the straight run it is compared with."""
    from sp_lightning.cli import main

    main(["fit", "--config", config,
          "--trainer.max_steps", str(steps), "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
          "--trainer.limit_val_batches", "0", "--trainer.default_root_dir", str(root),
          "--trainer.callbacks", json.dumps([{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                               "init_args": {"dirpath": str(root / "ckpt"), "filename": "last",
                                                             "every_n_train_steps": 1,
                                                             "enable_version_counter": False}}]), *args])


def fit_batches(config: str, tmp_path, steps: int, *overrides: str):
    """``fit`` ``config`` (with command-line ``overrides``) for ``steps`` optimizer steps, without
    validation, logger or checkpoints; returns (trainer, the batches trained on)."""
    from sp_lightning import build_from_config, make_trainer

    module, dm = build_from_config("--config", config, *overrides)
    keep = KeepBatches()
    trainer = make_trainer(max_steps=steps, limit_val_batches=0, logger=False, enable_checkpointing=False,
                           default_root_dir=str(tmp_path), callbacks=[keep])
    trainer.fit(module, datamodule=dm)
    return trainer, keep.batches


def _fit_in_a_fork(arguments: list[str], cwd: str, log: str, env: dict[str, str]) -> None:
    """The forked child: a session of its own (``os.killpg`` reaches every rank it forks), one
    thread (read by the command's thread set-up, as in a subprocess given OMP_NUM_THREADS=1),
    ``env`` added to its environment, the output in ``log``; ``sp-lightning fit`` here, its exit
    status the child's."""
    os.setsid()
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(out, 1)
    os.dup2(out, 2)
    sys.stdout = sys.stderr = open(out, "w", buffering=1, closefd=False)
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **env)
    os.chdir(cwd)
    from sp_lightning.cli import main

    main(["fit", *arguments])


class ForkedFit:
    """``sp-lightning fit <arguments>`` in ``cwd``, in a child process forked from this one: a
    process of its own, which SIGKILL ends as it ends any run, without the 5-7 s a fresh
    interpreter spends importing lightning, torch and transformers on this machine. Every fork
    starts from this process's same state, so a straight run and a killed one compare exactly.
    Its output goes to ``cwd/<log>`` (appended; ``tail`` shows it after a failure); ``env`` is
    added to its environment."""

    def __init__(self, arguments: Sequence[str], cwd, env: dict[str, str] | None = None, log: str = "fit.log"):
        self.log = os.path.join(str(cwd), log)
        self.process = multiprocessing.get_context("fork").Process(
            target=_fit_in_a_fork, args=(list(arguments), str(cwd), self.log, dict(env or {})))
        self.process.start()
        self.pid = self.process.pid

    def poll(self) -> int | None:
        """The exit status once the child has ended, else None (as ``Popen.poll``)."""
        return None if self.process.is_alive() else self.process.exitcode

    def sigkill(self) -> None:
        """SIGKILL to the child and every process it started (its session), as a scheduler
        stops a job; it is not reaped (``kill`` does both)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:  # it had ended
            pass

    def kill(self) -> None:
        """``sigkill``, then reap the child."""
        self.sigkill()
        self.process.join()

    def wait(self, timeout: float | None = None) -> int | None:
        self.process.join(timeout)
        return self.process.exitcode

    def tail(self, characters: int = 6000) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()[-characters:]


class ForkedRanks:
    """``sp-lightning fit <arguments>`` as ``ranks`` processes forked from this one (``ForkedFit``
    each), every one told its rank as a cluster's launcher tells it (``LOCAL_RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` on loopback), so Lightning starts no process
    itself. For the strategies without a fork launcher (FSDP2's ModelParallelStrategy starts rank
    1 by running the script again): their ranks, without a fresh interpreter each. Rank ``r``'s
    output goes to ``cwd/fit-rank<r>.log``."""

    def __init__(self, arguments: Sequence[str], cwd, ranks: int = 2):
        port = free_ports(1)[0]
        self.ranks = [ForkedFit(arguments, cwd, log=f"fit-rank{rank}.log",
                                env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NODE_RANK": "0",
                                     "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(rank)})
                      for rank in range(ranks)]

    def poll(self) -> int | None:
        """The first failed rank's exit status; else None while a rank runs; else 0."""
        codes = [run.poll() for run in self.ranks]
        failed = [code for code in codes if code not in (None, 0)]
        return failed[0] if failed else None if None in codes else 0

    def kill(self) -> None:
        """SIGKILL to every rank at once, as a cluster's scheduler stops a job; then reap them."""
        for run in self.ranks:
            run.sigkill()
        for run in self.ranks:
            run.process.join()

    def wait(self, timeout: float | None = None) -> int | None:
        """Every rank's end (a rank that failed ends the others: they would wait on it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.05)
        if code not in (None, 0):
            self.kill()
        return code

    def tail(self, characters: int = 6000) -> str:
        return "\n".join(f"--- rank {rank}:\n{run.tail(characters // len(self.ranks))}"
                         for rank, run in enumerate(self.ranks))


def forked_fit(arguments: Sequence[str], cwd, timeout: float = 600, ranks: int = 0) -> None:
    """A ``ForkedFit`` (with ``ranks``: a ``ForkedRanks``) run to its end; fails the test, with
    the run's output, if it did not exit 0."""
    run = ForkedRanks(arguments, cwd, ranks) if ranks else ForkedFit(arguments, cwd)
    code = run.wait(timeout)
    if code is None:
        run.kill()
    assert code == 0, f"fit exited with {code}:\n{run.tail()}"


class ScriptedOpenAIServer:
    """Answers ``POST /v1/chat/completions`` with ``answer(body)``; the first ``fail_first``
    requests get HTTP ``status`` (with a 1 ms retry-after), the first ``slow_first`` wait
    ``delay`` seconds before answering; ``GET /v1/version`` answers ``{"version": 7}``.
    ``POST /v1/completions`` (a vLLM server's, with token ids) answers ``max_tokens`` scripted
    tokens with logprob -0.5 each, and ``POST /v1/load_lora_adapter`` (and ``unload_``) accepts any adapter: what a
    ``ServerRolloutWorker`` needs to run against it. Every request's body is kept in ``bodies``.
    ``reply(path, body)``, where given, scripts a faulty far end: what it returns (a JSON value,
    or a str sent as an HTML page) answers every completion request and ``GET .../version``.
    ``trickle`` seconds: a chat answer starts at once and then sends a space every 0.1 s for that
    long before its body (a proxy keeping the connection alive)."""

    def __init__(self, answer=lambda body: "ok", fail_first=0, status=500, slow_first=0, delay=0.0, reply=None,
                 trickle=0.0):
        self.answer, self.fail_first, self.status = answer, fail_first, status
        self.slow_first, self.delay, self.reply, self.trickle = slow_first, delay, reply, trickle
        self.hits = 0
        self.bodies = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, payload, headers=()):
                page = isinstance(payload, str)
                data = payload.encode() if page else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("content-type", "text/html" if page else "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers:
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if server.reply is not None and self.path.endswith("/version"):
                    self._send(200, server.reply(self.path, None))
                    return
                self._send(200, {"version": 7})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with server.lock:
                    server.hits += 1
                    hit = server.hits
                    server.bodies.append(body)
                if hit <= server.fail_first:
                    self._send(server.status, {"error": {"message": "scripted failure"}}, [("retry-after-ms", "1")])
                    return
                if hit <= server.slow_first:
                    time.sleep(server.delay)
                if self.path.endswith(("/load_lora_adapter", "/unload_lora_adapter")):
                    self._send(200, {})
                    return
                if server.reply is not None:
                    self._send(200, server.reply(self.path, body))
                    return
                if self.path.endswith("/completions") and not self.path.endswith("/chat/completions"):
                    n = int(body["max_tokens"])
                    self._send(200, {"id": f"c{hit}", "object": "text_completion", "created": 0, "model": body["model"],
                                     "choices": [{"index": 0, "text": "", "finish_reason": "length",
                                                  "token_ids": [5] * n, "logprobs": {"token_logprobs": [-0.5] * n}}]})
                    return
                if server.trickle:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.end_headers()
                    end = time.monotonic() + server.trickle
                    with contextlib.suppress(OSError):  # the client may hang up: what it should do
                        while time.monotonic() < end:
                            self.wfile.write(b" ")
                            self.wfile.flush()
                            time.sleep(0.1)
                        self.wfile.write(json.dumps({"choices": [{"index": 0, "message": {
                            "role": "assistant", "content": "late"}}]}).encode())
                    return
                self._send(200, {"id": f"c{hit}", "object": "chat.completion", "created": 0, "model": body["model"],
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": server.answer(body)}}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def free_ports(count: int = 1) -> list[int]:
    """Loopback ports nothing listens on: bound all at once (so none is handed out twice), then
    released."""
    import socket

    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def tensorboard_events(logdir):
    """Every scalar and histogram of the TensorBoard run in ``logdir`` (one version folder)."""
    import glob

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (run,) = glob.glob(f"{logdir}/version_*") or [str(logdir)]
    events = EventAccumulator(run, size_guidance={"scalars": 0, "histograms": 0})
    events.Reload()
    return events


def send_weights(worker, model, version: int = 0) -> None:
    """The trainer's side of the weight path in a test: ``model``'s current weights into ``worker``
    (``RolloutWorker.load_weights``), as ``WeightSync`` sends them after an optimizer step."""
    from sp_lightning.weight_sync import update_of

    worker.load_weights(update_of(model, version))


LONG_GAMES = {"diplomacy_v1": 20}
"""Games of far more decisions than the rest, played this many times where a test plays many:
twenty two-year Diplomacy games (about 150 decisions of seven powers each) check as many
positions as 400 games of Tic-Tac-Toe."""
