"""The trainer loop, one implementation for every backend (trainer/backends/: where engines,
env workers and policy workers live).

One step:
    problems  <- seeded data order (position saved in checkpoints)
    batch     <- backend runner .run(problems, seed=derive_seed(seed, "rollout", step))
    advantages on every sample (algorithm config)
    for each policy trainable at this step: worker.update(its agents' samples)
    backend.sync_weights(updated policies)   (adapter tensors for LoRA, full weights otherwise)
    metrics, trajectories, validation (val_freq), checkpoint (save_freq)
Steps are numbered from 1; a checkpoint at step N holds the state after N steps.
A stop signal (trainer/stopping.py) drops the rollout in flight, lets an update finish, then the
run checkpoints its last complete step and `train` exits with one line saying how to go on.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig

from pettingllms.config.schema import PhaseConfig, RoleLrConfig
from pettingllms.errors import ConfigError, WriteFailed
from pettingllms.policies.mapping import role_lrs_at
from pettingllms.trainer import assemble
from pettingllms.trainer import checkpoint as ckpt_io
from pettingllms.trainer import components as comp
from pettingllms.trainer.backends import make_backend
from pettingllms.trainer.data import DataOrder
from pettingllms.trainer.evaluation import flat_metrics
from pettingllms.trainer.metrics import (batch_metrics, policy_metrics, refill_metrics, sandbox_warning,
                                         starved_agents, summed_counters, timing_sum)
from pettingllms.trainer.stopping import (EXIT_IO_ERROR, EXIT_STOPPED, StopRequested, StopSignals, resume_hint,
                                          stop_line)
from pettingllms.utils.diskio import as_write_failed
from pettingllms.trainer.timing import Stopwatch
from pettingllms.utils.seeding import capture_rng_state, derive_seed, restore_rng_state

log = logging.getLogger(__name__)


def rollout_seed(seed: int, step: int) -> int:
    return derive_seed(int(seed), "rollout", int(step)) % (2**31)


def check_phases(phases: Sequence[PhaseConfig], names: list[str]) -> None:
    """A misspelt policy in trainer.phases would silently freeze everything: refuse it."""
    for phase in phases:
        unknown = [n for n in phase.train_policies if n not in names]
        if unknown:
            raise ConfigError(f"trainer.phases[start_step={phase.start_step}] names unknown policies "
                              f"{unknown}; the policies are {names}")


def check_role_lr(role_lr: RoleLrConfig, agents: list[str]) -> None:
    unknown = [a for a in role_lr.lrs if a not in agents]
    if unknown:
        raise ConfigError(f"trainer.role_lr.lrs names unknown agents {unknown}; the agents are {agents}")
    if int(role_lr.swap_every) < 0:
        raise ConfigError("trainer.role_lr.swap_every must be >= 0")


class LocalTrainer:
    """`engine` replaces the configured one (tests, or an engine living elsewhere; backend=local);
    `run_dir` is the run folder the command line chose (default: see outputs.resolve_run);
    `stops` the stop path's signal handlers (default: trainer.stop_signals, installed by `fit`)."""

    def __init__(self, cfg: DictConfig, engine: Any = None, run_dir: Path | None = None,
                 stops: StopSignals | None = None) -> None:
        self.cfg = cfg  # handed to trainer.assemble, which gives each component its blocks
        self.loop = loop = assemble.loop_settings(cfg)
        self.stops = stops or StopSignals(loop.stop_signals, loop.stop_grace_s)
        self.stopped: str | None = None  # the signal that stopped `fit` early
        self.stop_checkpoint: Path | None = None  # its checkpoint (None: stopped before step 1)
        self.failed: WriteFailed | None = None  # the write that ended `fit` (disk full...)
        self.setup = assemble.build_run(cfg)
        self.run_dir, resume_from = assemble.resolve_run_folder(cfg, run_dir)

        self.env_factory = comp.make_env_factory(cfg)
        self.agents = list(self.env_factory().agents)
        self.problems = comp.load_problems(cfg, "train", cfg.env.train_limit)
        self.order = DataOrder(len(self.problems), loop.seed)
        self.backend = make_backend(cfg, self.env_factory, engine=engine, run_dir=self.run_dir)
        try:  # engines, Ray actors: nothing started here outlives a failed set-up
            self.policies = self.backend.build_policies(self.agents)
            self.workers: dict[str, Any] = dict(self.policies.workers)
            self.agent_policy: dict[str, str] = dict(self.policies.agent_policy)
            check_phases(loop.phases, list(self.workers))
            check_role_lr(loop.role_lr, self.agents)
            if resume_from is None:  # trainer.checkpoint.init_from (e.g. the SFT cold start); a resume wins
                assemble.load_initial_weights(cfg, self.workers)
            self.backend.start(comp.policy_bases(self.policies))
            self.stops.reinstall()  # Ray's start replaced the SIGTERM handler with its own
            self.backend.check_trainable()
        except BaseException:
            self.backend.close()
            raise
        self.rollout = self.backend.runner()

        self.step = 0
        self.history: list[dict[str, Any]] = []
        rng_state = None
        if resume_from is not None:  # an unreadable checkpoint falls back to the previous one
            resume_from, state = ckpt_io.load_checkpoint(resume_from, self.workers, run_dir=self.run_dir)
            self.order.load_state_dict(state["data"])
            self.step = int(state["step"])
            self.history = [dict(m) for m in state.get("metrics", [])]
            rng_state = state["rng"]
            log.info("resuming %s from step %d", self.run_dir, self.step)
        self.backend.sync_weights()
        self._val_problems: list[dict[str, Any]] | None = None
        self.val_before: dict[str, float] = {}
        self.outputs = assemble.run_outputs(cfg, self.run_dir, self.history,
                                            resume_step=self.step if resume_from is not None else None)
        if rng_state is not None:  # last, after everything that draws random numbers at build time
            restore_rng_state(rng_state)

    # ------------------------------------------------------------------ one step
    def train_step(self, step: int) -> dict[str, Any]:
        loop, sw = self.loop, Stopwatch()
        self.backend.begin_step()
        t_step = time.perf_counter()
        before = self.order.state_dict(), capture_rng_state()
        try:  # a stop drops the rollout: the data position and RNG go back to the step's start
            with self.stops.droppable(), sw.section("rollout"):
                problems = [self.problems[i] for i in self.order.next_indices(loop.batch_size)]
                batch = self.rollout.run(problems, seed=rollout_seed(loop.seed, step), step=step)
                from pettingllms.algorithms.filtering import refill_batches  # algorithm.group_filter=dapo
                batches = refill_batches(batch, loop.algorithm.group_filter, loop.max_refill, lambda i: self.rollout.run(
                    [self.problems[j] for j in self.order.next_indices(loop.batch_size)],
                    seed=derive_seed(loop.seed, "refill", step, i) % (2**31), step=step))
        except StopRequested:
            self.order.load_state_dict(before[0])
            restore_rng_state(before[1])
            raise
        batch.step = step
        self.backend.pause_engines()
        with sw.section("advantages"):
            from pettingllms.algorithms.advantages import compute_advantages
            from pettingllms.algorithms.filtering import filter_batches
            for b in batches:  # each rollout's groups on their own (a refill may draw a problem again)
                compute_advantages(b.samples, loop.algorithm)
            train, filtered = filter_batches([b.samples for b in batches], loop.algorithm.group_filter)
        reports: dict[str, dict[str, Any]] = {}
        on = self.policies.set_step(step)  # trainer.phases: which policies train now
        updated = [name for name in self.workers if name in on]
        with sw.section("update"):
            parts = self.policies.split(train)
            if filtered:  # a filtered-out policy costs no update (and no weight sync)
                updated = [name for name in updated if parts[name]]
            lrs = role_lrs_at(loop.role_lr, step)  # trainer.role_lr: per-role rates
            for name in updated:
                if lrs is None:
                    reports[name] = self.workers[name].update(parts[name], step)
                else:
                    reports[name] = self.workers[name].update(parts[name], step, role_lrs=lrs)
        with sw.section("sync"):
            if self.stops.reason is None:  # stopping: the checkpoint needs no engine
                self.backend.sync_weights(updated)
        with sw.section("bookkeeping"):
            metrics: dict[str, Any] = {"step": step, "epoch": self.order.epoch,
                                       "data/consumed": self.order.consumed}
            metrics.update(batch_metrics(batch, self.agents))  # the first rollout
            metrics.update(refill_metrics(batches, self.agents))  # refill/*: the refill rollouts
            metrics.update(policy_metrics(reports))
            metrics.update(filtered)  # filter/*: groups dropped, refills (algorithm.group_filter)
            metrics["policies/trained"] = float(len(updated))
            metrics.update(summed_counters(batches))  # sandbox/*, judge/*: every rollout, where the envs stepped
            if (warning := sandbox_warning(metrics)) is not None:
                log.warning("step %d: %s", step, warning)
            if loop.logging.save_trajectories:
                self.outputs.write_trajectories(step, batch.episodes)
        step_s = time.perf_counter() - t_step
        gen = self.backend.generation_stats()
        generate_s = gen.generate_s
        env_s = max(0.0, sw.get("rollout") - generate_s)  # env steps, sandbox, prompt building
        logprob_s = timing_sum(reports, "logprob_s")
        update_s = max(0.0, sw.get("update") - logprob_s)
        metrics.update({
            "timing/step_s": step_s, "timing/generate_s": generate_s, "timing/env_s": env_s,
            "timing/logprob_s": logprob_s, "timing/update_s": update_s,
            "timing/weight_sync_s": sw.get("sync"),
            "timing/other_s": max(0.0, step_s - generate_s - env_s - logprob_s - update_s),
            "tokens/generated_per_s": gen.generated_tokens / generate_s if generate_s > 0 else 0.0,
        })
        return metrics

    def validate(self, step: int) -> dict[str, float]:
        cfg = self.cfg
        if self._val_problems is None:
            limit = cfg.eval.limit if cfg.eval.limit is not None else cfg.env.test_limit
            self._val_problems = comp.load_problems(cfg, cfg.eval.split, limit)
        result = assemble.evaluate_on(self.backend.runner, cfg, self._val_problems,
                                      seed=derive_seed(int(cfg.seed), "val") % (2**31))
        return flat_metrics(result)

    def save(self) -> Path:
        state = {"data": self.order.state_dict(), "metrics": self.history}
        path = ckpt_io.save_checkpoint(self.run_dir, self.step, self.workers, state)
        ckpt_io.prune_checkpoints(self.run_dir, int(self.loop.checkpoint.keep_checkpoints))
        return path

    # ------------------------------------------------------------------ the loop
    def fit(self, max_steps: int | None = None) -> list[dict[str, Any]]:
        """Train to trainer.total_steps (or stop after `max_steps` more); returns all metrics."""
        from tqdm import tqdm

        loop = self.loop
        total = loop.total_steps
        stop = total if max_steps is None else min(total, self.step + int(max_steps))
        bar = tqdm(total=total, initial=self.step, desc=loop.experiment, unit="step",
                   disable=not loop.logging.progress_bar, file=sys.stderr, dynamic_ncols=True)
        with self.stops.installed():
            self.stops.reinstall()
            try:
                self._loop(stop, bar, time.perf_counter())
            except StopRequested as e:
                self.stopped = e.reason
            except WriteFailed as e:  # the run ends; the last complete checkpoint is intact
                self.failed = e
            finally:
                bar.close()
            if self.stopped is not None and self.failed is None:  # a checkpoint of the last complete step
                self.stops.on_timeout = (f"last complete checkpoint: {ckpt_io.latest_checkpoint(self.run_dir)}; "
                                         + resume_hint(self.run_dir, loop.run_name))
                try:
                    self.stop_checkpoint = self._checkpoint_now()
                except WriteFailed as e:
                    self.failed = e
            if self.stopped is not None or self.failed is not None:
                return self.history
        if loop.validation.val_before and self.step == total:
            print(before_after(self.val_before, self.history), flush=True)
        return self.history

    def _loop(self, stop: int, bar: Any, t_run: float) -> None:
        val, logging_, saving = self.loop.validation, self.loop.logging, self.loop.checkpoint
        if val.val_before:
            with self.stops.droppable():
                self.validate_before()
        while self.step < stop:
            self.stops.check()
            step = self.step + 1
            metrics = self.train_step(step)
            self.step = step
            if int(val.val_freq) > 0 and step % int(val.val_freq) == 0:
                t0 = time.perf_counter()
                try:  # a stop drops the validation; the step itself is complete
                    with self.stops.droppable():
                        metrics.update(self.validate(step))
                except StopRequested:
                    pass
                metrics["timing/val_s"] = time.perf_counter() - t0
            metrics["time/elapsed_s"] = time.perf_counter() - t_run
            self.history.append(metrics)
            bar.update(1)
            self.outputs.log_metrics(metrics)
            trained = [a for a in self.agents if a not in self.policies.untrained]  # the others need no signal
            for agent, streak in starved_agents(self.history, trained, int(logging_.starvation_warn_steps)):
                log.warning("agent '%s' has had no learning signal for %d steps: every group of its "
                            "samples had equal rewards (groups/zero_var_frac/%s = 1). Check its local "
                            "reward and reward.local_weight, or raise rollout.k", agent, streak, agent)
            if (int(saving.save_freq) > 0 and step % int(saving.save_freq) == 0) or step == stop:
                self.save()

    def _checkpoint_now(self) -> Path | None:
        """The stop path's checkpoint of the last complete step (None before the first step)."""
        if self.step == 0:
            return None
        latest = ckpt_io.latest_checkpoint(self.run_dir)
        if latest is not None and ckpt_io.checkpoint_dir(self.run_dir, self.step) == latest:
            return latest
        return self.save()

    def failure_message(self) -> str:
        latest = ckpt_io.latest_checkpoint(self.run_dir)
        kept = f"checkpoint {latest} is intact" if latest is not None else "no checkpoint was completed"
        return (f"{self.failed}; {kept}; free space, then "
                + resume_hint(self.run_dir, self.loop.run_name))

    def stop_message(self) -> str:
        return stop_line(str(self.stopped), self.step, self.stop_checkpoint,
                         resume_hint(self.run_dir, self.loop.run_name))

    def validate_before(self) -> None:
        """Held-out accuracy of the untrained policy, once per run (kept in val_before.json, so a
        resumed run reuses it): the baseline the end-of-run summary compares against."""
        path = self.run_dir / "val_before.json"
        if path.exists():
            self.val_before = json.loads(path.read_text())
            return
        if self.step > 0:  # a resumed run that never measured it: the policy is no longer untrained
            self.val_before = {}
            return
        t0 = time.perf_counter()
        self.val_before = self.validate(0)
        log.info("held-out before training (%.0fs): %s", time.perf_counter() - t0,
                 ", ".join(f"{k.removeprefix('val/')} {v:.3f}" for k, v in self.val_before.items() if k.count("/") == 2))
        try:
            path.write_text(json.dumps(self.val_before))
        except OSError as e:
            raise as_write_failed(path, e) from None

    def close(self) -> None:
        try:
            self.outputs.close(stopped=self.stopped or "")
        except Exception as e:  # noqa: BLE001 - after a failed write, closing the sinks may fail too
            if self.failed is None:
                raise
            log.debug("closing the loggers after %s: %s", self.failed, e)
        finally:
            self.backend.close()
            self.stops.finished()  # a stop's checkpoint, loggers and workers are done: no watchdog


def before_after(before: dict[str, float], history: list[dict[str, Any]]) -> str:
    """'held-out <env> avg@k: 0.453 before -> 0.547 after (+0.094); pass@k: ...' from the
    untrained validation and the last one logged (trainer.validation.val_freq must reach the last step)."""
    last = next((m for m in reversed(history) if any(k.startswith("val/") for k in m)), {})
    keys = [k for k in before if k.count("/") == 2 and "@" in k]
    if not keys or not last or last.get("step") != (history[-1]["step"] if history else None):
        return "held-out before -> after: no validation at the last step (set trainer.validation.val_freq to divide total_steps)"
    env = keys[0].split("/")[1]
    parts = [f"{k.split('/')[2]} {before[k]:.3f} before -> {last[k]:.3f} after ({last[k] - before[k]:+.3f})"
             for k in keys if k in last]
    return f"held-out {env} (untrained vs step {last['step']}): " + "; ".join(parts)


def train(cfg: DictConfig, run_dir: Path | None = None) -> Path:
    """Run training to the end; returns the run folder. Stopped by a signal (trainer.stop_signals,
    Ctrl-C): checkpoint, one line, SystemExit(EXIT_STOPPED)."""
    loop = assemble.loop_settings(cfg)
    stops = StopSignals(loop.stop_signals, loop.stop_grace_s)
    with stops.installed():
        try:
            with stops.droppable():  # loading models, starting engines: nothing to keep yet
                trainer = LocalTrainer(cfg, run_dir=run_dir, stops=stops)
        except StopRequested as e:
            stops.finished()
            log.warning(stop_line(e.reason, 0, None, "run the same command to go on"))
            raise SystemExit(EXIT_STOPPED) from None
        except WriteFailed as e:
            log.error("%s; nothing was trained; free space, then run the same command to start", e)
            raise SystemExit(EXIT_IO_ERROR) from None
        try:
            trainer.fit()
        finally:
            trainer.close()
        if trainer.failed is not None:
            stops.finished()
            log.error(trainer.failure_message())
            raise SystemExit(EXIT_IO_ERROR)
        if trainer.stopped is not None:
            stops.finished()
            log.warning(trainer.stop_message())
            stops.hand_on()  # e.g. submitit's requeue on its USR2
            raise SystemExit(EXIT_STOPPED)
    print(f"run folder: {trainer.run_dir}", flush=True)
    return trainer.run_dir
