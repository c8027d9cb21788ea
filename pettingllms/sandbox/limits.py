"""What a sandboxed run may use (`SandboxLimits`) and what it reports (`SandboxResult`)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SandboxLimits:
    wall_s: float = 5.0
    cpu_s: float = 5.0
    memory_mb: int = 512  # RLIMIT_AS (address space)
    file_size_mb: int = 16  # largest file; bwrap's writable tmpfs holds 4x this in total
    max_processes: int = 64  # RLIMIT_NPROC for the program's own uid
    max_output_bytes: int = 1_000_000  # stdout + stderr together


@dataclass
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int | None  # negative: killed by that signal; None: never started
    timed_out: bool  # wall or CPU time limit hit
    error: str | None  # why it was stopped: timeout, cpu_time, memory, output_limit,
    #                    file_size, process_limit, signal:<NAME>, refused: ..., sandbox_error: ...
    wall_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.error is None
