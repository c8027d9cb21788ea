"""Rollout engine over any OpenAI-compatible server (`rollout.engine=openai`): `vllm serve`, a
llama.cpp server, a hosted API, chosen by `rollout.openai.base_url` and model name.

Meant for evaluation and the demo. Chat requests (image parts as PNG data URLs) go to
/chat/completions with n, temperature, top_p, max_tokens, stop, seed and `logprobs: true`; top_k,
min_p and repetition_penalty (when set) go as vLLM's extra sampling fields and enable_thinking as its
`chat_template_kwargs`; a server that does not take them fails the request with one line naming them
(`_refused`). vLLM servers also return the prompt and response token ids (`return_token_ids`, a vLLM
extension, sent as an extra field that other servers ignore). The logprobs are whatever the server
computes (a vLLM server: `--logprobs-mode processed_logprobs` for those of the distribution sampled
from). Training needs both the engine's token ids and sampler logprobs, so a training run first asks
the server once and refuses with one line if either is missing (`training_problem`).

Policies map to served models: `rollout.openai.policy_models[policy]`, else `rollout.openai.model`,
else the server's first model. LoRA updates go to a vLLM server's runtime adapter endpoint
(/load_lora_adapter, server started with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and sharing this
machine's file system); full weights cannot be sent to a server.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping

from pettingllms.errors import ConfigError
from pettingllms.rollout.engines.base import Completion, GenerationRequest, RolloutEngine, check_params
from pettingllms.rollout.engines.weights import WeightUpdate, write_adapter
from pettingllms.utils.seeding import derive_seed
from pettingllms.utils.vision import openai_messages

_PROBE = [{"role": "user", "content": "Say OK."}]


class OpenAIEngine(RolloutEngine):
    def __init__(self, policies: Mapping[str, str], options: Any, seed: int = 0) -> None:
        from openai import OpenAI

        self.options = options
        self.seed = int(seed)
        self._calls = 0
        key = os.environ.get(str(options.api_key_env), "") or "EMPTY"  # local servers take any key
        self.client = OpenAI(base_url=str(options.base_url), api_key=key, timeout=float(options.timeout_s),
                             max_retries=1)
        self.models = self._models(list(policies))
        self._pool = ThreadPoolExecutor(max_workers=max(1, int(options.max_concurrency)))
        self._tmp: Path | None = None

    def _models(self, policies: list[str]) -> dict[str, str]:
        chosen = dict(self.options.policy_models or {})
        default = str(self.options.model or "")
        if not default and any(p not in chosen for p in policies):
            try:
                default = self.client.models.list().data[0].id
            except Exception as e:
                raise ConfigError(f"rollout.engine=openai: cannot reach {self.options.base_url} to list its "
                                  f"models ({type(e).__name__}: {e})") from None
        return {p: str(chosen.get(p, default)) for p in policies}

    # ------------------------------------------------------------ generation

    def _one(self, request: GenerationRequest, index: int, call: int) -> list[Completion]:
        p = request.params
        seed = p.seed if p.seed is not None else derive_seed(self.seed, call, index)
        extra: dict[str, Any] = {"return_token_ids": True}
        if p.top_k > 0:
            extra["top_k"] = int(p.top_k)
        if p.min_p > 0:
            extra["min_p"] = float(p.min_p)
        if p.repetition_penalty != 1.0:
            extra["repetition_penalty"] = float(p.repetition_penalty)
        if p.enable_thinking is not None:
            extra["chat_template_kwargs"] = {"enable_thinking": bool(p.enable_thinking)}
        try:
            resp = self.client.chat.completions.create(
                model=self.models[request.policy], messages=openai_messages(request.messages), n=int(p.n),
                temperature=float(p.temperature), top_p=float(p.top_p), max_tokens=int(p.max_new_tokens),
                stop=list(p.stop) or None, seed=int(seed), logprobs=True, extra_body=extra)
        except Exception as e:
            raise self._refused(e, extra) from e
        prompt = list(getattr(resp, "prompt_token_ids", None) or [])
        out = []
        for choice in sorted(resp.choices, key=lambda c: c.index):
            content = getattr(choice.logprobs, "content", None) or []
            ids = list(getattr(choice, "token_ids", None) or [])
            out.append(Completion(
                request_id=request.request_id, policy=request.policy, index=int(choice.index), prompt_ids=prompt,
                response_ids=ids, logprobs=[float(t.logprob) for t in content],
                text=choice.message.content or "", finish_reason="length" if choice.finish_reason == "length" else "stop"))
        return out

    def _refused(self, error: Exception, extra: Mapping[str, Any]) -> Exception:
        """A 400 answer to a request that carried extra sampling fields: one line naming them."""
        asked = sorted(set(extra) - {"return_token_ids"})
        if getattr(error, "status_code", None) != 400 or not asked:
            return error
        return ValueError(f"rollout.engine=openai: the server at {self.options.base_url} refused a request "
                          f"with {', '.join(asked)} (vLLM's extensions; this server may not take them): {error}")

    def generate(self, requests: list[GenerationRequest]) -> list[list[Completion]]:
        requests = [r if isinstance(r, GenerationRequest) else GenerationRequest.from_dict(r) for r in requests]
        for r in requests:
            check_params(r)
            if r.policy not in self.models:
                raise ValueError(f"unknown policy {r.policy!r}; this engine serves {sorted(self.models)}")
            if r.prompt_ids is not None:  # a chat-completions server renders the messages itself
                raise ValueError(f"request {r.request_id!r}: rollout.engine=openai takes messages, not prompt_ids")
        call = self._calls
        self._calls += 1
        return list(self._pool.map(lambda ir: self._one(ir[1], ir[0], call), enumerate(requests)))

    def training_problem(self) -> str | None:
        """Why this server cannot feed training (None: it can): one probe request."""
        policy = next(iter(self.models))
        c = self._one(GenerationRequest(_PROBE, policy, request_id="probe"), 0, -1)[0]
        return completion_problem(c, str(self.options.base_url))

    # ------------------------------------------------------------ weights

    def update_weights(self, update: WeightUpdate) -> None:
        if update.kind != "lora":
            raise ValueError(f"rollout.engine=openai cannot load full weights into a server (policy "
                             f"{update.policy!r}); use rollout.engine=vllm or hf")
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="pettingllms-openai-lora-"))
        name = f"{update.policy}-v{update.version}"
        folder = write_adapter(update, self._tmp / name)
        self.client.post("/load_lora_adapter", body={"lora_name": name, "lora_path": str(folder)}, cast_to=object)
        self.models[update.policy] = name

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self.client.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


def completion_problem(c: Completion, where: str) -> str | None:
    """A training run needs the server's own token ids and one logprob per response token."""
    if not c.prompt_ids or not c.response_ids:
        return (f"rollout.engine=openai: the server at {where} returns no token ids (training needs them; "
                "serve with vLLM, which returns them, or use rollout.engine=vllm)")
    if len(c.logprobs) != len(c.response_ids):
        return (f"rollout.engine=openai: the server at {where} returns {len(c.logprobs)} logprobs for "
                f"{len(c.response_ids)} response tokens (training needs one per token)")
    return None
