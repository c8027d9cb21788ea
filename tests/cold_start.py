"""A real MetaAgent-X cold start on a tiny model, for the demo tests: a few synthetic designer rows
(the DSL templates) and two SFT steps (pettingllms.trainer.sft.run_sft) at a large learning rate,
so the saved weights are far from the base."""
from __future__ import annotations

from pathlib import Path

from pettingllms.cli.config_loading import load_config
from pettingllms.envs.autoevol import sft_data
from pettingllms.records import write_jsonl

PROBLEMS = [{"id": f"m{i}", "question": f"What is {i} + 1?", "answer": str(i + 1), "source": "toy"}
            for i in range(4)]


def make_cold_start(output_dir: Path, model_path: str, lora: bool = True, run_name: str = "cold",
                    overrides: tuple[str, ...] = ()) -> Path:
    """SFT run folder <output_dir>/autoevol_sft/<run_name> (where the recipe writes), its checkpoint inside."""
    from pettingllms.trainer.sft import run_sft

    data = Path(output_dir) / f"sft_rows_{run_name}.jsonl"
    write_jsonl(data, sft_data.designer_rows(PROBLEMS, seed=0))
    cfg = load_config("autoevol_sft", [
        "model=tiny", f"model.path={model_path}", f"model.lora.enabled={str(lora).lower()}",
        f"sft.data={data}", "sft.epochs=1", "sft.batch_size=2", "trainer.optim.lr=1e-2",
        "rollout.max_prompt_tokens=128", f"trainer.output_dir={output_dir}", f"trainer.run_name={run_name}",
        "trainer.logging.log_tensorboard=false", *overrides])
    return run_sft(cfg)
