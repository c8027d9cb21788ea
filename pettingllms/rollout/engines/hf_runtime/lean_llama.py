"""A lean forward pass for Llama-architecture models, used by the HF engine's prefill and decode.

At the batch sizes of evaluation, the demo and multi-agent turns (1-16 rows), a decode step of a
small model is mostly per-op framework work and weight streaming, not arithmetic. transformers'
modules add their own per-step work around the same ops (mask building, rotary tables, cache
objects, keyword plumbing), and run q/k/v and gate/up as separate GEMMs, each streaming its
weight on its own. This forward runs the same ops on the model's own weights with

* q/k/v and gate/up concatenated into one GEMM each (the weights read in one pass), pre-packed
  for bf16 on CPU: into our GEMM kernel's layout where the CPU has AVX512-BF16 (`cpu_kernels`,
  faster than oneDNN at decode sizes) or else AVX2 + FMA (`avx2_kernels`: fp32 sums over the
  bf16 weights, where oneDNN's bf16 GEMM is slow), else into oneDNN's (`linear.pack_weight`, for
  `pack_linears`' reason);
* a float32 model on a CPU without bf16 arithmetic whose weights are all bf16 values (a bf16
  checkpoint loaded as float32, as `model.dtype=auto` loads it there): its GEMM weights held in
  bf16 for the AVX2 GEMM (half the bytes a decode step streams; products and sums in fp32) and the
  other decode ops in fp32 C++ (`avx2_kernels`' fp32 set; a decode step's layers in one call). Decided once, when the forward is made: after
  a weight update the engine samples from the policy's weights rounded to bf16, as a bf16 engine
  does (the trainer computes its own log-probs); `rollout.engine_options.cpu_kernels=false` keeps
  every product in fp32;
* with the kernels, SwiGLU in one call, and every decode step's attention and RMSNorms in one
  call each;
* rotary embedding applied to the queries and keys in one go;
* attention through `pettingllms.utils.attention.attend`, the rule every model we load uses
  (its small-attention path in fp32 is what the decode-attention kernel computes too);

It computes what the transformers forward computes, op by op in the same dtype (the tests hold it
to the transformers forward; with oneDNN's GEMM and the matmul attention its bf16 CPU decode is
bit-identical on our boxes; the C++ kernels can differ in the last bit: sums in another order). It
writes keys and values into the engine's KV cache layers, so it can take over from a transformers
prefill or hand over to one. Models it does not cover (other architectures, rotary types that
change with the length, sliding windows, biases on the MLP) keep the transformers path:
`LeanLlama.supports` says which.

The fused and packed weights are copies, rebuilt after any weight changes in place (the engine's
weight sync): every forward compares the version counters of the weights it copied.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from pettingllms.rollout.engines.hf_runtime import avx2_kernels, cpu_kernels
from pettingllms.rollout.engines.hf_runtime.kv_cache import BufferedLayer
from pettingllms.rollout.engines.hf_runtime.linear import mkldnn_bf16, pack_weight, packed_linear
from pettingllms.utils.attention import attend

_MODEL_TYPES = ("llama", "qwen2")
_ROPE_TYPES = ("default", "linear", "llama3")  # inv_freq fixed at load time


def _rope_type(config: Any) -> str:
    rope = getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None) or {}
    return str(rope.get("rope_type", rope.get("type", "default"))) if isinstance(rope, dict) else "default"


class _Linear:
    """y = x W^T + b for one or several weights stacked on the output dimension: one GEMM over a
    fused, packed copy, our bf16 kernel's (`cpu_kernels.gemm`) where it runs, else oneDNN's."""

    def __init__(self, weights: list[torch.Tensor], biases: list[torch.Tensor | None], kernel: Any = None,
                 hold_bf16: bool = False):
        """`hold_bf16`: float32 weights packed for `kernel` (the AVX2 GEMM) rounded to bf16."""
        self.sources = [t.detach() for t in weights]
        present = [b.detach() for b in biases if b is not None]
        self.bias = torch.cat(present) if present else None
        packable = [t.to(torch.bfloat16) for t in self.sources] if hold_bf16 else self.sources
        self.kernel = kernel if kernel is not None and cpu_kernels.takes(packable) else None
        self.held = hold_bf16 and self.kernel is not None
        self.columns = sum(t.shape[0] for t in self.sources)
        if self.kernel is not None:  # the kernel's packed copy instead of oneDNN's (one copy in memory)
            self.pairs = self.kernel.pack_pairs(packable)
            self.kernel_bias = self.bias.float() if self.bias is not None else torch.empty(0)  # fp32, as it adds
            self.packed, self.weight = False, None
            return
        w = torch.cat(self.sources) if len(weights) > 1 else self.sources[0]
        self.packed = w.dtype == torch.bfloat16 and w.device.type == "cpu" and mkldnn_bf16()
        self.weight = pack_weight(w) if self.packed else w.contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel is not None:
            # cpu_kernels.gemm without its checks (per token, per layer): the shapes hold here
            rows = x.reshape(-1, x.shape[-1]).contiguous()
            out = self.kernel.gemm_packed(rows, self.pairs, self.columns, self.kernel_bias)
            return out.reshape(*x.shape[:-1], self.columns)
        return packed_linear(x, self.weight, self.bias) if self.packed else F.linear(x, self.weight, self.bias)

    def exact(self, x: torch.Tensor) -> torch.Tensor:
        """A prefill's product where the weights are held in bf16: torch's fp32 GEMM on the model's own
        fp32 weights (MKL outruns the AVX2 kernel at hundreds of rows; no copy is kept for it)."""
        if not self.held:
            return self(x)
        outs, at = [], 0
        for w in self.sources:
            bias = self.bias[at:at + w.shape[0]] if self.bias is not None else None
            outs.append(F.linear(x, w, bias))
            at += w.shape[0]
        return torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]


class _F32Ops:
    """The AVX2 set's fp32 decode ops under the names of `cpu_kernels`' bf16 ones (the forward calls
    either through one name)."""

    def __init__(self, module: Any):
        self.rope_decode = module.rope_decode_f32 if module is not None else None
        self.decode_attention = module.decode_attention_f32 if module is not None else None


class LeanLlama:
    """`forward(ids, mask, positions, cache)` -> the last position's logits, as the engine's
    transformers forward returns them."""

    @staticmethod
    def supports(model: Any) -> bool:
        config = getattr(model, "config", None)
        if config is None or getattr(config, "model_type", None) not in _MODEL_TYPES:
            return False
        return (getattr(config, "hidden_act", "silu") == "silu"
                and not getattr(config, "mlp_bias", False)
                and getattr(config, "pretraining_tp", 1) == 1
                and not (getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None))
                and _rope_type(config) in _ROPE_TYPES
                and hasattr(getattr(model, "model", None), "rotary_emb"))

    def __init__(self, model: Any, kernels: bool = True):
        """`kernels`: the C++ kernels where they run (`cpu_kernels.load`): every product and
        SwiGLU, and a decode step's norms, rotary embedding with its cache write, and attention."""
        if not self.supports(model):
            raise ValueError(f"LeanLlama does not cover {type(model).__name__} with this config")
        config = model.config
        self.model = model
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = float(config.rms_norm_eps)
        self._watched = [p for p in model.parameters()] + [model.model.rotary_emb.inv_freq]
        self._key: tuple | None = None
        w = model.model.embed_tokens.weight
        bf16_cpu = w.dtype == torch.bfloat16 and w.device.type == "cpu"
        self.kernel = cpu_kernels.load() if kernels and bf16_cpu else None  # built (or loaded) only where it runs
        # the products' kernel: the AVX512-BF16 set's GEMM, else the AVX2 one (the rest stays torch's)
        self.gemm = self.kernel if self.kernel is not None or not (kernels and bf16_cpu) else avx2_kernels.load()
        # a float32 model with its GEMM weights held in bf16: the AVX2 set's GEMM and fp32 decode ops
        self.f32 = avx2_kernels.load() if kernels and avx2_kernels.holds_bf16(model) else None
        if self.f32 is not None:
            self.gemm = self.f32
        self.ops = self.kernel if self.kernel is not None else _F32Ops(self.f32)  # the decode ops, by name
        self.attention_ok = (cpu_kernels.attention_takes(self.head_dim) if self.kernel is not None
                             else avx2_kernels.attention_takes(self.head_dim))  # the decode-attention kernel's sizes
        self._no_mask = torch.empty(0, dtype=torch.bool)

    def _build(self) -> None:
        m, k, held = self.model, self.gemm, self.f32 is not None
        self.layers, self.head = [], None  # the old copies go before the new ones are made
        for layer in m.model.layers:
            a, mlp = layer.self_attn, layer.mlp
            projections = (a.q_proj, a.k_proj, a.v_proj)
            self.layers.append((
                layer.input_layernorm.weight,
                _Linear([p.weight for p in projections], [p.bias for p in projections], k, held),
                _Linear([a.o_proj.weight], [a.o_proj.bias], k, held),
                layer.post_attention_layernorm.weight,
                _Linear([mlp.gate_proj.weight, mlp.up_proj.weight], [None], k, held),
                _Linear([mlp.down_proj.weight], [None], k, held),
                float(a.scaling)))
        self.intermediate = m.model.layers[0].mlp.gate_proj.weight.shape[0]
        self.norm = m.model.norm.weight
        self.embed = m.model.embed_tokens.weight
        self.head = _Linear([m.lm_head.weight], [getattr(m.lm_head, "bias", None)], k, held)
        # a decode step's layers in one call (the fp32 set's decode_layers_f32): its arguments, made once
        self.step_args = None
        if held and self.attention_ok and all(layer[j].held for layer in self.layers for j in (1, 2, 4, 5)):
            tensors, widths = [], []
            for norm1, qkv, out, norm2, gate_up, down, _ in self.layers:
                tensors += [norm1, qkv.pairs, qkv.kernel_bias, out.pairs, out.kernel_bias, norm2, gate_up.pairs,
                            gate_up.kernel_bias, down.pairs, down.kernel_bias]
                widths += [qkv.columns, out.columns, gate_up.columns, down.columns]
            self.step_args = (tensors, widths, [layer[6] for layer in self.layers])
        self.inv_freq = m.model.rotary_emb.inv_freq.float()
        self.rope_scale = float(m.model.rotary_emb.attention_scaling)

    def release(self) -> None:
        """Drop the fused, packed copies (a third of the engine's memory) while the engine is idle;
        the next forward rebuilds them, as it does after every weight sync anyway."""
        self.layers, self.head, self._key = [], None, None

    def _refresh(self) -> None:
        key = tuple(p._version for p in self._watched) + tuple(p.data_ptr() for p in self._watched[:1])
        if key != self._key:
            self._build()
            self._key = key

    def _swiglu(self, y: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up of the fused gate/up output: one kernel call where the kernels run."""
        if self.kernel is not None and y.dtype == torch.bfloat16:
            return self.kernel.silu_mul(y.reshape(-1, y.shape[-1])).view(*y.shape[:-1], self.intermediate)
        if self.f32 is not None and y.dtype == torch.float32:
            return self.f32.silu_mul_f32(y.reshape(-1, y.shape[-1])).view(*y.shape[:-1], self.intermediate)
        return F.silu(y[..., :self.intermediate]) * y[..., self.intermediate:]

    def _rms_kernel(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """`_rms` in one kernel call (decode steps): cpu_kernels.rms_norm for bf16, the AVX2 set's
        rms_norm_f32 for fp32, unchecked."""
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        if weight.dtype == torch.bfloat16 and self.kernel is not None:
            return self.kernel.rms_norm(rows, weight, self.eps).view(x.shape)
        if weight.dtype == torch.float32 and x.dtype == torch.float32 and self.f32 is not None:
            return self.f32.rms_norm_f32(rows, weight, self.eps).view(x.shape)
        return self._rms(x, weight)

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        xf = x.to(torch.promote_types(x.dtype, torch.float32))  # transformers' fp32 upcast
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * xf.to(x.dtype)

    @staticmethod
    def _mask(mask: torch.Tensor | None, length: int) -> torch.Tensor | None:
        """[B, 1, L, K] boolean (key allowed), or None: no padding (causal from the shapes)."""
        if mask is None or bool(mask.all()):
            return None
        keys = mask.bool()[:, None, None, :]
        if length == 1:
            return keys
        causal = torch.ones(length, mask.shape[1], dtype=torch.bool, device=mask.device).tril(mask.shape[1] - length)
        allowed = keys & causal
        # A padding query sees no key: let it see all, so the kernel stays finite (its output is unused).
        return allowed | ~allowed.any(-1, keepdim=True)

    def _decode_layers(self, x: torch.Tensor, cache: Any, cos: torch.Tensor, sin: torch.Tensor,
                       key_mask: torch.Tensor) -> torch.Tensor:
        """Every layer of a decode step in one C++ call (held bf16 weights, fp32 ops): each cache layer
        makes room for this step's column first, as the per-layer loop does."""
        kbufs, vbufs, cols = [], [], set()
        for layer in cache.layers:
            kbuf, vbuf, col = layer.append_column()
            kbufs.append(kbuf)
            vbufs.append(vbuf)
            cols.add(col)
        if len(cols) != 1:
            raise RuntimeError(f"cache layers hold different lengths {sorted(cols)}")
        tensors, widths, scales = self.step_args
        return self.f32.decode_layers_f32(x, tensors, widths, scales, kbufs, vbufs, cols.pop(), cos, sin, key_mask,
                                          self.heads, self.kv_heads, self.eps)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        self._refresh()
        b, length = ids.shape
        heads, kv_heads, d = self.heads, self.kv_heads, self.head_dim
        x = F.embedding(ids, self.embed)
        freqs = positions[:, :, None].float() * self.inv_freq  # [B, L, D/2], as transformers' outer product
        angles = torch.cat((freqs, freqs), dim=-1)
        cos = (angles.cos() * self.rope_scale).to(x.dtype)[:, :, None, :]
        sin = (angles.sin() * self.rope_scale).to(x.dtype)[:, :, None, :]
        attn_mask = self._mask(mask, length)
        causal = length > 1 and attn_mask is None
        # A decode step's attention and norms in one kernel call each (cpu_kernels); the
        # attention's key mask is [B, L] bool, or empty for "attend to all".
        fused = length == 1 and ((self.kernel is not None and x.dtype == torch.bfloat16)
                                 or (self.f32 is not None and x.dtype == torch.float32))
        fused_attention = fused and self.attention_ok
        ops = self.ops
        # held bf16 weights: a prefill's products in fp32 on the model's weights (the phase, not the
        # row count, picks the path, so a row's numbers do not depend on what shares its batch)
        product = _Linear.exact if length > 1 and self.f32 is not None else _Linear.__call__
        key_mask = attn_mask[:, 0, 0].contiguous() if fused_attention and attn_mask is not None else self._no_mask
        rms = self._rms_kernel if fused else self._rms
        if fused_attention:
            cos_rows, sin_rows = cos.view(b, d), sin.view(b, d)
        half, rotated = d // 2, (heads + kv_heads) * d
        if fused_attention and self.step_args is not None and all(
                isinstance(layer, BufferedLayer) and layer.is_initialized for layer in cache.layers):
            x = self._decode_layers(x.view(b, -1), cache, cos_rows, sin_rows, key_mask).view(b, 1, -1)
            return self.head(rms(x, self.norm))[:, -1].float()
        for i, (norm1, qkv, out, norm2, gate_up, down, scaling) in enumerate(self.layers):
            y = product(qkv, rms(x, norm1))
            layer = cache.layers[i]
            if fused_attention and isinstance(layer, BufferedLayer) and layer.is_initialized:
                # rotary embedding and cache write in one call, then the attention in one: the
                # kernels unchecked (per layer), the shapes hold here
                kbuf, vbuf, col = layer.append_column()
                q = ops.rope_decode(y.view(b, -1), cos_rows, sin_rows, heads, kv_heads, kbuf, vbuf, col)
                a = ops.decode_attention(q, layer.keys, layer.values, key_mask, scaling)
            else:
                qk = y[..., :rotated].view(b, length, heads + kv_heads, d)
                qk = qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin
                q = qk[:, :, :heads].transpose(1, 2)
                k = qk[:, :, heads:].transpose(1, 2)
                v = y[..., rotated:].view(b, length, kv_heads, d).transpose(1, 2)
                k, v = layer.update(k, v)
                if fused_attention:  # skipping cpu_kernels.decode_attention's checks (per layer): the shapes hold here
                    a = ops.decode_attention(qk[:, 0, :heads], k, v, key_mask, scaling)
                else:
                    a = attend(q, k, v, attn_mask, scaling, causal)
            x = x + product(out, a.reshape(b, length, heads * d))
            y = product(gate_up, rms(x, norm2))
            x = x + product(down, self._swiglu(y))
        return self.head(rms(x[:, -1:], self.norm))[:, -1].float()
