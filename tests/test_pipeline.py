"""`dvc repro` on the smoke profile, in a scratch copy of the repository (scripts/smoke.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml


def test_dvc_repro_smoke_profile(root, tmp_path):
    copy = tmp_path / "repo"
    result = subprocess.run([sys.executable, str(root / "scripts/smoke.py"), "--keep", str(copy)],
                            capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    lock = yaml.safe_load((copy / "dvc.lock").read_text())
    assert {"filter", "tokenize"} <= set(lock["stages"])
    filter_metrics = json.loads((copy / "results/filter.json").read_text())
    assert filter_metrics["splits"]["dev"]["pairs"] == 100
    assert (copy / "artifacts/tok/train.npz").is_file()
    assert "results/tokenize.json" in result.stdout  # `dvc metrics show` printed both files

    sys.path.insert(0, str(root / "scripts"))
    from smoke import run_dvc

    again = run_dvc(copy, "repro")
    assert again.returncode == 0 and "Data and pipelines are up to date" in again.stdout
    status = run_dvc(copy, "status")
    assert "up to date" in status.stdout
