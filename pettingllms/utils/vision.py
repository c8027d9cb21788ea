"""Vision-language models: loading, the tiny offline Qwen2.5-VL, and prompt encoding.

A model is a VLM when its config has a `vision_config` (Qwen2-VL, Qwen2.5-VL and other HF
`AutoModelForImageTextToText` models whose processor follows the same chat-template contract:
an image part becomes the processor's image placeholder tokens). The processor is loaded with
the model; the prompt's token ids (image placeholders included) are what the engine saw and what
training runs on.

`tiny:vl` (built in `utils/tiny_vl.py`) is a tiny random Qwen2.5-VL whose folder loads here like a
real one.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch



def is_vision_config(config: Any) -> bool:
    return getattr(config, "vision_config", None) is not None


def is_vision_folder(path: str) -> bool:
    try:
        return "vision_config" in json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------- images in messages

def image_hash(image: Any) -> str:
    """A content hash of a PIL image (mode, size and pixels): equal pictures, equal hashes."""
    h = hashlib.sha256(f"{image.mode}:{image.size[0]}x{image.size[1]}:".encode())
    h.update(image.tobytes())
    return h.hexdigest()[:32]


def message_images(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The PIL images of a chat, in prompt order (numpy arrays become PIL images)."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping) and part.get("type") == "image":
                    out.append(as_pil(part.get("image")))
    return out


def as_pil(image: Any) -> Any:
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB") if image.mode != "RGB" else image
    if hasattr(image, "__array__"):
        import numpy as np
        return Image.fromarray(np.asarray(image).astype("uint8")).convert("RGB")
    raise ValueError(f"an image part holds {type(image).__name__}, not a PIL image or an array")


def openai_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The chat in OpenAI's wire format: image parts become PNG data URLs (`image_url` parts)."""
    import base64
    import io

    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if isinstance(part, Mapping) and part.get("type") == "image":
                    buf = io.BytesIO()
                    as_pil(part.get("image")).save(buf, format="PNG")
                    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
                    parts.append({"type": "image_url", "image_url": {"url": url}})
                else:
                    parts.append(dict(part))
            content = parts
        out.append({**dict(m), "content": content})
    return out


# ---------------------------------------------------------------- loading

@dataclass
class VisionProcessor:
    """What a Qwen2-VL-style processor does for a chat, without its video half (which needs
    torchvision): the chat template puts one image token per image part, and each is expanded to
    the image's placeholder count (grid cells / merge_size^2), as `Qwen2_5_VLProcessor` does."""
    tokenizer: Any
    image_processor: Any
    image_token: str = "<|image_pad|>"

    @property
    def merge_size(self) -> int:
        return int(getattr(self.image_processor, "merge_size", 2))

    def pixel_inputs(self, images: Sequence[Any]) -> dict[str, torch.Tensor]:
        """pixel_values / image_grid_thw of images, in order."""
        if not images:
            return {}
        enc = self.image_processor(images=[as_pil(i) for i in images], return_tensors="pt")
        return {"pixel_values": enc["pixel_values"], "image_grid_thw": enc["image_grid_thw"]}

    def encode(self, messages: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[Any], dict[str, torch.Tensor]]:
        images = message_images(messages)
        text = self.tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=False,
                                                  add_generation_prompt=True)
        if text.count(self.image_token) != len(images):
            raise ValueError(f"the chat template wrote {text.count(self.image_token)} image tokens for "
                             f"{len(images)} image parts")
        pixels = self.pixel_inputs(images)
        pieces = text.split(self.image_token)
        counts = (pixels["image_grid_thw"].prod(-1) // self.merge_size ** 2).tolist() if images else []
        text = pieces[0] + "".join(self.image_token * int(n) + rest for n, rest in zip(counts, pieces[1:]))
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]), images, pixels


def load_processor(path: str) -> VisionProcessor:
    """The model's tokenizer (left-padded, with a pad token) and image processor."""
    from pettingllms.utils.models import load_tokenizer, resolve_model_path

    local = resolve_model_path(path)
    tok = load_tokenizer(local)
    if not getattr(tok, "chat_template", None):
        for name in ("chat_template.jinja", "chat_template.json"):
            f = Path(local) / name
            if f.is_file():
                raw = f.read_text()
                tok.chat_template = json.loads(raw)["chat_template"] if name.endswith("json") else raw
                break
    return VisionProcessor(tok, _image_processor(local), getattr(tok, "image_token", None) or "<|image_pad|>")


def _image_processor(folder: str) -> Any:
    """The folder's image processor class by name, its PIL variant first: transformers' torchvision
    variants (and AutoImageProcessor itself, 5.10) refuse to load without torchvision, which the
    CPU stack here does not install."""
    import transformers

    try:
        name = json.loads((Path(folder) / "preprocessor_config.json").read_text())["image_processor_type"]
    except (OSError, ValueError, KeyError):
        raise ValueError(f"{folder} has no preprocessor_config.json with an image_processor_type") from None
    base = name.removesuffix("Fast")
    for candidate in (base + "Pil", base):
        cls = getattr(transformers, candidate, None)
        if cls is not None and not getattr(cls, "is_dummy", False):
            return cls.from_pretrained(folder)
    raise ValueError(f"transformers {transformers.__version__} has no usable image processor {name!r}")


def load_vision_lm(path: str, dtype: Any, device: Any = "cpu") -> Any:
    from transformers import AutoModelForImageTextToText

    from pettingllms.utils.models import resolve_model_path, torch_dtype

    model = AutoModelForImageTextToText.from_pretrained(resolve_model_path(path), dtype=torch_dtype(dtype))
    return model.to(device).eval()


# ---------------------------------------------------------------- prompts and positions

def encode_prompt(processor: VisionProcessor, messages: Sequence[Mapping[str, Any]], max_prompt_tokens: int,
                  request_id: str = "") -> tuple[list[int], list[Any], dict[str, torch.Tensor]]:
    """(prompt ids, images, pixel inputs) of a chat with image parts. A prompt longer than
    `max_prompt_tokens` cannot be cut through its image placeholders: it is an error."""
    ids, images, pixels = processor.encode(messages)
    if len(ids) > max_prompt_tokens:
        raise ValueError(f"request {request_id!r}: the prompt with its images is {len(ids)} tokens, over "
                         f"max_prompt_tokens={max_prompt_tokens} (an image prompt is never truncated)")
    return ids, images, pixels


def rope_positions(model: Any, ids: torch.Tensor, mask: torch.Tensor, grid_thw: torch.Tensor | None) -> torch.Tensor:
    """[3, B, L] multimodal rotary positions of (padded) rows, from the model's own rule."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = inner.model if hasattr(inner, "model") and hasattr(inner.model, "get_rope_index") else inner
    types = (ids == inner.config.image_token_id).to(torch.int32)
    positions, _ = inner.get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=grid_thw, attention_mask=mask)
    return positions


def sample_pixels(samples: Sequence[Any], config: Any, base: str, processor: VisionProcessor | None,
                  who: str) -> tuple[dict[str, torch.Tensor], VisionProcessor | None]:
    """pixel_values / image_grid_thw of the samples' images in row order ({} without images), and
    the processor (loaded once, on the first images)."""
    images = [im for s in samples for im in s.images]
    if images and (not is_vision_config(config) or any(isinstance(im, str) for im in images)):
        raise ValueError(f"{who}: samples carry images, but {base} is not a vision-language model or they "
                         "are hashes read back from a trajectory file")
    if not images:
        return {}, processor
    processor = processor or load_processor(base)
    return processor.pixel_inputs(images), processor
