"""Where our trainer's resident memory goes, phase by phase, on vs_trl.py's task.

    .venv/bin/python scripts/bench/memory_timeline.py               # LoRA, 4 steps
    .venv/bin/python scripts/bench/memory_timeline.py --full        # full fine-tuning
    .venv/bin/python scripts/bench/memory_timeline.py trainer.logprob_chunk=256   # any override too

Runs our side of `vs_trl.py` (the same config, through LocalTrainer.train_step) in this process
with a thread reading /proc/self/statm every 5 ms, and prints the peak RSS of each phase (build,
then rollout / update per step) and, at the start and end of every update, the mappings that
hold the most resident memory (/proc/self/smaps: the heap, anonymous maps, the checkpoint file,
shared libraries). Linux only. A profiler, not a benchmark: compare ratios with vs_trl.py.
"""
from __future__ import annotations

import collections
import os
import re
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
GB = 2 ** 30


def rss_gb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / GB


def top_mappings(n: int = 6) -> str:
    """The n mappings (by path; anonymous ones together) with the most resident memory."""
    held: collections.Counter = collections.Counter()
    name = "[anon]"
    with open("/proc/self/smaps") as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                parts = line.split()
                name = parts[5] if len(parts) > 5 else "[anon]"
            elif line.startswith("Rss:"):
                held[name] += int(line.split()[1]) * 1024
    return ", ".join(f"{Path(k).name or k} {v / GB:.3f}" for k, v in held.most_common(n))


class Timeline:
    """Peak RSS per named phase, sampled by a daemon thread."""

    def __init__(self) -> None:
        self.phase, self.peaks = "start", {}
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            now = rss_gb()
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0.0), now)
            time.sleep(0.005)

    def enter(self, phase: str) -> None:
        self.phase = phase


def main(argv: list[str] | None = None) -> int:
    import vs_trl

    argv = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(argv):
        print(__doc__)  # then vs_trl's options, which this script takes
    extra = [a for a in argv if "=" in a and not a.startswith("-")]
    args = vs_trl.parse([a for a in argv if a not in extra])
    timeline = Timeline()
    from pettingllms.cli.config_loading import load_config
    from pettingllms.policies import worker as worker_module
    from pettingllms.trainer.local import LocalTrainer
    from pettingllms.utils.models import resolve_model_path
    from pettingllms.utils.threads import allowed_cpus

    timeline.enter("imports")
    out_dir = tempfile.mkdtemp(prefix="pettingllms-memory-")
    threads = args.threads if args.threads == "auto" else int(args.threads) or allowed_cpus()
    cfg = load_config("single_grpo", vs_trl.overrides(args, resolve_model_path(args.model), threads, out_dir) + extra)
    timeline.enter("build")
    trainer = LocalTrainer(cfg)
    step = 0
    train = worker_module.PolicyWorker._train

    def watched_train(self, *a, **k):  # the update proper: from the first forward to the last step
        print(f"  update {step} start: RSS {rss_gb():.3f} GB; {top_mappings()}", flush=True)
        timeline.enter(f"update {step}")
        try:
            return train(self, *a, **k)
        finally:
            timeline.enter(f"after update {step}")
            print(f"  update {step} end:   RSS {rss_gb():.3f} GB; {top_mappings()}", flush=True)

    worker_module.PolicyWorker._train = watched_train
    try:
        for step in range(1, int(cfg.trainer.total_steps) + 1):
            timeline.enter(f"rollout {step}")
            m = trainer.train_step(step)
            trainer.step = step
            print(f"step {step}: {m['timing/step_s']:.2f} s (generate {m['timing/generate_s']:.2f}, "
                  f"update {m['timing/update_s']:.2f})", flush=True)
    finally:
        worker_module.PolicyWorker._train = train
        trainer.close()
    time.sleep(0.02)
    for phase, peak in timeline.peaks.items():
        print(f"{phase:>16}: peak RSS {peak:.3f} GB")
    print(f"process peak (ru_maxrss): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.3f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
