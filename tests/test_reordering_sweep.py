"""scripts/reordering_sweep.py, without running a pipeline: what it collects from the kept runs
and from the real corpora's results, and what it writes (summary, DVC plot, figure)."""

from __future__ import annotations

import csv
import json

import yaml

from conftest import ROOT, load_script

sweep = load_script("reordering_sweep")


def fake_results(folder, crossing, flexible_window, flexible_tau=1.2, local_d=3, bleu=90.0, pipeline=None):
    """The two files a run leaves that the sweep reads (as the filter and evaluate stages write them),
    and its lock; ``pipeline``: a profile's pipeline's run (``results/<pipeline>/``,
    ``pipelines/<pipeline>/dvc.lock``), else the root pipeline's."""
    results = folder / "results" / (pipeline or "")
    lock = folder / "pipelines" / pipeline / "dvc.lock" if pipeline else folder / "dvc.lock"
    params_file = f"pipelines/{pipeline}/params.yaml" if pipeline else "params.yaml"
    results.mkdir(parents=True)
    lock.parent.mkdir(parents=True, exist_ok=True)
    (results / "filter.json").write_text(json.dumps({
        "splits": {"train": {"pairs": 999}, "dev": {"pairs": 100}, "test": {"pairs": 100}},
        "reordering": {"crossing_link_pairs": crossing, "sentences_with_crossing": 0.5, "mean_distortion": 0.1}}))
    rows = {"global": {"window": 8.5, "bleu": bleu}, "local_m": {"window": 6.0, "bleu": bleu + 1},
            "flexible": {"window": 8.5, "bleu": bleu + 0.5},
            "flexible_tau": {"tau": flexible_tau, "window": flexible_window, "bleu": bleu + 0.2},
            "flexible_ft": {"window": 8.5, "bleu": bleu + 0.7}}
    if flexible_tau is not None:
        rows["flexible_ft_tau"] = {"tau": 2.0, "window": flexible_window - 1, "bleu": bleu + 0.4}
    (results / "metrics.json").write_text(json.dumps({"split": "test", "models": rows}))
    lock.write_text(yaml.safe_dump({"stages": {"train@local_m": {"params": {params_file: {
        "model": {"local_D": local_d}, "variants.local_m": {"attention": "local_m"}}}}}}))


def test_collects_every_level_and_the_corpora_that_have_results(tmp_path, capsys):
    work, repo = tmp_path / "work", tmp_path / "repo"
    fake_results(work / "0", 0.0, 3.0, pipeline="smoke")  # a level's run: the smoke profile's pipeline
    fake_results(work / "1", 0.24, 5.5, flexible_tau=None, pipeline="smoke")  # no τ kept dev BLEU: no flexible_ft_tau row
    fake_results(repo, 0.0324, 10.0, local_d=10, bleu=17.0)
    fake_results(repo / "grc", 0.068, 12.0, local_d=99, bleu=15.0)  # its dvc.lock is not the run's
    (repo / "results/grc").mkdir(parents=True)
    for name in ("filter.json", "metrics.json"):
        (repo / "results/grc" / name).write_text((repo / "grc/results" / name).read_text())
    grc_metrics = json.loads((repo / "results/grc/metrics.json").read_text())
    grc_metrics["models"]["local_m_d5"] = {"window": 11.0, "bleu": 14.0}  # nearest flexible's 12.0; local_m: 6.0
    (repo / "results/grc/metrics.json").write_text(json.dumps(grc_metrics))
    (repo / "results/grc/dvc.lock").write_text(yaml.safe_dump({"stages": {"train@local_m_d5": {"params": {"params.yaml": {
        "model": {"local_D": 10}, "variants.local_m_d5": {"attention": "local_m", "local_D": 5}}}}}}))
    out = tmp_path / "out"
    code = sweep.main(["--collect-only", "--levels", "0", "0.5", "1", "--work", str(work), "--root", str(repo),
                       "--summary", str(out / "summary.json"), "--csv", str(out / "r.csv"), "--figure", str(out / "f.png")])
    assert code == 0
    printed = capsys.readouterr().out
    assert "note: level 0.5: no results" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["commit"] == sweep.git("rev-parse", "HEAD") and isinstance(summary["tree_clean"], bool)
    points = summary["points"]
    assert [(p["source"], p["level"]) for p in points] == [("synthetic", 0.0), ("synthetic", 1.0),
                                                            ("bible (default profile)", None),
                                                            ("nt_grc_en (grc profile)", None)]
    first, second, bible, grc = points
    assert grc["local_m_variant"] == "local_m_d5" and grc["local_m_bleu"] == 14.0 and grc["crossing_link_pairs"] == 0.068
    assert grc["local_D"] == 5  # from the run's dvc.lock, not a params.yaml
    assert bible["local_m_variant"] == "local_m"
    assert first["flexible_window_share"] == round(3.0 / 8.5, 4) and first["local_D"] == 3 and bible["local_D"] == 10
    assert second["flexible_ft_tau"] is None and second["flexible_tau"] is None
    assert bible["crossing_link_pairs"] == 0.0324 and bible["test_pairs"] == 100
    with open(out / "r.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert list(table[0]) == list(sweep.COLUMNS) and len(table) == 4 and table[1]["flexible_ft_window"] == ""
    assert (out / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_plot_is_declared_in_dvc_yaml_and_make_runs_the_sweep():
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    declared = [next(iter(p)) if isinstance(p, dict) else p for p in dvc["plots"]]
    assert "results/plots/reordering.csv" in declared and "results/figures/window_vs_reordering.png" in declared
    spec = next(p for p in dvc["plots"] if isinstance(p, dict) and "results/plots/reordering.csv" in p)
    assert spec["results/plots/reordering.csv"]["x"] in sweep.COLUMNS
    assert set(spec["results/plots/reordering.csv"]["y"]) <= set(sweep.COLUMNS)
    makefile = (ROOT / "Makefile").read_text()
    assert "scripts/reordering_sweep.py" in makefile and "make reordering" in makefile


def test_levels_outside_zero_to_one_are_refused(capsys):
    try:
        sweep.main(["--collect-only", "--levels", "1.5"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "--levels: 1.5 is not in [0, 1]" in capsys.readouterr().err
