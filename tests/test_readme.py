"""The README's figures are those of the committed results, it stays short enough to read, and
the project cites only documents it ships."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_figures_are_the_committed_results():
    result = subprocess.run([sys.executable, "scripts/readme_figures.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_readme_is_at_most_250_lines():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_the_project_cites_its_own_method_document_not_an_internal_one():
    """docs/method.md is the project's account of its method; no file cites a document that
    does not ship with it (the word is built here, so this file does not match itself)."""
    import re

    word = re.compile(r"\b" + "SP" + r"EC\b")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    hits = [name for name in tracked.split()
            if name.endswith((".py", ".md", ".yaml", ".yml", ".txt", ".json", ".cpp", ".toml", ".csv"))
            and (ROOT / name).is_file() and word.search((ROOT / name).read_text(encoding="utf-8", errors="replace"))]
    assert not hits, hits
