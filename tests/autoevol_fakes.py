"""Test doubles for MetaAgent-X (`autoevol`): a scripted executor with run_designs' signature and an
engine wrapper that scripts the designer's replies while the executor's node calls reach a real engine.

scripted_run_designs(log)  stands in for pettingllms.mas.executor.run_designs: a design whose source
                           says "design A" has 2 nodes, any other 1; every node is one executor-policy
                           request (all live jobs' nodes of one depth in one generate call); answers:
                           A/x0 \\boxed{5}, A/x1 \\boxed{4}, B/x0 fails (budget), B/x1 \\boxed{5}.
ScriptedDesigner(engine, tokenizer, texts)  designer requests (request_id ".../design") get `texts`
                           (cycled), tokenised with the real tokenizer; every other request goes to
                           `engine` unchanged.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pettingllms.rollout.engines.base import Completion, GenerationRequest, RolloutEngine, SamplingParams

DESIGN_A = "Plan.\n```python\n# design A\nsolver = agent('solver')\n```"
DESIGN_B = "```python\n# design B\nsolver = agent('solver')\n```"
NO_DESIGN = "I would ask a solver."
ANSWERS = {("A", 0): "\\boxed{5}", ("A", 1): "\\boxed{4}", ("B", 1): "The answer is \\boxed{5}"}


def scripted_run_designs(log: list):
    def run(jobs, engine, policy, sampling, budgets, seed):
        log.append(dict(jobs=list(jobs), policy=policy, sampling=sampling, seed=seed))
        plans = {}
        for job in jobs:
            name = "A" if "design A" in job.design_source else "B"
            x = int(job.job_id.rsplit("x", 1)[1])
            plans[job.job_id] = (name, x, 2 if name == "A" else 1)
        calls = {j.job_id: [] for j in jobs}
        for node in range(2):
            live = [j for j in jobs if node < plans[j.job_id][2]]
            if not live:
                continue
            msgs = [[{"role": "user", "content": f"{j.question} #{node}"}] for j in live]
            outs = engine.generate([GenerationRequest(messages=m, policy=policy,
                                                      params=SamplingParams(n=1, seed=seed + node),
                                                      request_id=f"{j.job_id}/n{node}")
                                    for j, m in zip(live, msgs)])
            for j, m, comps in zip(live, msgs, outs):
                calls[j.job_id].append(SimpleNamespace(node_id=f"n{node}", role="solver", messages=m,
                                                       completion=comps[0]))
        results = []
        for job in jobs:
            name, x, _ = plans[job.job_id]
            answer = ANSWERS.get((name, x))
            results.append(SimpleNamespace(job_id=job.job_id, ok=answer is not None, answer=answer,
                                           error=None if answer else "budget: calls", trace=[], log="",
                                           timing={}, node_calls=calls[job.job_id]))
        return results[::-1]  # order must not matter: results are matched by job id
    return run


class ScriptedDesigner(RolloutEngine):
    def __init__(self, engine: RolloutEngine, tokenizer: Any, texts: list[str]) -> None:
        self.engine, self.tokenizer, self.texts = engine, tokenizer, list(texts)

    def generate(self, requests: list[GenerationRequest]) -> list[list[Completion]]:
        design = [i for i, r in enumerate(requests) if r.request_id.endswith("/design")]
        rest = [r for r in requests if not r.request_id.endswith("/design")]
        out_rest = iter(self.engine.generate(rest) if rest else [])
        out = []
        for i, req in enumerate(requests):
            if i not in design:
                out.append(next(out_rest))
                continue
            comps = []
            for j in range(req.params.n):
                text = self.texts[j % len(self.texts)]
                ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
                prompt = self.tokenizer(req.messages[-1]["content"], add_special_tokens=False)["input_ids"]
                comps.append(Completion(request_id=req.request_id, policy=req.policy, index=j,
                                        prompt_ids=prompt, response_ids=ids, logprobs=[-1.0] * len(ids),
                                        text=text, finish_reason="stop"))
            out.append(comps)
        return out

    def update_weights(self, update: Any) -> None:
        self.engine.update_weights(update)

    def close(self) -> None:
        self.engine.close()
