"""Budgets of one design execution (also the `mas.budgets` config block, see config.MasConfig)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class MasBudgets:
    max_nodes: int = 64  # nodes a design may construct
    max_calls: int = 32  # LLM calls of one execution
    max_tool_calls: int = 8  # python_tool calls of one execution
    max_tokens: int = 32768  # prompt + response tokens over all LLM calls of one execution
    wall_s: float = 120.0  # sandbox time + the generation batches the execution waited on
    round_wall_s: float = 10.0  # one sandbox run (a replay up to the next batch of calls)
    max_loop_iters: int = 8  # cap on Loop / Debate / Reflection rounds
    max_design_chars: int = 20000  # longer designs are refused before running
    max_prompt_chars: int = 16000  # one LLM call's messages
    max_answer_chars: int = 4000  # the final answer is cut to this
    max_log_chars: int = 20000  # what the design prints
    memory_mb: int = 512  # address space of the sandboxed design process
    tool_wall_s: float = 5.0  # one python_tool run
    sandbox_workers: int = 2  # designs replayed in parallel (each is its own process)

    def dsl_limits(self) -> dict:
        """The limits the DSL enforces inside the sandbox."""
        return {"max_nodes": int(self.max_nodes), "max_calls": int(self.max_calls),
                "max_tool_calls": int(self.max_tool_calls),
                "max_prompt_chars": int(self.max_prompt_chars),
                "max_loop_iters": int(self.max_loop_iters)}

    @classmethod
    def from_cfg(cls, cfg) -> "MasBudgets":
        """From a config block (dict or DictConfig); missing keys keep their defaults."""
        if cfg is None:
            return cls()
        if isinstance(cfg, cls):
            return cfg
        known = cls.__dataclass_fields__
        items = dict(cfg.items())
        unknown = sorted(set(items) - set(known))
        if unknown:
            raise ValueError(f"unknown mas budget keys {unknown}; known: {sorted(known)}")
        return cls(**items)
