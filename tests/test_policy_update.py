"""PolicyWorker.update and its parts: chunked logprobs, gradients, schedule, checkpoints."""
from __future__ import annotations

import math
from unittest import mock

import pytest
import torch

from numerics import THREADS, assert_close_by_size, exact_float64, forward_tol, num_threads
from policy_helpers import all_equal, any_changed, make_cfg, make_samples
from pettingllms.trainer.assemble import build_policy_set
from pettingllms.policies import logprobs as logprobs_module
from pettingllms.policies.logprobs import (full_logits_logprobs, linear_target_logprobs, pack, response_logprobs,
                                           target_logprobs)
from pettingllms.policies.training import lr_lambda
from pettingllms.utils.models import tiny_model


def _shared(cfg):
    return build_policy_set(cfg, ["tool", "reasoner"]).workers["shared"]


@pytest.mark.parametrize("lora", [False, True])
def test_two_updates_change_weights_with_finite_loss(lora):
    worker = _shared(make_cfg(lora=lora))
    samples = make_samples("tool", [1.0, -1.0, 0.5, -0.5], seed=1) + make_samples("reasoner", [2.0, -2.0], seed=2)
    before = worker.trainable_state()
    metrics = [worker.update(samples, step) for step in (0, 1)]
    after = worker.trainable_state()
    for m in metrics:
        assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]) and m["grad_norm"] > 0
        assert m["num_samples"] == 6 and m["optimizer_steps"] == 1
    assert any_changed(before, after)
    assert metrics[1]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)  # recomputed old logprobs: on-policy


def _fp64_cfg(extra=None):
    """Exactness claims run in float64 (see tests/numerics.py)."""
    return make_cfg(extra, dtype="float64", train_dtype="float64")


def _grad_terms(model, num_tokens: int) -> int:
    # Every logit of every response token feeds each parameter's gradient.
    return int(model.config.vocab_size) * num_tokens


@pytest.mark.parametrize("threads", THREADS)
def test_only_nonzero_advantage_samples_carry_gradient(threads):
    with num_threads(threads), exact_float64():
        _only_nonzero_advantage_samples_carry_gradient()


def _only_nonzero_advantage_samples_carry_gradient():
    cfg = _fp64_cfg()  # kl_coef = entropy_coef = 0
    worker = _shared(cfg)
    advs = [0.0, 1.5, 0.0, -1.0, 0.0]
    samples = make_samples("tool", advs, seed=3)
    old = worker._logprob_rows(samples)  # on-policy (ratio 1), so no token is clipped
    emb = worker.model.get_input_embeddings()
    outputs = []

    def keep_output(module, inputs, output):
        output.retain_grad()
        outputs.append(output)
    hook = emb.register_forward_hook(keep_output)
    worker._activate(train=True)
    worker.optimizer.zero_grad(set_to_none=True)
    worker.accumulate(samples, old, None, weight=1.0)
    hook.remove()
    grad_rows = outputs[0].grad  # [B, L, H], one row per sample in order
    for b, adv in enumerate(advs):
        row_norm = float(grad_rows[b].abs().sum())
        if adv == 0.0:
            assert row_norm == 0.0, f"sample {b} has zero advantage but carries gradient"
        else:
            assert row_norm > 0.0
    # Token-mean: the full batch's gradient is the nonzero samples' gradient times their token share.
    g_all = {n: p.grad.clone() for n, p in worker.model.named_parameters() if p.grad is not None}
    keep = [i for i, a in enumerate(advs) if a != 0.0]
    worker.optimizer.zero_grad(set_to_none=True)
    worker.accumulate([samples[i] for i in keep], [old[i] for i in keep], None, weight=1.0)
    share = sum(len(samples[i].response_ids) for i in keep) / sum(len(s.response_ids) for s in samples)
    terms = _grad_terms(worker.model, sum(len(s.response_ids) for s in samples))
    for n, p in worker.model.named_parameters():
        assert p.grad.dtype == torch.float64
        assert_close_by_size(g_all[n], p.grad * share, terms)


def test_zero_advantage_batch_gives_zero_gradient_update():
    worker = _shared(make_cfg({"trainer": {"weight_decay": 0.0}}))
    before = worker.trainable_state()
    m = worker.update(make_samples("tool", [0.0, 0.0, 0.0], seed=4), step=0)
    assert m["grad_norm"] == 0.0
    assert all_equal(before, worker.trainable_state())


def _recording(worker):
    """Wrap the worker's optimizer step so that every step's gradients are kept."""
    grads, accumulated = [], []
    step, accumulate = worker.optimizer.step, worker.accumulate

    def recorded_step(*a, **k):
        grads.append({n: p.grad.clone() for n, p in worker.model.named_parameters() if p.grad is not None})
        return step(*a, **k)

    def counted(samples, *a, **k):
        accumulated.extend(s.candidate for s in samples)
        return accumulate(samples, *a, **k)
    worker.optimizer.step, worker.accumulate = recorded_step, counted
    return grads, accumulated


def test_zero_advantage_samples_are_not_run_and_the_update_is_unchanged():
    with exact_float64():
        cfg = _fp64_cfg({"algorithm": {"mini_batches": 2}, "trainer": {"weight_decay": 0.01}})
        fast, full = _shared(cfg), _shared(cfg)
        full._contributing = lambda samples: [True] * len(samples)  # the plain path: every sample runs
        mixed = make_samples("tool", [0.0, 1.5, 0.0, -1.0, 0.0, 0.5], seed=3)
        zeros = make_samples("tool", [0.0, 0.0, 0.0, 0.0], seed=5)
        (g_fast, ran_fast), (g_full, ran_full) = _recording(fast), _recording(full)
        m_fast = [fast.update(mixed, 0)]
        diffs = [abs(a - b) for s, row in zip(zeros, fast.logprobs(zeros)) for a, b in zip(row, s.logprobs)]
        m_fast.append(fast.update(zeros, 1))
        m_full = [full.update(mixed, 0), full.update(zeros, 1)]
    assert sorted(ran_fast) == [1, 3, 5] and sorted(ran_full) == sorted([0, 1, 2, 3, 4, 5] + [0, 1, 2, 3])
    assert [m["zero_advantage_skipped"] for m in m_fast] == [3.0, 4.0]
    assert [m["zero_advantage_skipped"] for m in m_full] == [0.0, 0.0]
    for a, b in zip(m_fast, m_full):  # the batch loss is the same
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-12)
    # nothing ran at step 1, yet the engine-vs-trainer check measured every token (a no-grad pass;
    # the check itself runs in float32, as in the training forward: rel 1e-6)
    assert m_fast[1]["old_logprob_mismatch_mean"] == pytest.approx(sum(diffs) / len(diffs), rel=1e-6)
    assert m_fast[1]["old_logprob_mismatch_max"] == pytest.approx(max(diffs), rel=1e-6)
    assert len(g_fast) == len(g_full) == 4  # 2 mini-batches a step; the all-zero step still steps
    terms = _grad_terms(fast.model, sum(len(s.response_ids) for s in mixed))
    for a, b in zip(g_fast, g_full):
        assert a.keys() == b.keys()
        for n in a:
            assert_close_by_size(a[n], b[n], terms)
    assert all(float(g.abs().max()) == 0.0 for g in g_fast[-1].values())
    w_fast, w_full = fast.trainable_state(), full.trainable_state()
    for n in w_full:  # Adam's moments moved the weights on the zero-gradient step the same way
        assert_close_by_size(w_fast[n], w_full[n], terms)


def test_loss_metrics_of_a_partly_skipped_batch_are_means_over_what_ran():
    worker = _shared(make_cfg())  # one optimizer step: on-policy, every ratio is 1
    m = worker.update(make_samples("tool", [0.0, 1.0, 0.0, -1.0], seed=6), step=0)
    assert m["zero_advantage_skipped"] == 2.0
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-6) and m["clipfrac"] == 0.0


def test_tokens_run_counts_a_shared_prompt_once_and_skipped_samples_not_at_all():
    worker = _shared(make_cfg({"trainer": {"micro_batch_size": 8}}))
    samples = make_samples("tool", [1.0, -1.0, 0.0, 0.5, 0.0], seed=7)
    for s in samples[:3]:  # three candidates of one prompt (two run), then two prompts of their own
        s.prompt_ids = list(samples[0].prompt_ids)
    m = worker.update(samples, step=0)
    ran = [s for s in samples if s.advantage != 0.0]
    want = len(samples[0].prompt_ids) + len(samples[3].prompt_ids) + sum(len(s.response_ids) for s in ran)
    assert m["zero_advantage_skipped"] == 2.0 and m["tokens_run"] == float(want)


def test_kl_or_entropy_terms_run_zero_advantage_samples_too():
    worker = _shared(make_cfg({"algorithm": {"entropy_coef": 0.01}}))
    _, ran = _recording(worker)
    m = worker.update(make_samples("tool", [0.0, 1.0, 0.0], seed=4), step=0)
    assert m["zero_advantage_skipped"] == 0.0 and sorted(ran) == [0, 1, 2]


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("with_entropy,chunk,observed", [(True, 4, True), (False, 4, True), (False, 1000, True),
                                                         (False, 4, False), (False, 1000, False)])
def test_chunked_logprobs_equal_full_logits_values_and_gradients(temperature, threads, with_entropy, chunk, observed):
    with num_threads(threads), exact_float64():
        _chunked_logprobs_equal_full_logits(temperature, with_entropy, chunk, observed)


def _chunked_logprobs_equal_full_logits(temperature, with_entropy, chunk, observed):
    """Without entropy the target log-prob is one autograd function: with the LM head inside it
    (linear_target_logprobs) when nothing observes the head, else after it (target_logprobs);
    with entropy, autograd's own chain. All against all logits at once."""
    model, _ = tiny_model(seed=5)
    model.double().train()  # an exactness claim: float64
    batch = pack(make_samples("a", [1.0] * 4, seed=6), pad_id=0)
    seen_rows = []
    fused = logprobs_module._LinearTargetLogprob
    real_apply = fused.apply

    def counted(hidden, *rest):  # the fused function runs the head: count its rows
        seen_rows.append(hidden.shape[0])
        return real_apply(hidden, *rest)

    weights = torch.randn(batch.mask.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    weights = weights * batch.mask
    with (model.get_output_embeddings().register_forward_hook(lambda m, i, o: seen_rows.append(i[0].shape[0]))
          if observed else mock.patch.object(fused, "apply", counted)):
        lp_c, ent_c = response_logprobs(model, batch, chunk=chunk, temperature=temperature, with_entropy=with_entropy)
        ((lp_c * weights).sum() + (ent_c.sum() if with_entropy else 0)).backward()
    grads_c = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    lp_f, ent_f = full_logits_logprobs(model, batch, temperature=temperature, with_entropy=with_entropy)
    ((lp_f * weights).sum() + (ent_f.sum() if with_entropy else 0)).backward()

    if chunk < batch.num_tokens:  # the head only ever saw chunks of <= chunk rows, forward and backward recompute
        assert seen_rows and max(seen_rows) <= chunk and len(seen_rows) >= 2 * math.ceil(batch.num_tokens / chunk)
    else:  # one chunk: nothing to save by recomputing it
        assert seen_rows == [batch.num_tokens]
    # Same math, another summation order: values are vocabulary-size reductions.
    vocab = int(model.config.vocab_size)
    assert lp_c.dtype == lp_f.dtype == torch.float64
    assert_close_by_size(lp_c, lp_f, vocab)
    if with_entropy:
        assert_close_by_size(ent_c, ent_f, vocab)
    assert torch.all(lp_c[batch.mask == 0] == 0)
    for n, p in model.named_parameters():
        assert_close_by_size(grads_c[n], p.grad, _grad_terms(model, batch.num_tokens))


def _head_case(dtype, bias: bool, rows: int, vocab: int = 300, hidden: int = 24):
    g = torch.Generator().manual_seed(11)
    head = torch.nn.Linear(hidden, vocab, bias=bias).to(dtype)
    with torch.no_grad():
        head.weight.copy_(torch.randn(vocab, hidden, generator=g, dtype=dtype))
        if bias:
            head.bias.copy_(torch.randn(vocab, generator=g, dtype=dtype))
    h = torch.randn(rows, hidden, generator=g, dtype=dtype, requires_grad=True)
    targets = torch.randint(0, vocab, (rows,), generator=g)
    weights = torch.randn(rows, generator=g, dtype=torch.float64)
    return head, h, targets, weights


def _run_head(fused: bool, head, h, targets, weights, temperature: float):
    for t in (h, *head.parameters()):
        t.grad = None
    out = (linear_target_logprobs(h, head, targets, temperature) if fused
           else target_logprobs(head(h), targets, temperature))
    (out * weights.to(out.dtype)).sum().backward()
    return out.detach(), h.grad, {n: p.grad for n, p in head.named_parameters()}


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_linear_target_logprobs_equal_head_then_target(bias, temperature):
    """The LM head inside the target log-prob (rows in blocks of _ROWS in backward) against the
    head module then target_logprobs: float64 values and the hidden, weight and bias gradients."""
    rows = 2 * logprobs_module._ROWS + 5  # three blocks, the last one short
    with exact_float64():
        head, h, targets, weights = _head_case(torch.float64, bias, rows)
        want = _run_head(False, head, h, targets, weights, temperature)
        got = _run_head(True, head, h, targets, weights, temperature)
    vocab = head.out_features
    assert_close_by_size(got[0], want[0], vocab)  # per row: a vocabulary-size reduction
    assert_close_by_size(got[1], want[1], vocab)  # hidden: sums over the vocabulary
    assert set(got[2]) == set(want[2]) == ({"weight", "bias"} if bias else {"weight"})
    for name in want[2]:  # head: sums over the rows
        assert got[2][name].dtype == want[2][name].dtype
        assert_close_by_size(got[2][name], want[2][name], rows)


def test_linear_target_logprobs_under_bf16_autocast_and_its_largest_temporary():
    """As training runs it (fp32 hidden, frozen bf16 head, bf16 autocast): the same logits, so the
    same values bit for bit, and hidden gradients that differ only in their last bf16 rounding;
    and no backward temporary of more than _ROWS x vocab elements, where the unfused path makes
    [rows, vocab] ones."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.numel = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else [out]):
                if isinstance(t, torch.Tensor):
                    self.numel = max(self.numel, t.numel())
            return out

    rows = 3 * logprobs_module._ROWS
    head, h, targets, weights = _head_case(torch.float32, False, rows)
    head = head.to(torch.bfloat16).requires_grad_(False)
    results, largest = [], []
    for fused in (False, True):
        h.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = (linear_target_logprobs(h, head, targets, 0.7) if fused
                   else target_logprobs(head(h), targets, 0.7))
        watch = Largest()
        with watch:
            (out * weights.float()).sum().backward()
        results.append((out.detach(), h.grad.clone()))
        largest.append(watch.numel)
    (out_u, grad_u), (out_f, grad_f) = results
    assert out_f.dtype == out_u.dtype == torch.float32 and torch.equal(out_f, out_u)
    assert grad_f.dtype == grad_u.dtype == torch.float32
    # each side rounds its fp32 sum over the vocabulary to bf16 once (half an ulp each)
    tol = float(grad_u.abs().max()) * (torch.finfo(torch.bfloat16).eps + head.out_features * torch.finfo(torch.float32).eps)
    torch.testing.assert_close(grad_f, grad_u, rtol=0, atol=tol)
    assert largest[0] >= rows * head.out_features
    assert largest[1] <= logprobs_module._ROWS * head.out_features


@pytest.mark.parametrize("threads", THREADS)
def test_shared_prompts_equal_plain_rows_values_and_gradients(threads):
    with num_threads(threads), exact_float64():
        _shared_prompts_equal_plain_rows()


def _shared_prompts_equal_plain_rows():
    model, _ = tiny_model(seed=5)
    model.double().train()
    samples = make_samples("a", [1.0] * 6, seed=7)
    for i, s in enumerate(samples):  # K=3 candidates of two prompts of different lengths
        s.prompt_ids = list(samples[i % 2].prompt_ids) if i >= 2 else s.prompt_ids
    plain, shared = pack(samples, pad_id=0), pack(samples, pad_id=0, share=True)
    assert plain.shared is None and shared.shared is not None and shared.shared.prompt_ids.shape[0] == 2
    assert pack(make_samples("a", [1.0] * 3, seed=8), pad_id=0, share=True).shared is None  # nothing repeats
    weights = torch.randn(plain.mask.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    grads, values = [], []
    for batch in (plain, shared):
        model.zero_grad()
        lp, ent = response_logprobs(model, batch, chunk=4, temperature=0.7, with_entropy=True)
        ((lp * weights * batch.mask).sum() + ent.sum()).backward()
        values.append((lp, ent))
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    # The same tokens at the same positions over the same keys, batched and padded differently.
    seq = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    for a, b in zip(*values):
        tol = forward_tol(model.config, seq, float(a.abs().max()), torch.float64)
        torch.testing.assert_close(b, a, rtol=0, atol=tol)
    for n, g in grads[0].items():
        assert_close_by_size(grads[1][n], g, _grad_terms(model, plain.num_tokens))


@pytest.mark.parametrize("threads", THREADS)
def test_micro_batches_accumulate_to_the_full_batch_gradient(threads):
    with num_threads(threads), exact_float64():
        _micro_batches_accumulate()


def _micro_batches_accumulate():
    samples = make_samples("tool", [1.0, -0.5, 2.0, -1.0, 0.3], seed=7)
    grads = []
    for mb in (1, 5):
        for agg in ("token-mean", "seq-mean-token-mean"):
            cfg = _fp64_cfg({"trainer": {"micro_batch_size": mb, "grad_clip": 0.0},
                             "algorithm": {"loss_agg": agg}})
            worker = _shared(cfg)
            orig = worker.optimizer.step
            captured = {}

            def step_and_capture(*a, _w=worker, _c=captured, **k):
                _c.update({n: p.grad.clone() for n, p in _w.model.named_parameters()})
                return orig(*a, **k)
            worker.optimizer.step = step_and_capture
            worker.update(samples, step=0)
            grads.append((mb, agg, captured))
    by = {(mb, agg): g for mb, agg, g in grads}
    terms = _grad_terms(worker.model, sum(len(s.response_ids) for s in samples))
    for agg in ("token-mean", "seq-mean-token-mean"):
        for n in by[(1, agg)]:
            assert_close_by_size(by[(1, agg)][n], by[(5, agg)][n], terms)


def test_engine_old_logprobs_mismatch_is_logged():
    cfg = make_cfg({"algorithm": {"old_logprobs": "engine"}})
    worker = _shared(cfg)
    samples = make_samples("tool", [1.0, -1.0], seed=8)
    # Make the engine report exact for sample 0 and off by 0.25 on one token of sample 1.
    rows = worker.logprobs(samples)
    samples[0].logprobs = list(rows[0])
    samples[1].logprobs = list(rows[1])
    samples[1].logprobs[0] += 0.25
    m = worker.update(samples, step=0)
    assert m["old_logprob_mismatch_max"] == pytest.approx(0.25, abs=1e-5)
    n_tok = sum(len(s.response_ids) for s in samples)
    assert m["old_logprob_mismatch_mean"] == pytest.approx(0.25 / n_tok, abs=1e-5)
    bad = make_samples("tool", [1.0], seed=9)
    bad[0].logprobs = bad[0].logprobs[:-1]
    with pytest.raises(ValueError, match="engine logprobs"):
        worker.update(bad, step=1)


@pytest.mark.parametrize("lora", [False, True])
def test_kl_and_entropy_terms(lora):
    cfg = make_cfg({"algorithm": {"kl_coef": 0.1, "entropy_coef": 0.01, "ppo_epochs": 2, "mini_batches": 2}},
                   lora=lora)
    worker = _shared(cfg)
    assert (worker.ref_model is not None) == (not lora)  # full FT: frozen copy only when kl_coef > 0
    samples = make_samples("tool", [1.0, -1.0, 0.5, -0.5], seed=10)
    m0 = worker.update(samples, step=0)
    assert m0["optimizer_steps"] == 4
    assert m0["entropy"] > 0 and m0["kl"] >= 0
    m1 = worker.update(samples, step=1)
    assert m1["kl"] > 0  # the policy moved away from its reference
    assert _shared(make_cfg()).ref_model is None


def test_same_seed_same_update():
    samples = make_samples("tool", [1.0, -1.0, 0.5], seed=11)
    states = []
    for _ in range(2):
        worker = _shared(make_cfg({"algorithm": {"mini_batches": 2}}, lora=True))
        worker.update(samples, step=0)
        states.append(worker.trainable_state())
    assert all_equal(states[0], states[1])


def test_lr_schedule_warmup_then_cosine():
    f = lr_lambda(warmup_steps=2, total_steps=6, min_lr_ratio=0.1, schedule="cosine")
    assert [f(0), f(1)] == [0.5, 1.0]
    assert f(2) == pytest.approx(1.0) and f(6) == pytest.approx(0.1) and f(50) == pytest.approx(0.1)
    assert 0.1 < f(4) < 1.0
    assert lr_lambda(0, 5, 0.1, "constant")(3) == 1.0
    with pytest.raises(ValueError):
        lr_lambda(0, 5, 0.1, "linear")


@pytest.mark.parametrize("lora", [False, True])
def test_save_load_round_trips_weights_optimizer_scheduler(tmp_path, lora):
    cfg = make_cfg({"trainer": {"warmup_steps": 1, "weight_decay": 0.01}}, lora=lora)
    samples = make_samples("tool", [1.0, -1.0, 0.5], seed=12)
    a = _shared(cfg)
    for step in (0, 1):
        a.update(samples, step)
    a.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / ("adapter/adapter_config.json" if lora else "model/config.json")).exists()
    b = _shared(cfg)
    assert not all_equal(a.trainable_state(), b.trainable_state())
    b.load(tmp_path / "ckpt")
    assert all_equal(a.trainable_state(), b.trainable_state())
    assert b.scheduler.state_dict() == a.scheduler.state_dict() and b.updates == 2
    sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    for k in sa["state"]:
        for field in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(sa["state"][k][field], sb["state"][k][field])
    # The next update continues identically from the reloaded state.
    a.update(samples, 2)
    b.update(samples, 2)
    assert all_equal(a.trainable_state(), b.trainable_state())
    with pytest.raises(FileNotFoundError):
        b.load(tmp_path / "nothing-here")


def test_full_ft_generation_weights_are_master_in_generation_dtype():
    worker = _shared(make_cfg(dtype="bfloat16"))
    assert all(p.dtype == torch.float32 for p in worker.model.parameters())  # fp32 master
    worker.update(make_samples("tool", [1.0, -1.0], seed=13), 0)
    weights = worker.generation_weights()
    master = dict(worker.model.named_parameters())
    for name, w in weights.items():
        assert w.dtype == torch.bfloat16
        if name in master:
            assert torch.equal(w, master[name].detach().to(torch.bfloat16))


def test_lora_under_autocast_skips_peft_input_casts_and_trains_bit_identically():
    """bf16 base + fp32 adapters under autocast: the adapters take their input as is (peft's cast
    to fp32 and autocast's back to bf16 are an exact round trip), with the same logprobs and the
    same updated adapter as with the casts, bit for bit."""
    results = []
    for casts in (True, False):
        worker = build_policy_set(make_cfg(lora=True, dtype="bfloat16"), ["solo"]).workers["shared"]
        flags = [m for m in worker.model.modules() if hasattr(m, "cast_input_dtype_enabled")]
        assert flags and not any(m.cast_input_dtype_enabled for m in flags)
        for m in flags:
            m.cast_input_dtype_enabled = casts
        samples = make_samples("solo", [1.0, -1.0, 0.5], seed=3)
        logprobs = worker.logprobs(samples)
        worker.update(samples, 0)
        results.append((logprobs, {k: v.clone() for k, v in worker.trainable_state().items()}))
    assert results[0][0] == results[1][0]
    assert all_equal(results[0][1], results[1][1])
    fp32 = build_policy_set(make_cfg(lora=True), ["solo"]).workers["shared"]  # no autocast: peft's default
    assert all(m.cast_input_dtype_enabled for m in fp32.model.modules() if hasattr(m, "cast_input_dtype_enabled"))
