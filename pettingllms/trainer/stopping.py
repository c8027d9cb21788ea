"""The stop path: one place that owns ending a run early and keeping its work.

Stop signals (`trainer.stop_signals`, default SIGTERM and SIGUSR1, as SLURM sends them before a
time limit or at preemption) and the first Ctrl-C ask the run to stop:

- a rollout or validation in flight (a `droppable` section) is dropped at once: the weights in
  memory are still those after the last update, so a checkpoint of them is valid;
- an update in flight finishes first (outside a droppable section the request is only noted and
  the trainer loop stops after the step);
- then the trainer writes a complete checkpoint, closes its loggers (W&B and MLflow mark the run
  preempted / killed, not crashed) and `train()` says in one line how to go on, exiting with
  EXIT_STOPPED.

A second Ctrl-C exits at once (EXIT_INTERRUPTED, no traceback); other repeated signals are noted
and ignored. The whole path is bounded by `trainer.stop_grace_s`: past it the process exits with
the checkpoints it already has (the one being written is left as .tmp, which resume ignores).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from pettingllms.utils.procs import descendants

log = logging.getLogger(__name__)

EXIT_STOPPED = 75  # EX_TEMPFAIL: stopped by a signal with its work kept; resume to go on
EXIT_IO_ERROR = 74  # EX_IOERR: a write failed (disk full...); the last complete checkpoint is intact
EXIT_INTERRUPTED = 130  # a second Ctrl-C: out at once, nothing more written

class StopRequested(BaseException):
    """Raised out of a droppable section (a BaseException, so no `except Exception` swallows it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StopSignals:
    """Signal handlers for the stop path; install with `with stops.installed():` (nestable)."""

    def __init__(self, names: Sequence[str] = ("SIGTERM", "SIGUSR1"), grace_s: float = 20.0) -> None:
        self.signals = [signal.Signals[n] for n in dict.fromkeys([*names, "SIGINT"])]
        self.grace_s = float(grace_s)
        self.reason: str | None = None  # the signal's name once a stop was asked for
        self.on_timeout = ""  # what the watchdog says when the grace runs out (the intact checkpoint)
        self._droppable = 0
        self._depth = 0
        self._previous: dict[signal.Signals, object] = {}
        self._watchdog: threading.Timer | None = None

    # ------------------------------------------------------------------ handlers
    @contextmanager
    def installed(self) -> Iterator["StopSignals"]:
        first = self._depth == 0 and threading.current_thread() is threading.main_thread()
        if first:
            for sig in self.signals:
                if signal.getsignal(sig) is not signal.SIG_IGN:  # an ignored signal stays ignored (nohup, &)
                    self._previous[sig] = signal.signal(sig, self._handle)
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if first:
                for sig, previous in self._previous.items():
                    signal.signal(sig, previous)  # type: ignore[arg-type]
                self._previous.clear()

    def reinstall(self) -> None:
        """Take the signals back after a library set its own handlers (ray.init installs C++
        handlers that abort the process on SIGTERM); a no-op when not installed."""
        if self._previous and threading.current_thread() is threading.main_thread():
            for sig in self._previous:
                signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if self.reason is not None:
            if signum == signal.SIGINT:
                sys.stderr.write(f"\ninterrupted again: exiting now (exit {EXIT_INTERRUPTED}); the checkpoint being "
                                 "written, if any, is left incomplete and resume ignores it\n")
                hard_exit(EXIT_INTERRUPTED)
            log.warning("%s received while stopping (%s); still stopping", name, self.reason)
            return
        self.reason = name
        self._start_watchdog()
        log.warning("%s received: stopping (the rollout in flight is dropped, an update in flight finishes; "
                    "then a checkpoint; at most %gs, trainer.stop_grace_s)%s", name, self.grace_s,
                    "; Ctrl-C again to exit at once" if signum == signal.SIGINT else "")
        if self._droppable:
            raise StopRequested(name)

    def _start_watchdog(self) -> None:
        def expire() -> None:
            sys.stderr.write(f"stopping took longer than trainer.stop_grace_s={self.grace_s:g}s: exiting now"
                             f"{'; ' + self.on_timeout if self.on_timeout else ''}\n")
            hard_exit(EXIT_STOPPED)

        if self.grace_s > 0:
            self._watchdog = threading.Timer(self.grace_s, expire)
            self._watchdog.daemon = True
            self._watchdog.start()

    def hand_on(self) -> None:
        """After the stop path, call the Python handler the stopping signal had before the run (e.g.
        Hydra's submitit launcher's USR2 handler, which requeues the job): a launcher's own
        preemption logic runs once the checkpoint is written."""
        sig = signal.Signals.__members__.get(self.reason or "")
        previous = self._previous.get(sig) if sig is not None else None
        if callable(previous) and previous is not signal.default_int_handler:
            previous(int(sig), None)

    def finished(self) -> None:
        """The stop path is done (the process is about to exit by itself)."""
        if self._watchdog is not None:
            self._watchdog.cancel()

    # ------------------------------------------------------------------ the loop's side
    @contextmanager
    def droppable(self) -> Iterator[None]:
        """Work that a stop abandons at once (rollout, validation, set-up)."""
        self.check()
        self._droppable += 1
        try:
            yield
        finally:
            self._droppable -= 1

    def check(self) -> None:
        if self.reason is not None:
            raise StopRequested(self.reason)


def resume_hint(run_dir: Path, run_name: str) -> str:
    """How to go on: resume=auto finds a named run's folder again; an unnamed run needs its path."""
    if run_name:
        return "run the same command with trainer.checkpoint.resume=auto to go on"
    return f"run the same command with trainer.checkpoint.resume={run_dir} to go on"


def stop_line(reason: str, step: int, checkpoint: Path | None, hint: str) -> str:
    if checkpoint is None:
        return f"stopped by {reason} before the first step: no checkpoint to keep; {hint.replace('go on', 'start again')}"
    return f"stopped by {reason} after step {step}: checkpoint {checkpoint}; {hint}"


def hard_exit(code: int) -> None:
    """Exit now: kill this process's children (engines, Ray, sandboxes) first, so none is orphaned."""
    for pid in reversed(descendants(os.getpid())):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        sys.stderr.flush()
        sys.stdout.flush()
    finally:
        os._exit(code)
