"""Trained models through a DVC remote (docs/sharing.md): what one person's ``dvc repro`` made,
another gets with ``git clone`` and ``dvc pull``, with nothing to re-run.

A copy of the session's smoke pipeline run (conftest's ``smoke_copy``: every stage ran) gets a
folder remote as its default (``dvc remote add -d``, committed in ``.dvc/config`` as a team would
commit theirs) and pushes its outputs; a fresh ``git clone`` of it, with an empty DVC cache, pulls
them: every output is back byte for byte, ``dvc status`` and ``dvc repro --dry`` find nothing to
run, and ``flexatt translate`` decodes with the pulled checkpoint exactly as with the original.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_of, stage_env
from test_dvc_experiments import dvc, git

#: the smoke profile's whole pipeline first (conftest's ``smoke_copy``): minutes
pytestmark = pytest.mark.slow

UP_TO_DATE = "Data and pipelines are up to date."


def outputs(repo: Path) -> dict[str, bytes]:
    """Every file under ``artifacts/`` (the DVC-cached outputs), by path."""
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted((repo / "artifacts").rglob("*")) if p.is_file()}


def translate(repo: Path, text: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flexatt.cli", "translate", "--checkpoint", "artifacts/smoke/models_ft/flexible/best.ckpt",
         "--beam", "2", "--tau", "1.0"],
        cwd=repo, env=stage_env("1"), input=text, text=True, capture_output=True, timeout=300)


def test_pull_from_a_folder_remote_restores_the_pipeline(smoke_copy, tmp_path):
    origin = copy_of(smoke_copy[0], tmp_path / "origin")
    remote = tmp_path / "remote"
    dvc(origin, "remote", "add", "-d", "storage", str(remote))
    git(origin, "add", "-A")
    # the smoke profile's results are git-ignored here (a test profile, docs/pipeline.md); a team
    # keeps a profile's results, as the char profile's are kept, by committing them
    git(origin, "add", "-f", "results/smoke")
    git(origin, "commit", "-qm", "pipeline results and the team's DVC remote")
    pushed = dvc(origin, "push")
    assert "files pushed" in pushed and any(remote.rglob("*")), pushed

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    assert not (clone / "artifacts").exists() and not any((clone / ".dvc/cache").glob("*/*/*"))
    assert dvc(clone, "remote", "list").split()[:2] == ["storage", str(remote)]
    # a bare `dvc pull` refuses outputs no stage has made yet (the long profiles' pending units'
    # weights); --allow-missing pulls every output that exists, and the checks below prove that the
    # whole pushed pipeline came back
    dvc(clone, "pull", "--allow-missing")
    expected = outputs(origin)
    assert "artifacts/smoke/models_ft/flexible/best.ckpt" in expected and "artifacts/smoke/models/global/best.ckpt" in expected
    assert outputs(clone) == expected, "dvc pull restored other files than the pipeline made"

    # the pipeline that was pushed: the long profiles' pipelines/*/dvc.yaml keep their data out of the
    # remote (made again in seconds) and list it as missing until it is made (tests/test_pipelines.py)
    assert UP_TO_DATE in dvc(clone, "status", "pipelines/smoke/dvc.yaml")
    dry = dvc(clone, "repro", "--dry", "pipelines/smoke/dvc.yaml")
    assert UP_TO_DATE in dry and "Running stage" not in dry, dry
    assert not git(clone, "status", "--porcelain"), "the pull changed tracked files"

    sentences = "".join(line + "\n" for line in (clone / "artifacts/smoke/filter/test.src").read_text().splitlines()[:5])
    pulled, original = translate(clone, sentences), translate(origin, sentences)
    assert pulled.returncode == 0, pulled.stderr[-3000:]
    lines = pulled.stdout.splitlines()
    assert len(lines) == 5 and all(lines), pulled.stdout
    assert pulled.stdout == original.stdout
