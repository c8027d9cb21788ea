"""The README stays short and its links resolve; the docs site builds in strict mode, and strict
mode really fails on a dead link or a page missing from the nav."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEST_COMMAND = "PETTINGLLMS_EXTRAS=all bash setup.bash && .venv/bin/python -m pytest -q -n 2 --dist loadgroup"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
# A code span naming a repository file, e.g. `scripts/train/quickstart.sh` or `configs/quickstart.yaml`.
REPO_PATH = re.compile(r"`((?:scripts|configs|pettingllms|tests|docs)/[^`\s]*)`")


def _build(project: Path, site: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the `test` extra installs it)")
    pytest.importorskip("material", reason="mkdocs-material is not installed (the `test` extra installs it)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's notice about its successor
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)


def _copy_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", project / "docs")
    return project


def test_site_builds_in_strict_mode(tmp_path):
    r = _build(ROOT, tmp_path / "site")
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "results" / "speed" / "index.html").is_file()


@pytest.mark.parametrize("breakage", ["dead page link", "dead anchor", "page not in nav"])
def test_strict_build_fails_on_broken_docs(tmp_path, breakage):
    project = _copy_project(tmp_path)
    page = project / "docs" / "envs.md"
    if breakage == "dead page link":
        page.write_text(page.read_text() + "\nSee [a missing page](no_such_page.md).\n")
    elif breakage == "dead anchor":
        page.write_text(page.read_text() + "\nSee [a missing heading](running.md#no-such-heading).\n")
    else:
        (project / "docs" / "orphan.md").write_text("# A page nobody listed\n")
    r = _build(project, tmp_path / "site")
    assert r.returncode != 0, f"strict build passed despite a {breakage}:\n{r.stderr[-2000:]}"
    assert "Aborted" in r.stderr + r.stdout


def test_readme_is_short_and_has_the_test_command():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/"
    assert TEST_COMMAND in lines, "README.md must hold the exact test command on a line of its own"
    # CI runs the README's command: .ci/run holds its two halves, in order.
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    first, second = (part.strip() for part in TEST_COMMAND.split("&&"))
    assert first in ci and second in ci and ci.index(first) < ci.index(second)


def test_readme_relative_links_exist():
    targets = [t for t in LINK.findall(README.read_text()) if not re.match(r"[a-z]+:|#", t)]
    assert targets, "README.md links to no docs page"
    missing = [t for t in targets if not (ROOT / t.split("#")[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_repository_paths_named_in_readme_and_docs_exist():
    """Docs name repository files outside docs/ as code spans (mkdocs cannot check those links);
    check them here. Patterns such as `scripts/train/<env>/<env>_easy.sh` are skipped."""
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]  # docs/results/ are dated records
    missing = []
    for page in pages:
        for path in REPO_PATH.findall(page.read_text()):
            path = path.rstrip(".,:;")
            if any(c in path for c in "<>*{}[]"):
                continue
            if not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)
