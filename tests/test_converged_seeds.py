"""scripts/converged_seeds.py: which local-m the seeds sweep replicates, and what it runs."""

from __future__ import annotations

import json
import sys

from conftest import ROOT, load_script

seeds = load_script("converged_seeds")


def table(**windows):
    rows = {name: {"window": w, "bleu": 20.0} for name, w in windows.items()}
    rows["flexible_ft_tau"] = {"tau": 2.0, "window": 9.0, "bleu": 20.0}
    return {"models": rows}


def test_the_local_m_nearest_the_fine_tuned_window_is_replicated():
    assert seeds.local_for_seeds(table(local_m=21.0, local_m_d2=5.0, local_m_d5=11.0, local_p=21.0)) == "local_m_d5"
    assert seeds.local_for_seeds(table(local_m=21.0, local_m_d2=8.0, local_m_d5=11.0)) == "local_m_d2"
    assert seeds.local_for_seeds(table(local_m=21.0)) == "local_m"


def test_a_fine_tuned_row_at_tau_inf_matches_no_fixed_window():
    import pytest

    metrics = table(local_m=21.0, local_m_d5=11.0)
    metrics["models"]["flexible_ft_tau"]["tau"] = None
    with pytest.raises(SystemExit, match="selected no τ.*--local"):
        seeds.local_for_seeds(metrics)


def test_each_seed_has_its_own_folder_in_the_sweep():
    import yaml

    sweep = yaml.safe_load((ROOT / "conf/sweep/seeds.yaml").read_text())
    assert sweep["hydra"]["sweep"]["subdir"] == "${train.seed}"


def test_the_sweep_runs_in_a_fixed_folder_so_that_it_resumes():
    cmd = seeds.command([1, 2, 3], "local_m_d5", 3)
    assert cmd[0] == sys.executable and cmd[1:5] == ["-m", "flexatt.stages.replicate", "-m", "+sweep=seeds"]
    assert "train.seed=1,2,3" in cmd and "seeds_local=local_m_d5" in cmd
    assert f"hydra.sweep.dir={seeds.SWEEP_DIR}" in cmd and "hydra.launcher.n_jobs=3" in cmd


def test_it_needs_a_kept_converged_copy_and_its_table(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit, match="not a kept copy of the converged profile"):
        seeds.main(["--keep", str(tmp_path), "--dry-run"])
    (tmp_path / ".git").mkdir()
    (tmp_path / "params.yaml").write_text("profile: converged\n")
    results = tmp_path / "results"
    with pytest.raises(SystemExit, match="metrics.json: not found"):
        seeds.main(["--keep", str(tmp_path), "--results", str(results), "--dry-run"])
    results.mkdir()
    (results / "metrics.json").write_text(json.dumps(table(local_m=21.0, local_m_d5=11.0)))
    assert seeds.main(["--keep", str(tmp_path), "--results", str(results), "--seeds", "2", "3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "train.seed=2,3 seeds_local=local_m_d5" in out and out.rstrip().endswith("hydra.launcher.n_jobs=2")
    seeds.main(["--keep", str(tmp_path), "--results", str(results), "--dry-run"])
    assert capsys.readouterr().out.rstrip().endswith("hydra.launcher.n_jobs=3")  # every seed at once
    seeds.main(["--keep", str(tmp_path), "--results", str(results), "--jobs", "1", "--dry-run"])
    assert capsys.readouterr().out.rstrip().endswith("hydra.launcher.n_jobs=1")
    seeds.main(["--keep", str(tmp_path), "--results", str(results), "--local", "local_m_d2", "--dry-run"])
    assert "seeds_local=local_m_d2" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        seeds.main(["--keep", str(tmp_path), "--results", str(results), "--jobs", "0", "--dry-run"])


def test_make_runs_it_on_the_converged_copy():
    makefile = (ROOT / "Makefile").read_text()
    assert "scripts/converged_seeds.py --keep $(CONVERGED_DIR)" in makefile
