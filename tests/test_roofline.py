"""The roofline arithmetic of scripts/bench/bench_engine.py --roofline (pettingllms/utils/roofline.py)
and the dtype scripts/bench/vs_trl.py gives both sides. Arithmetic and wiring only, not speed."""
from __future__ import annotations

import json

import pytest
import torch

from pettingllms.utils.roofline import BF16_BYTES, ModelShape, Roofline, ceiling, gemm_rate, read_bandwidth
from script_helpers import load_script

EMBEDDED = ModelShape(params=134_515_008, hidden=576, intermediate=1536)  # smollm2-135m, tied embeddings


def test_ceiling_is_memory_bound_at_batch_1_and_compute_bound_at_16():
    """Issue 29's Zen 2 box: 19 GB/s, fp32 GEMMs at 67 GFLOP/s; 270 MB of bf16 weights."""
    weights = EMBEDDED.params * BF16_BYTES
    tok_s, bound = ceiling(1, EMBEDDED.params, weights, 19e9, None)
    assert bound == "memory" and tok_s == pytest.approx(19e9 / weights) and 70 < tok_s < 71
    tok_s, bound = ceiling(16, EMBEDDED.params, weights, 19e9, 67e9)
    assert bound == "compute" and tok_s == pytest.approx(67e9 / (2 * EMBEDDED.params)) and 249 < tok_s < 250
    # a fast GEMM with little bandwidth: the weights' reads bound even a batch
    assert ceiling(8, EMBEDDED.params, weights, 1e9, 1e13) == (pytest.approx(8e9 / weights), "memory")


def test_roofline_takes_the_faster_dtype_and_no_gemm_rate_below_8_rows():
    roof = Roofline(EMBEDDED, 19e9, {"float32": {16: 67e9, 256: 101e9}, "bfloat16": {16: 11e9, 256: 11e9}})
    assert roof.best_gemm(16) == (67e9, "float32") and roof.best_gemm(1) is None
    assert roof.tok_s(1) == (pytest.approx(19e9 / (EMBEDDED.params * 2)), "memory")
    assert roof.tok_s(16)[0] == pytest.approx(67e9 / (2 * EMBEDDED.params))
    with pytest.raises(ValueError, match="batch 32: no GEMM rate measured"):
        roof.tok_s(32)
    roof.gemm["bfloat16"][16] = 148e9  # a bf16 box: bf16 is the ceiling there
    assert roof.best_gemm(16) == (148e9, "bfloat16")
    assert json.loads(json.dumps(roof.as_dict()))["gemm_gflops"]["float32"]["256"] == 101.0
    # a whole call: 100 prompt tokens at the 256-row rate, then 64 tokens at batch 1's ceiling
    prefill_s = 100 * 2 * EMBEDDED.params / 101e9
    assert roof.call_tok_s(1, 64, 100) == pytest.approx(64 / (prefill_s + 64 / roof.tok_s(1)[0]))
    assert roof.call_tok_s(16, 900, 0) == pytest.approx(roof.tok_s(16)[0])


def test_measurements_are_rates_and_the_shape_is_read_from_the_folder():
    from pettingllms.utils.models import load_causal_lm, resolve_model_path

    for rate in (read_bandwidth(mib=4, repeats=2), gemm_rate(8, 32, 64, torch.float32, seconds=0.03)):
        assert 0 < rate < float("inf")  # bytes/s and FLOP/s; how fast is the bench's business
    shape = ModelShape.of_folder(resolve_model_path("tiny:test"))
    model = load_causal_lm("tiny:test", "float32")
    assert shape.params == sum(p.numel() for p in model.parameters())  # tied weights once
    assert (shape.hidden, shape.intermediate) == (model.config.hidden_size, model.config.intermediate_size)


def test_bench_engine_prints_fractions_of_the_roofline(capsys):
    bench = load_script("scripts/bench/bench_engine.py")
    out = bench.main(["--model", "tiny:test", "--engines", "hf", "--batches", "1", "8", "--new-tokens", "2",
                      "--repeats", "1", "--threads", "1", "--dtype", "float32", "--roofline", "--roofline-mib", "4"])
    text = capsys.readouterr().out
    assert "read bandwidth" in text and "roofline fractions" in text
    one, eight = out["rows"]
    assert one["roofline_bound"] == "memory"
    assert out["roofline"]["gemm_gflops"]["float32"].keys() == {"8", "256"}
    for row in (one, eight):
        assert row["hf"]["of_roofline"] == pytest.approx(row["hf"]["tok_s"] / row["roofline_tok_s"], abs=2e-3)
        assert row["prompt_tokens"] > 10 * row["batch"] and row["hf"]["of_call_roofline"] > row["hf"]["of_roofline"]
        assert f"batch {row['batch']}: ceiling {row['roofline_tok_s']} tok/s" in text


@pytest.mark.parametrize("no_bf16,want", [("1", "float32"), ("0", None)], ids=["avx2", "this_cpu"])
def test_vs_trl_gives_both_sides_the_boxs_dtype(monkeypatch, no_bf16, want):
    from pettingllms.utils.precision import choose_dtype

    monkeypatch.setenv("PETTINGLLMS_NO_CPU_BF16", no_bf16)
    vs = load_script("scripts/bench/vs_trl.py")
    want = want or choose_dtype("cpu")[0]
    args = vs.parse(["--threads", "1"])
    assert vs.side_dtype(args)[0] == want
    assert f"dtypes: both sides load the model in {want} (" in "\n".join(vs.plan(args, 1))
    assert "model.dtype=auto" in vs.overrides(args, "m", 1, "/tmp")
    assert vs.side_dtype(vs.parse(["--dtype", "bfloat16"])) == ("bfloat16", "--dtype given")
