"""Several learners in one run (sp_lightning.learners): one LoRA adapter each on one base model,
each role's learner requests answered by its own adapter, each learner updated from its own
records with its own settings, and what a run with one learner did left exactly as it was."""

import json
import os

import pytest
import torch

from sp_lightning import build_from_config
from sp_lightning.learners import LearnerSettings, Learners, adapter_of, learner_adapters, params_of
from sp_lightning.learners import save_learner_adapter
from sp_lightning.types import LEARNER, ModelRequest, PolicyKind, PolicyRef, parse_policy
from sp_lightning.rollout import SamplingSettings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROPOSER_SOLVER = os.path.join(ROOT, "configs", "proposer_solver_tiny.yaml")
TWO = ["--model.learners", json.dumps({
    "proposer": {"roles": ["proposer"]},
    "solver": {"roles": ["solver"], "optimizer": {"lr": 0.001}, "lora": {"r": 8, "alpha": 16},
               "loss": {"entropy": {"coef": 0.01}}}}),
    "--data.episodes.init_args.solver", "learner", "--data.sampling.max_new_tokens", "2"]


# ---- names, roles and settings --------------------------------------------------------------------
def test_a_learner_request_goes_to_the_learner_of_its_role_and_a_named_one_stays():
    learners = Learners({"a": LearnerSettings(roles=["player_0"]), "b": LearnerSettings(roles=["player_1"])})
    assert learners.resolve(LEARNER, "player_1") == PolicyRef(PolicyKind.LEARNER, "b")
    assert learners.resolve(parse_policy("learner:a"), "player_1") == PolicyRef(PolicyKind.LEARNER, "a")
    assert learners.resolve(parse_policy("bot:random"), "player_0") == parse_policy("bot:random")
    assert str(parse_policy("learner:a")) == "learner:a"
    with pytest.raises(ValueError, match="role 'judge' asked for the learner, and no learner plays it"):
        learners.resolve(LEARNER, "judge")
    with pytest.raises(ValueError, match="no learner 'c' in model.learners"):
        learners.resolve(parse_policy("learner:c"), "player_0")
    assert Learners().resolve(LEARNER, "anything") == LEARNER  # one unnamed learner: as always


@pytest.mark.parametrize("settings, message", [
    ({"a": {"roles": ["x"]}}, "name two learners or more"),
    ({"a": {"roles": ["x"]}, "b": {"roles": ["x"]}}, r"model.learners.b.roles: role 'x' is already played by"),
    ({"learner": {"roles": ["x"]}, "b": {"roles": ["y"]}}, "model.learners.learner: a learner's name"),
    ({"a": {"roles": ["x"], "optimizer": {"learning_rate": 1}}, "b": {"roles": ["y"]}},
     r"model.learners.a.optimizer.learning_rate: not a setting of OptimizerSettings"),
])
def test_bad_learner_settings_name_their_key(settings, message):
    with pytest.raises(ValueError, match=message):
        build_from_config("--config", PROPOSER_SOLVER, "--model.learners", json.dumps(settings))


@pytest.fixture(scope="module")
def two():
    module, dm = build_from_config("--config", PROPOSER_SOLVER, *TWO)
    return module, dm


def test_each_learner_is_its_own_trainable_adapter_with_its_own_settings(two):
    module, _ = two
    model = module.model
    assert learner_adapters(model) == [adapter_of("proposer"), adapter_of("solver")]
    assert model.peft_config[adapter_of("proposer")].r == 16 and model.peft_config[adapter_of("solver")].r == 8
    proposer, solver = params_of(model, "proposer"), params_of(model, "solver")
    assert proposer and solver and not {id(p) for p in proposer} & {id(p) for p in solver}
    assert {id(p) for p in proposer + solver} == {id(p) for p in model.parameters() if p.requires_grad}
    module.trainer = None
    opt = module.configure_optimizers()["optimizer"]
    assert [g["lr"] for g in opt.param_groups] == [0.003, 0.001]
    assert module.loss_of["solver"].entropy.coef.start == 0.01 and module.loss_of["proposer"].entropy.coef.start == 0.05


def test_each_roles_calls_are_answered_by_its_learner_and_its_records_say_so(two):
    module, dm = two
    engine = dm.build_engine(module)
    engine.start()
    try:
        batch = engine.next_batch()
    finally:
        engine.close()
    for rollout in batch.rollouts:
        assert rollout.seats == {"proposer": PolicyRef(PolicyKind.LEARNER, "proposer")}
        for step in rollout.steps:
            assert step.completion.policy == PolicyRef(PolicyKind.LEARNER, "proposer")
        for child in rollout.children:
            assert all(s.completion.policy == PolicyRef(PolicyKind.LEARNER, "solver") for s in child.steps)
    learners = {r.learner for r in batch.records}
    assert learners == {"proposer", "solver"}


def test_a_mixed_batch_serves_each_learner_as_its_adapter_alone_would(two):
    """One generate call holding both learners' rows gives each row the logprobs of its own
    adapter served alone (peft's per-row adapters)."""
    module, dm = two
    worker = dm.build_engine(module).worker
    with torch.no_grad():  # make the two adapters differ from each other and from zero
        generator = torch.Generator().manual_seed(3)
        for p in params_of(module.model, "solver"):
            p.add_(0.3 * torch.randn(p.shape, generator=generator))
    dm.send_weights(module)  # what the weight path does after an optimizer step
    messages = [{"role": "user", "content": "Propose a sum [3]"}]
    refs = [PolicyRef(PolicyKind.LEARNER, "proposer"), PolicyRef(PolicyKind.LEARNER, "solver")] * 2
    requests = [ModelRequest("x", messages, ref) for ref in refs]
    candidates = [["[1]", "[5]", "12"]] * len(requests)
    together = worker.completion_logprobs(requests, candidates)
    alone = [worker.completion_logprobs([r], [c])[0] for r, c in zip(requests, candidates)]
    flat = [v for row in together for v in row]
    assert flat == pytest.approx([v for row in alone for v in row], abs=1e-5)
    assert together[0] != pytest.approx(together[1], abs=1e-3), "the two learners answer differently"
    sampled = worker.generate(requests, SamplingSettings(max_new_tokens=1))
    assert [c.policy for c in sampled] == refs
    # serving left every learner's adapter trainable
    assert all(p.requires_grad for name in ("proposer", "solver") for p in params_of(module.model, name))


def test_a_learners_adapter_saves_as_a_plain_adapter_directory(two, tmp_path):
    from peft import PeftModel
    from safetensors.torch import load_file

    module, _ = two
    path = save_learner_adapter(module.model, str(tmp_path / "solver"), "solver")
    assert os.path.isfile(os.path.join(path, "adapter_config.json"))
    saved = load_file(os.path.join(path, "adapter_model.safetensors"))
    mine = {n: p for n, p in module.model.named_parameters() if f".{adapter_of('solver')}." in n + "."}
    assert len(saved) == len(mine)
    fresh, _ = build_from_config("--config", PROPOSER_SOLVER)
    loaded = PeftModel.from_pretrained(fresh.model.unload(), path)
    assert loaded.peft_config["default"].r == 8
    ours = {(n + ".").replace(f".{adapter_of('solver')}.", ".default.").rstrip("."): p for n, p in mine.items()}
    theirs = dict(loaded.named_parameters())
    assert all(torch.equal(theirs[n], p) for n, p in ours.items())


# ---- a fit ---------------------------------------------------------------------------------------
def _fit(root, *args):
    from sp_lightning.cli import main

    main(["fit", "--config", PROPOSER_SOLVER, *TWO, "--trainer.max_steps", "2",
          "--trainer.default_root_dir", str(root), "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
          "--trainer.logger.save_dir", str(root), "--trainer.enable_progress_bar", "false",
          "--trainer.callbacks", json.dumps([{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                               "init_args": {"dirpath": str(root / "ckpt"), "filename": "last",
                                                             "every_n_train_steps": 1,
                                                             "enable_version_counter": False}}]),
          "--data.episodes_per_batch", "16", *args])


def test_a_fit_updates_every_learner_from_its_own_records_and_logs_each(tmp_path):
    import csv

    _fit(tmp_path)
    state = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    keys = list(state["state_dict"])
    assert any(adapter_of("proposer") in k for k in keys) and any(adapter_of("solver") in k for k in keys)
    fresh, _ = build_from_config("--config", PROPOSER_SOLVER, *TWO)
    start = dict(fresh.named_parameters())
    for learner in ("proposer", "solver"):
        moved = [k for k in keys if adapter_of(learner) in k and not torch.equal(state["state_dict"][k], start[k])]
        assert moved, f"{learner}'s adapter never moved"
    assert len(state["optimizer_states"][0]["param_groups"]) == 2
    rows = list(csv.DictReader(open(next(tmp_path.rglob("metrics.csv")))))
    for learner in ("proposer", "solver"):
        assert any(row.get(f"train/{learner}/loss") for row in rows)
        assert any(row.get(f"train/{learner}/records") for row in rows)
    lrs = {float(row["train/solver/lr"]) for row in rows if row.get("train/solver/lr")}
    assert len(lrs) == 1 and lrs.pop() == pytest.approx(0.001)


def test_only_the_learner_with_records_moves(tmp_path):
    """The solver's steps do not train (``solver_trains: false``): its adapter stays as built
    while the proposer's moves; one learner's loss never reaches another's weights."""
    _fit(tmp_path, "--data.episodes.init_args.solver_trains", "false")
    state = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["state_dict"]
    fresh, _ = build_from_config("--config", PROPOSER_SOLVER, *TWO)
    start = dict(fresh.named_parameters())
    solver = [k for k in state if adapter_of("solver") in k]
    proposer = [k for k in state if adapter_of("proposer") in k]
    assert solver and all(torch.equal(state[k], start[k]) for k in solver)
    assert any(not torch.equal(state[k], start[k]) for k in proposer)


def test_a_resumed_fit_continues_every_learner_exactly(tmp_path):
    """Two steps, then resumed to four from the checkpoint: every learner's weights and the
    optimizer's per-learner state are those of four steps in one go."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _fit(straight, "--trainer.max_steps", "4")
    _fit(resumed, "--trainer.max_steps", "2")
    _fit(resumed, "--trainer.max_steps", "4", "--ckpt_path", str(resumed / "ckpt" / "last.ckpt"))
    ours = torch.load(resumed / "ckpt" / "last.ckpt", weights_only=False)
    theirs = torch.load(straight / "ckpt" / "last.ckpt", weights_only=False)
    assert ours["global_step"] == theirs["global_step"] == 4
    assert ours["state_dict"].keys() == theirs["state_dict"].keys()
    for key, value in theirs["state_dict"].items():
        assert torch.equal(ours["state_dict"][key], value), key
    for a, b in zip(ours["optimizer_states"][0]["state"].values(), theirs["optimizer_states"][0]["state"].values()):
        assert torch.equal(a["exp_avg"], b["exp_avg"])


def test_a_league_with_several_learners_is_refused_naming_both_keys():
    module, dm = build_from_config("--config", os.path.join(ROOT, "configs", "kuhn_poker_league_tiny.yaml"),
                                   "--model.learners", json.dumps({"a": {"roles": ["player_0"]},
                                                                   "b": {"roles": ["player_1"]}}))
    with pytest.raises(ValueError, match=r"data.league: a league trains one main agent, and model.learners names 2"):
        dm.build_engine(module)


def test_validation_reports_each_seats_learner(tmp_path):
    """Kuhn Poker with one learner per seat: validation plays each seat's own learner, and the
    per-seat payoffs (with intervals) are each learner's figure."""
    module, dm = build_from_config("--config", os.path.join(ROOT, "configs", "kuhn_poker_two_learners_tiny.yaml"),
                                   "--data.eval.games", "40")
    engine = dm.build_engine(module)
    served = []
    generate = engine.worker.generate

    def recording_generate(requests, sampling):  # the real worker, its requests' policies noted
        served.extend((r.role, str(r.policy)) for r in requests)
        return generate(requests, sampling)

    engine.worker.generate = recording_generate
    metrics, _ = engine.validate(engine.games[0], "val/kuhn")
    assert set(served) == {("player_0", "learner:first"), ("player_1", "learner:second")}
    for seat in ("player_0", "player_1"):
        assert metrics[f"val/kuhn/payoff_{seat}_ci_low"] <= metrics[f"val/kuhn/payoff_{seat}"] \
            <= metrics[f"val/kuhn/payoff_{seat}_ci_high"]


def test_crossplay_plays_each_learner_of_a_checkpoint(tmp_path, capsys):
    """A Lightning checkpoint of a run with two learners is two cross-play players."""
    from sp_lightning.cli.crossplay import main as crossplay

    config = os.path.join(ROOT, "configs", "kuhn_poker_two_learners_tiny.yaml")
    module, _ = build_from_config("--config", config)
    with torch.no_grad():
        for p in params_of(module.model, "second"):
            p.add_(0.5)  # the two learners differ
    checkpoint = tmp_path / "run.ckpt"
    torch.save({"state_dict": {f"model.{n}": p.detach() for n, p in module.model.named_parameters()
                               if p.requires_grad}}, checkpoint)
    result = crossplay(["--config", config, "--checkpoint", str(checkpoint), "--games_per_seat", "4",
                   "--output_dir", str(tmp_path / "crossplay"), "--resamples", "10"])
    assert set(result["ratings"].labels) == {"run-first", "run-second"}
