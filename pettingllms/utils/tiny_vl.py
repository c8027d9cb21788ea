"""`tiny:vl`: a randomly initialised Qwen2.5-VL (2 text layers, a 2-block vision tower) with a real
processor built offline: the embedded SmolLM2 tokenizer plus Qwen2-VL's vision tokens, a Qwen2-VL
image processor capped at 112x112 pixels (16 image tokens), and a ChatML template that puts
`<|vision_start|><|image_pad|><|vision_end|>` where an image part is. Built once into the model
cache by `utils.models` (tiny:vl, tiny:vl-<name>); loaded like any VLM folder (`utils.vision`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
# ChatML, with string content or a list of {"type": "text"|"image"} parts.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TINY_MAX_PIXELS = 112 * 112


def build_tiny_vl(out: Path, tokenizer: Any, seed: int) -> None:
    """Write the tiny random Qwen2.5-VL and its processor to `out`."""
    from transformers import (GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration,
                              Qwen2VLImageProcessorPil)

    tokenizer.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
    tokenizer.chat_template = CHAT_TEMPLATE
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    text = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]},
                initializer_range=0.4, tie_word_embeddings=True,
                bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id)
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  fullatt_block_indexes=[1], window_size=112, patch_size=14, spatial_merge_size=2,
                  temporal_patch_size=2, initializer_range=0.4)
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                              video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                              vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.float().save_pretrained(out)
    images = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=TINY_MAX_PIXELS, patch_size=14,
                                   merge_size=2, temporal_patch_size=2)
    tokenizer.save_pretrained(out)
    images.save_pretrained(out)
