"""Our training step against TRL's GRPOTrainer on the same work (suite rows 3 and 4).

Both trainers train the same tiny model (the default ``model: tiny`` of ``PolicySettings``,
built by ``load_policy``) with plain LoRA r16 / alpha 32 on the same projection modules: TRL
cannot train the move-token embedding rows our shipped recipes add. Both see the same work per
step:

- 8 Tic-Tac-Toe opening prompts (the env's own observations, rendered with the chat template),
  each completed ``--generations`` times (GRPO groups), so 64 completions per step;
- at most 8 new tokens, temperature 1.0;
- the same reward (1 when the completion holds a legal move of its board, else 0);
- group-relative advantages, one optimizer step per batch (TRL ``num_iterations=1``), no KL
  term (``beta=0``);
- AdamW at the same learning rate, every sequence in one micro-batch.

Ours computes each GRPO group's prompt once (``model.share_prompts``, on by default:
``sp_lightning/shared_prompts.py``), which TRL 1.16 does not: the same logprobs and gradients
from about a quarter of the tokens here. The "plain forward" row turns that off
(``share_prompts: false``, every row's prompt computed as TRL does), so the two sources of the
lead can be told apart.

Ours is the real thing: ``SelfPlayModule`` and ``SelfPlayDataModule`` under a Lightning
``Trainer``, the arena playing one-turn episodes (``SingleTurnEpisode``, one GRPO group per
prompt). TRL's is ``GRPOTrainer.train()`` with ``use_cpu=True``. Figures:

- **update** (benchmark 3): seconds of learning from a batch and training tokens/s (prompt +
  completion tokens per step / update seconds), measured the same way on both sides: the
  step's wall time minus the time spent producing the batch (ours: the arena's
  ``rollout/seconds``; TRL: its ``_generate_and_score_completions``). Each side's own overhead
  (Lightning's loop and logging, the Hugging Face Trainer's) counts. The cut is not quite the
  same place: TRL's reward and advantages fall inside its generation figure, while our credit
  and batch building come after ``rollout/seconds`` stops and so count as update (against us).
  A third row gives ours
  without Lightning's share: the module's own ``train/update_seconds`` (collate, forward,
  backward, optimizer step), for where the time goes, with no ratio (TRL's loop stays in its
  figure);
- **step** (benchmark 4): seconds per optimizer step, generation included: wall time between
  consecutive step ends, on both sides.

Medians over the measured steps, after ``--warmup`` steps. The three runs alternate in rounds
(ours, TRL, ours with the plain forward; again) so that a noisy neighbour hits all three. Ratios are TRL / ours:
above 1 means we are faster.

    pip install -e ".[bench]"   # trl==1.16.0
    python benchmarks/bench_trl.py                       # ~20 s
    python benchmarks/bench_trl.py --steps 20 --rounds 3
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass, field

import torch

from envs import parse_move
from sp_lightning.arena import Arena
from sp_lightning.credit import GRPO
from sp_lightning.episodes.single_turn import SingleTurnEpisode
from sp_lightning.model import LoraSettings, PolicySettings, load_policy
from sp_lightning.rollout import SamplingSettings
from sp_lightning.rubric import Rubric
from sp_lightning.sources import EpisodeRequest

PROMPTS = 8
MAX_NEW_TOKENS = 8
LR = 1e-4
SETTINGS = PolicySettings(model="tiny", lora=LoraSettings(r=16, alpha=32))


@dataclass
class Work:
    """What both trainers do each step: ``prompts`` (text, legal moves) each completed
    ``generations`` times with at most ``max_new_tokens`` tokens, by ``policy`` (loaded the same
    way for both), on the GPU (bf16 throughout) or the CPU. ``benchmarks/gpu_check.py`` runs the
    same comparison on a GPU with a real-architecture model and long answers."""

    prompts: list[tuple[str, list[str]]]
    generations: int = 8
    max_new_tokens: int = MAX_NEW_TOKENS
    policy: PolicySettings = field(default_factory=lambda: SETTINGS)
    gpu: bool = False

    @property
    def batch(self) -> int:
        return len(self.prompts) * self.generations


def board_prompts(count: int) -> list[tuple[str, list[str]]]:
    """``count`` Tic-Tac-Toe observations (a few random opening moves each) and their legal moves."""
    from envs import RandomBot, make

    rng = random.Random(0)
    prompts = []
    while len(prompts) < count:
        env = make("tictactoe_v1")
        env.reset(seed=rng.randrange(2**31))
        bot = RandomBot(seed=rng.randrange(2**31))
        for _ in range(rng.randrange(0, 4)):
            info = env.infos[env.agent_selection]
            env.step(bot.act("", info["legal_actions"]))
        agent = env.agent_selection
        prompts.append((env.observe(agent)["text"], list(env.infos[agent]["legal_actions"])))
    return prompts


def legal_move_reward(completion: str, legal: list[str]) -> float:
    """1 when the completion's move, read as the env reads it (its last ``[...]``), is legal."""
    return float(parse_move(completion) in legal)


# ---- ours: the real module, datamodule and Lightning Trainer -------------------------------------

class PromptArena(Arena):
    """Each batch: every prompt ``generations`` times, each prompt's completions one GRPO group."""

    def __init__(self, prompts, generations: int, **engine):
        super().__init__(**engine)
        self.prompts, self.generations = prompts, generations

    def get_batch(self, rng, size):
        def reward(rollout, extras):
            return {"assistant": legal_move_reward(extras["completion"], extras["legal"])}

        requests = []
        for k, (text, legal) in enumerate(self.prompts):
            episode = SingleTurnEpisode(f"prompt{k}", [{"role": "user", "content": text}],
                                        Rubric(outcome=[(reward, 1.0)]), extras={"legal": legal})
            requests += [EpisodeRequest(episode, rng.randrange(2**31)) for _ in range(self.generations)]
        return requests


def run_ours(work: Work, steps: int, warmup: int, share_prompts: bool = True,
             module_class=None) -> dict[str, list[float]]:
    """Our trainer on ``work`` for ``warmup + steps`` steps: the measured steps' figures.
    ``module_class``: a subclass of ``SelfPlayModule`` to run instead (a profiling one)."""
    import lightning as L

    from sp_lightning.data import SelfPlayDataModule
    from sp_lightning.module import OptimizerSettings, SelfPlayModule

    clock = StepClock()

    class Clock(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            played = pl_module.last_batch
            clock.step_end(generation=played.metrics["rollout/seconds"],
                           tokens=sum(len(r.prompt_ids) + len(r.completion_ids) for r in played.records),
                           inner=float(trainer.callback_metrics["train/update_seconds"]))

    module = (module_class or SelfPlayModule)(
        policy=work.policy, optimizer=OptimizerSettings(lr=LR, grad_clip=None), micro_batch_size=work.batch,
        micro_batch_tokens=None, share_prompts=share_prompts)
    dm = SelfPlayDataModule(arena=functools.partial(PromptArena, work.prompts, work.generations),
                            episodes_per_batch=work.batch,
                            sampling=SamplingSettings(max_new_tokens=work.max_new_tokens, temperature=1.0),
                            credit=GRPO(group_by=["episode"]))
    device = dict(accelerator="gpu", precision="bf16-true") if work.gpu else dict(accelerator="cpu")
    with tempfile.TemporaryDirectory() as root:
        trainer = L.Trainer(max_steps=warmup + steps, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                            num_sanity_val_steps=0, callbacks=[Clock()], default_root_dir=root, **device)
        clock.start()
        trainer.fit(module, datamodule=dm)
    return clock.measured(warmup)


# ---- TRL ------------------------------------------------------------------------------------------

def run_trl(work: Work, steps: int, warmup: int) -> dict[str, list[float]]:
    """TRL's GRPOTrainer on ``work`` for ``warmup + steps`` steps: the measured steps' figures."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    prompts, generations = work.prompts, work.generations
    model, tokenizer = load_policy(work.policy)  # the same peft model: TRL takes a PeftModel as it is
    rendered = [tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                              add_generation_prompt=True) for text, _ in prompts]
    legal_by_prompt = {r: legal for r, (_, legal) in zip(rendered, prompts)}
    rows = (warmup + steps) * len(prompts)
    dataset = Dataset.from_dict({"prompt": [rendered[i % len(rendered)] for i in range(rows)]})

    def reward(prompts, completions, **_):
        return [legal_move_reward(c, legal_by_prompt[p]) for p, c in zip(prompts, completions)]

    clock = StepClock()
    batch = work.batch
    # transformers renamed gradient_checkpointing (5.17, the GPU machines') to activation_checkpointing
    no_checkpointing = {("activation_checkpointing" if "activation_checkpointing" in GRPOConfig.__dataclass_fields__
                         else "gradient_checkpointing"): False}
    with tempfile.TemporaryDirectory() as root:
        config = GRPOConfig(
            output_dir=root, use_cpu=not work.gpu, bf16=work.gpu, report_to="none", **no_checkpointing,
            per_device_train_batch_size=batch, num_generations=generations, max_completion_length=work.max_new_tokens,
            temperature=1.0, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=0.0,
            beta=0.0, num_iterations=1, steps_per_generation=1, max_steps=warmup + steps, logging_strategy="no",
            save_strategy="no", shuffle_dataset=False, seed=0, disable_tqdm=True, dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                              processing_class=tokenizer)
        generate_and_score = trainer._generate_and_score_completions
        pending = {}

        def timed(inputs):
            start = time.perf_counter()
            out = generate_and_score(inputs)
            pending["generation"] = time.perf_counter() - start
            pending["tokens"] = int(out["prompt_mask"].sum() + out["completion_mask"].sum())
            return out

        trainer._generate_and_score_completions = timed

        class Clock(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                clock.step_end(generation=pending.pop("generation"), tokens=pending.pop("tokens"))

        trainer.add_callback(Clock())
        trainer.remove_callback(PrinterCallback)  # its log lines would bury the table
        clock.start()
        trainer.train()
    return clock.measured(warmup)


class StepClock:
    """Wall time between step ends, and the part of it that was not producing the batch."""

    def __init__(self):
        self.rows: list[dict[str, float]] = []
        self.last = 0.0

    def start(self) -> None:
        self.last = time.perf_counter()

    def step_end(self, tokens: int, generation: float, inner: float = float("nan")) -> None:
        if torch.cuda.is_available():  # the step's queued kernels count in its own time
            torch.cuda.synchronize()
        now = time.perf_counter()
        step = now - self.last
        self.last = now
        self.rows.append({"step": step, "update": step - generation, "generation": generation,
                          "tokens": float(tokens), "inner": inner})

    def measured(self, warmup: int) -> dict[str, list[float]]:
        rows = self.rows[warmup:]
        return {key: [r[key] for r in rows] for key in ("step", "update", "generation", "tokens", "inner")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="measured steps per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt (GRPO group size)")
    opts = parser.parse_args()
    warnings.filterwarnings("ignore")
    from sp_lightning.threads import configure_torch_threads

    threads = configure_torch_threads()
    work = Work(board_prompts(PROMPTS), generations=opts.generations)
    ours: dict[str, list[float]] = {"step": [], "update": [], "tokens": [], "inner": []}
    plain: dict[str, list[float]] = {"step": [], "update": [], "tokens": [], "inner": []}
    trl: dict[str, list[float]] = {"step": [], "update": [], "tokens": [], "inner": []}
    ours_plain = functools.partial(run_ours, share_prompts=False)
    for _ in range(opts.rounds):
        for run, into in ((run_ours, ours), (run_trl, trl), (ours_plain, plain)):
            torch.manual_seed(0)
            got = run(work, opts.steps, opts.warmup)
            for key in into:
                into[key] += got[key]
    med = statistics.median

    def rate(d):
        return statistics.median(t / u for t, u in zip(d["tokens"], d["update"]))

    print(f"{PROMPTS} prompts x {opts.generations} completions, <= {MAX_NEW_TOKENS} new tokens, LoRA r16, "
          f"{threads} threads; medians of {len(ours['step'])} steps each")
    print(f"{'':<26}{'ours':>12}{'TRL 1.16':>12}{'TRL / ours':>12}")
    print(f"{'tokens per step':<26}{med(ours['tokens']):>12.0f}{med(trl['tokens']):>12.0f}")
    print(f"{'update seconds':<26}{med(ours['update']):>12.4f}{med(trl['update']):>12.4f}"
          f"{med(trl['update']) / med(ours['update']):>12.2f}")
    print(f"{'training tokens/s':<26}{rate(ours):>12.0f}{rate(trl):>12.0f}"
          f"{rate(ours) / rate(trl):>12.2f}  (ours / TRL)")
    print(f"{'  ours, plain forward':<26}{rate(plain):>12.0f}{rate(trl):>12.0f}"
          f"{rate(plain) / rate(trl):>12.2f}  (share_prompts: false, every row's prompt computed)")
    print(f"{'  ours, module timer':<26}{med(ours['inner']):>12.4f}  (train/update_seconds: without "
          f"Lightning's loop and logging; TRL has no such figure, so no ratio)")
    print(f"{'seconds per step':<26}{med(ours['step']):>12.4f}{med(trl['step']):>12.4f}"
          f"{med(trl['step']) / med(ours['step']):>12.2f}")
    print("targets: training throughput >= 1.5x TRL's (goal 2x); seconds per step: lower than TRL's")


if __name__ == "__main__":
    main()
