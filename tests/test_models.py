"""Model path resolution, the cache, the tiny and embedded models, and seeding helpers."""
from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from pettingllms.utils import models
from pettingllms.utils.models import (ModelNotFoundError, load_causal_lm, load_tokenizer, resolve_model_path,
                                      tiny_model, torch_dtype)
from pettingllms.utils.seeding import capture_rng_state, derive_seed, restore_rng_state, set_seed


def test_tiny_path_resolves_to_a_cached_llama_with_the_embedded_tokenizer() -> None:
    path = resolve_model_path("tiny:test")
    assert resolve_model_path("tiny:test") == path and Path(path, "config.json").is_file()
    model = load_causal_lm("tiny:test", "float32")
    tok = load_tokenizer("tiny:test")
    cfg = model.config
    assert cfg.head_dim >= 32 and cfg.num_hidden_layers == 2 and cfg.vocab_size == len(tok)
    assert getattr(cfg, "quantization_config", None) is None
    assert tok.padding_side == "left" and tok.pad_token is not None and tok.chat_template
    assert tok.eos_token == "<|im_end|>"
    assert models.eos_token_ids(model, tok) == [tok.convert_tokens_to_ids("<|im_end|>")]
    assert torch_dtype("bf16") is torch.bfloat16 and load_causal_lm("tiny:test", "bfloat16").dtype == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        torch_dtype("float8")


def test_tiny_models_are_deterministic_per_seed_and_keep_global_rng() -> None:
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a, tok = tiny_model(seed=0)
    assert torch.equal(torch.rand(3), expected_next)  # building did not consume the caller's RNG
    b, _ = tiny_model(seed=0)
    c, _ = tiny_model(seed=1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.layers.0.mlp.up_proj.weight"], sc["model.layers.0.mlp.up_proj.weight"])
    assert a.dtype == torch.float32 and not a.training and a.config.vocab_size == len(tok)
    # different tiny: names give different weights, the same name the same ones
    w = lambda p: load_causal_lm(p, "float32").state_dict()["model.embed_tokens.weight"]
    assert not torch.equal(w("tiny:test"), w("tiny:other"))


def test_local_folders_pass_through_and_bad_paths_fail_clearly(tmp_path: Path) -> None:
    folder = resolve_model_path("tiny:test")
    assert resolve_model_path(folder) == folder
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model_path(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model_path(str(tmp_path / "empty"))
    with pytest.raises(ModelNotFoundError, match="unknown embedded model"):
        resolve_model_path("embedded:gpt-17")
    with pytest.raises(ModelNotFoundError, match="unknown model scheme"):
        resolve_model_path("s3:bucket")


def test_hub_ids_offline_give_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty local HF cache
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    with pytest.raises(ModelNotFoundError, match="offline"):
        resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct")


def test_cache_builds_once_under_concurrency_and_leaves_no_partial_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PETTINGLLMS_CACHE", str(tmp_path))
    calls = []

    def build(out: Path) -> None:
        calls.append(out)
        time.sleep(0.3)  # long enough for the second caller to arrive while this one builds
        (out / "config.json").write_text("{}")

    results = []
    threads = [threading.Thread(target=lambda: results.append(models._cached_folder("demo", build)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and results[0] == results[1] == tmp_path / "models" / "demo"
    assert (results[0] / "config.json").is_file()

    def broken(out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        models._cached_folder("broken", broken)
    leftovers = [p.name for p in (tmp_path / "models").iterdir() if not p.name.endswith(".lock")]
    assert sorted(leftovers) == ["demo"]  # neither a final nor a temporary folder of the failed build


def test_set_seed_and_rng_state_round_trip(tmp_path: Path) -> None:
    set_seed(5)
    first = (random.random(), np.random.rand(), torch.rand(2))
    set_seed(5)
    assert (random.random(), np.random.rand()) == first[:2] and torch.equal(torch.rand(2), first[2])

    state = capture_rng_state()
    torch.save(state, tmp_path / "rng.pt")
    expected = (random.random(), np.random.rand(), torch.rand(2))
    set_seed(99)
    restore_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    got = (random.random(), np.random.rand(), torch.rand(2))
    assert got[:2] == expected[:2] and torch.equal(got[2], expected[2])

    assert derive_seed("a", 1) == derive_seed("a", 1) != derive_seed("a", 2)
    assert 0 <= derive_seed(None, 0) < 2**63


@pytest.mark.slow
def test_embedded_model_is_a_plain_bf16_smollm2() -> None:
    path = resolve_model_path("embedded:smollm2-135m-instruct")
    model = load_causal_lm(path, "bfloat16")
    tok = load_tokenizer(path)
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype == torch.bfloat16
    assert getattr(model.config, "quantization_config", None) is None
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == len(tok) == 49152
    assert tok.eos_token == "<|im_end|>" and models.eos_token_ids(model, tok) == [2]
    size = sum(f.stat().st_size for f in Path(path).iterdir())
    assert 250e6 < size < 300e6  # bf16 weights, about 270 MB
