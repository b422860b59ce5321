"""The named Hydra sweeps of conf/sweep/ and their summary (flexatt.sweeps).

Fast tests: every named sweep composes on top of params.yaml (joblib launcher, per-job output
dirs, the summary callback, the W&B group) and so does the SLURM launcher; a whole sweep runs
through Hydra's joblib launcher with a stub stage (same group for every job's W&B run and the
summary run, summary files, nothing written outside multirun/ and wandb/); the summary itself on
hand-made job dirs. Then two real sweeps (train and sweep_sigma, reduced grids) on smoke data
that the stages make in a scratch folder.
"""

from __future__ import annotations

import csv
import hashlib
import importlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from conftest import ROOT, compose_params
from flexatt import sweeps
from wandb_records import find_runs

PNG = b"\x89PNG\r\n\x1a\n"

# name -> (stage, swept keys, the keys naming what the stage writes: all must be per job)
SWEEPS = {
    "tau_sigma": ("sweep_sigma", ["sweep_sigma.grid", "sweep_tau.grid"],
                  ["sweep_sigma.out_dir", "sweep_sigma.out", "sweep_sigma.curve_file", "sweep_sigma.figure"]),
    "score": ("train", ["model.score"], ["train.out_dir", "train.metrics_dir"]),
    "sact_lambda": ("train", ["model.sact_lambda"], ["train.out_dir", "train.metrics_dir"]),
    "temperature": ("train", ["model.temperature"], ["train.out_dir", "train.metrics_dir"]),
    "beta": ("finetune", ["finetune.beta"], ["finetune.out_dir", "finetune.metrics_dir"]),
    "transformer": ("train", ["model.hidden_size", "train.lr"], ["train.out_dir", "train.metrics_dir"]),
}
JOB_DIR = "${hydra:sweep.dir}/${hydra:sweep.subdir}"


def compose_sweep(params_dir: Path, *overrides: str):
    """The stage's config (with its hydra node) for ``overrides``, as ``run_stage`` composes it."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(params_dir), version_base="1.3"):
        return compose("params", overrides=[f"hydra.searchpath=[file://{ROOT / 'conf'}]", *overrides],
                       return_hydra_config=True)


def raw(cfg, key: str):
    """The unresolved value of ``key``."""
    parent, _, leaf = key.rpartition(".")
    return OmegaConf.to_container(OmegaConf.select(cfg, parent) if parent else cfg, resolve=False)[leaf]


@pytest.fixture(scope="module")
def params_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("params")
    compose_params(directory, "profile=smoke")
    return directory


def test_sweeps_are_outside_the_pipeline_config():
    defaults = yaml.safe_load((ROOT / "conf/config.yaml").read_text())["defaults"]
    groups = [d if isinstance(d, str) else next(iter(d)) for d in defaults]
    assert "sweep_tau" in groups and not any(g.lstrip("/+").split("@")[0] == "sweep" for g in groups)
    assert {p.stem for p in (ROOT / "conf/sweep").glob("*.yaml")} == {*SWEEPS, "common"}


@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_named_sweep_composes(params_dir, name):
    stage, swept, outputs = SWEEPS[name]
    cfg = compose_sweep(params_dir, f"+sweep={name}")
    params = OmegaConf.load(params_dir / "params.yaml")
    assert list(cfg.hydra.sweeper.params) == swept
    for key in swept:  # a real key of params.yaml, so each job's override is valid
        assert OmegaConf.select(params, key, default="<missing>") != "<missing>", key
        assert len(str(cfg.hydra.sweeper.params[key]).split(",")) >= 3, key
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher")
    assert cfg.hydra.launcher.n_jobs == 2
    assert raw(cfg, "hydra.sweep.dir") == "multirun/${hydra.runtime.choices.sweep}/${now:%Y-%m-%d_%H-%M-%S}"
    assert cfg.hydra.runtime.choices.sweep == name
    for key in outputs:
        assert str(raw(cfg, key)).startswith(JOB_DIR), f"{key} is not under the job's sweep subdir"
    assert raw(cfg, "logger.group") == "${oc.env:FLEXATT_SWEEP_GROUP,null}"
    callback = OmegaConf.to_container(cfg.hydra.callbacks.sweep_summary, resolve=True)
    assert callback["_target_"] == "flexatt.sweeps.SweepSummary" and callback["name"] == name
    from hydra.utils import instantiate

    assert instantiate(cfg.hydra.callbacks.sweep_summary).settings["main_metric"] == "dev_bleu"
    importlib.import_module(f"flexatt.stages.{stage}")
    doc = (ROOT / f"conf/sweep/{name}.yaml").read_text()
    assert f"python -m flexatt.stages.{stage} -m +sweep={name}" in doc


def test_slurm_launcher_composes(params_dir):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install -e '.[cluster]'")
    cfg = compose_sweep(params_dir, "+sweep=score", "sweep/launcher=slurm", "hydra.launcher.partition=gpu")
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert launcher.partition == "gpu" and launcher.gpus_per_node == 1 and launcher.timeout_min == 240
    assert raw(cfg, "hydra.launcher.submitit_folder") == "${hydra.sweep.dir}/.submitit/%j"
    assert list(cfg.hydra.sweeper.params) == ["model.score"]


STUB_STAGE = '''
"""A stand-in for a training stage: one W&B run, a metrics file, a dict returned."""
import json
from pathlib import Path
from flexatt import config as C
from flexatt.tracking import start_run

BLEU = {"concat": 5.0, "general": 6.5, "dot": 4.0, "scaled_dot": 7.25, "location": 3.0}


def run(cfg):
    score = cfg.model.score
    tracker = start_run(cfg, "train", f"{cfg.train.variant}-{score}", tags=["stub"])
    metrics = {"dev_bleu": BLEU[score], "best_epoch": 1, "tokens_per_second": 100.0, "parameters": 10}
    out = Path(cfg.train.metrics_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{cfg.train.variant}.json").write_text(json.dumps(metrics))
    Path(cfg.train.out_dir, cfg.train.variant).mkdir(parents=True, exist_ok=True)
    tracker.summary({"final/dev_bleu": metrics["dev_bleu"]})
    tracker.finish()
    return metrics


C.run_stage(run)
'''


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a sweep run: offline W&B, no params file, group or W&B service of ours."""
    env = {k: v for k, v in os.environ.items() if k not in ("FLEXATT_PARAMS", sweeps.GROUP_ENV, "WANDB_SERVICE")}
    return {**env, "WANDB_MODE": "offline", **extra}


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] not in ("multirun", "wandb")}


@pytest.fixture(scope="module")
def stub_sweep(tmp_path_factory):
    """``stub.py -m +sweep=score`` (5 jobs through joblib) in a scratch folder."""
    work = tmp_path_factory.mktemp("stub_sweep")
    compose_params(work, "profile=smoke")
    (work / "conf").symlink_to(ROOT / "conf")
    (work / "stub.py").write_text(STUB_STAGE)
    before = _files(work)
    result = subprocess.run([sys.executable, "stub.py", "-m", "+sweep=score"], cwd=work, env=clean_env(),
                            text=True, capture_output=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (sweep_dir,) = (work / "multirun/score").iterdir()
    return work, sweep_dir, before, result


def test_stub_sweep_jobs_write_only_their_own_dirs(stub_sweep):
    work, sweep_dir, before, _ = stub_sweep
    assert _files(work) == before, "a job wrote outside multirun/ and wandb/"
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0", "1", "2", "3", "4"]
    scores = []
    for job in jobs:
        record = json.loads((job / "job.json").read_text())
        assert record["status"] == "COMPLETED" and record["num"] == int(job.name)
        assert record["return_value"]["dev_bleu"] == json.loads((job / "global.json").read_text())["dev_bleu"]
        assert (job / "models/global").is_dir()
        scores.append(next(o.split("=")[1] for o in record["overrides"] if o.startswith("model.score=")))
    assert scores == ["concat", "general", "dot", "scaled_dot", "location"]
    multirun = yaml.safe_load((sweep_dir / "multirun.yaml").read_text())
    assert any(o.startswith(f"++hydra.job.env_set.{sweeps.GROUP_ENV}=") for o in multirun["hydra"]["overrides"]["hydra"])


def test_stub_sweep_summary_files(stub_sweep):
    _, sweep_dir, _, result = stub_sweep
    with open(sweep_dir / "summary.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["model.score"] for r in rows] == ["concat", "general", "dot", "scaled_dot", "location"]
    assert [float(r["dev_bleu"]) for r in rows] == [5.0, 6.5, 4.0, 7.25, 3.0]
    assert {r["status"] for r in rows} == {"COMPLETED"}
    md = (sweep_dir / "summary.md").read_text()
    assert "**Best:** job 3 (`model.score=scaled_dot`): dev_bleu = 7.25" in md
    assert " -m +sweep=score`" in md and "W&B group: `sweep-score-" in md
    assert "![dev_bleu against the swept keys](summary.png)" in md
    assert (sweep_dir / "summary.png").read_bytes()[:8] == PNG
    assert f"summary in {sweep_dir.relative_to(sweep_dir.parents[2])}/summary.md" in result.stdout


def test_stub_sweep_wandb_runs_share_one_group(stub_sweep):
    work, sweep_dir, _, _ = stub_sweep
    group = json.loads((sweep_dir / "sweep.json").read_text())["group"]
    assert group == f"sweep-score-{sweep_dir.name}"
    runs = find_runs(work / "wandb")
    assert sorted(r["run"].job_type for r in runs) == ["sweep_summary"] + ["train"] * 5
    assert {r["run"].run_group for r in runs} == {group}
    (summary,) = [r for r in runs if r["run"].job_type == "sweep_summary"]
    assert summary["run"].display_name == "sweep_summary-score"
    assert {"sweep", "score", "smoke"} <= set(summary["run"].tags)
    assert summary["summary"]["best/model.score"] == "scaled_dot" and summary["summary"]["best/dev_bleu"] == 7.25
    assert summary["summary"]["jobs"] == 5 and summary["summary"]["completed"] == 5
    assert summary["config"]["sweep"]["main_metric"] == "dev_bleu"
    files = summary["files"]
    assert any(f.startswith("media/table/sweep/results") for f in files)
    assert any(f.startswith("media/images/sweep/plot") for f in files)
    assert any(k.startswith("sweep/dev_bleu_plot") for k in summary["summary"])  # the line plot


def test_sweep_config_without_multirun_is_refused(stub_sweep):
    work = stub_sweep[0]
    result = subprocess.run([sys.executable, "stub.py", "+sweep=score"], cwd=work,
                            env=clean_env(WANDB_MODE="disabled"), text=True, capture_output=True, timeout=300)
    assert result.returncode == 2 and "add --multirun (-m)" in result.stderr


# --------------------------------------------------------------------------- summary on hand-made dirs


def make_sweep(root: Path, wandb_mode: str = "disabled") -> Path:
    """A tau x sigma sweep dir: 2 sigmas x 2 taus, one job failed, one never recorded."""
    sweep_dir = root / "multirun/tau_sigma/2026-01-01_00-00-00"
    settings = {"name": "tau_sigma", "metrics_file": "sweep_sigma.json",
                "metrics": {"dev_bleu": "points.0.dev_bleu_ref", "window": "points.0.window"},
                "main_metric": "dev_bleu", "mode": "max", "x": "sweep_tau.grid", "plot": ["dev_bleu", "window"],
                "group": "sweep-tau_sigma-2026-01-01_00-00-00", "stage": "flexatt.stages.sweep_sigma",
                "overrides": ["+sweep=tau_sigma"], "profile": "smoke",
                "params": {"sweep_sigma.grid": "[1.5],[5.0]", "sweep_tau.grid": "[0.8],[1.2]"},
                "logger": {"enabled": True, "project": "flexatt", "entity": None, "mode": wandb_mode,
                           "dir": str(root), "group": "sweep-tau_sigma-2026-01-01_00-00-00"}}
    sweep_dir.mkdir(parents=True)
    (sweep_dir / "sweep.json").write_text(json.dumps(settings))
    points = {(1.5, 0.8): (10.0, 4.0), (1.5, 1.2): (11.0, 6.0), (5.0, 0.8): (9.0, 5.0), (5.0, 1.2): None}
    for num, ((sigma, tau), point) in enumerate(points.items()):
        job = sweep_dir / str(num)
        job.mkdir()
        record = {"num": num, "status": "COMPLETED" if point else "FAILED",
                  "overrides": [f"sweep_sigma.grid=[{sigma}]", f"sweep_tau.grid=[{tau}]", "+sweep=tau_sigma"]}
        (job / "job.json").write_text(json.dumps(record))
        if point:
            (job / "sweep_sigma.json").write_text(json.dumps({"points": [{"dev_bleu_ref": point[0], "window": point[1]}]}))
    (sweep_dir / "4").mkdir()  # a job that never wrote its record (killed)
    return sweep_dir


def test_summary_of_a_two_key_sweep(tmp_path):
    sweep_dir = make_sweep(tmp_path)
    summary = sweeps.summarize(sweep_dir, wandb=False)  # no W&B service in the pytest process
    assert summary["swept"] == ["sweep_sigma.grid", "sweep_tau.grid"]
    assert [(r["sweep_sigma.grid"], r["sweep_tau.grid"], r["dev_bleu"], r["status"]) for r in summary["rows"]] == [
        (1.5, 0.8, 10.0, "COMPLETED"), (1.5, 1.2, 11.0, "COMPLETED"), (5.0, 0.8, 9.0, "COMPLETED"),
        (5.0, 1.2, None, "FAILED"), (None, None, None, "NO_RECORD")]
    assert summary["best"]["job"] == 1 and summary["done"] == 3
    assert sweeps.plot_axes({"x": "sweep_tau.grid"}, summary["swept"], summary["rows"][:3]) == \
        ("sweep_tau.grid", "sweep_sigma.grid")
    md = (sweep_dir / "summary.md").read_text()
    assert "| 3 | 5 | 1.2 | – | – | FAILED |" in md and "jobs: 5, completed: 3" in md
    assert (sweep_dir / "summary.png").read_bytes()[:8] == PNG
    assert len((sweep_dir / "summary.csv").read_text().splitlines()) == 6


def test_summary_command_line(tmp_path):
    sweep_dir = make_sweep(tmp_path)
    result = subprocess.run([sys.executable, "-m", "flexatt.sweeps", str(sweep_dir), "--no-wandb"],
                            env=clean_env(), text=True, capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# Sweep `tau_sigma`") and (sweep_dir / "summary.csv").is_file()
    bad = subprocess.run([sys.executable, "-m", "flexatt.sweeps", str(tmp_path)], env=clean_env(), text=True,
                         capture_output=True, timeout=300)
    assert bad.returncode == 2 and f"{tmp_path / 'sweep.json'}: not found" in bad.stderr


def test_summary_survives_a_wandb_failure(tmp_path, monkeypatch):
    import wandb

    def broken(*args, **kwargs):
        raise RuntimeError("no network")

    monkeypatch.setattr(wandb, "init", broken)
    monkeypatch.setenv("WANDB_MODE", "offline")
    sweep_dir = make_sweep(tmp_path, wandb_mode="offline")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = sweeps.summarize(sweep_dir)
    assert summary["best"]["job"] == 1 and (sweep_dir / "summary.md").is_file()
    assert any("W&B init failed (RuntimeError: no network)" in str(w.message) for w in caught)


def test_summary_settings_are_checked():
    with pytest.raises(sweeps.ConfigError, match=r"hydra.callbacks.sweep_summary.main_metric: must be one of dev_bleu"):
        sweeps.SweepSummary("x", "a.json", {"dev_bleu": "dev_bleu"}, "bleu")
    with pytest.raises(sweeps.ConfigError, match=r"hydra.callbacks.sweep_summary.plot: 'window' is not a column"):
        sweeps.SweepSummary("x", "a.json", {"dev_bleu": "dev_bleu"}, "dev_bleu", plot=["window"])
    assert sweeps.select({"points": [{"a": 1}]}, "points.0.a") == 1
    assert sweeps.select({"points": []}, "points.0.a") is None
    assert sweeps.parse_override("sweep_sigma.grid=[1.5]") == ("sweep_sigma.grid", 1.5)
    assert sweeps.parse_override("+sweep=score") is None
    assert sweeps.group_name("score", "multirun/score/2026-01-01 00:00") == "sweep-score-2026-01-01_00_00"


# --------------------------------------------------------------------------- real stages


#: torch's threads in the real stages' processes: the smoke models are tiny, and on a busy 2-core
#: machine two threads per process stall each other (an epoch about 8 times slower)
ONE_THREAD = "1"


@pytest.fixture(scope="module")
def mini_repo(tmp_path_factory) -> Path:
    """Smoke-profile data and a trained flexible model (1 epoch), made by the stages themselves:
    what the train and sweep_sigma sweeps read."""
    from conftest import run_module

    repo = tmp_path_factory.mktemp("mini") / "repo"
    compose_params(repo, "profile=smoke")
    (repo / "conf").symlink_to(ROOT / "conf")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", ONE_THREAD)
        for module, *args in (("filter",), ("tokenize",), ("train", "train.variant=flexible", "train.epochs=1")):
            result = run_module(f"flexatt.stages.{module}", *args, "logger.enabled=false", cwd=repo)
            assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return repo


def run_sweep(repo: Path, stage: str, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    result = subprocess.run([sys.executable, "-m", f"flexatt.stages.{stage}", "-m", *args], cwd=repo,
                            env=clean_env(**{"OMP_NUM_THREADS": ONE_THREAD, **env}), text=True,
                            capture_output=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    name = next(a.split("=", 1)[1] for a in args if a.startswith("+sweep="))
    return result, sorted((repo / "multirun" / name).iterdir())[-1]


def pipeline_files(repo: Path) -> dict[str, str]:
    return {str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
            for top in ("artifacts", "results") for p in (repo / top).rglob("*") if p.is_file()}


@pytest.mark.slow  # real stages in a Hydra multirun (train, two jobs)
def test_real_train_sweep(mini_repo):
    before = pipeline_files(mini_repo)
    _, sweep_dir = run_sweep(mini_repo, "train", "+sweep=temperature",
                             "model.temperature=0.8,1.2", "train.epochs=2")
    assert pipeline_files(mini_repo) == before, "the sweep changed the pipeline's outputs"
    with open(sweep_dir / "summary.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["model.temperature"], r["status"]) for r in rows] == [("0.8", "COMPLETED"), ("1.2", "COMPLETED")]
    for r in rows:
        assert float(r["dev_bleu"]) >= 0 and r["best_epoch"] in ("1", "2")
        assert (sweep_dir / r["dir"] / "models/global/best.ckpt").is_file()
    group = json.loads((sweep_dir / "sweep.json").read_text())["group"]
    runs = [r for r in find_runs(mini_repo / "wandb") if r["run"].run_group == group]
    assert sorted(r["run"].job_type for r in runs) == ["sweep_summary", "train", "train"]
    temps = sorted(r["config"]["model"]["temperature"] for r in runs if r["run"].job_type == "train")
    assert temps == [0.8, 1.2]


@pytest.mark.slow  # real stages in a Hydra multirun (sweep_sigma trains)
def test_real_tau_sigma_sweep(mini_repo):
    before = pipeline_files(mini_repo)
    _, sweep_dir = run_sweep(mini_repo, "sweep_sigma", "+sweep=tau_sigma",
                             "sweep_sigma.grid=[1.5],[5.0]", "sweep_tau.grid=[1.0]")
    assert pipeline_files(mini_repo) == before, "the sweep changed the pipeline's outputs"
    summary = sweeps.summarize(sweep_dir, wandb=False)
    assert summary["swept"] == ["sweep_sigma.grid", "sweep_tau.grid"]
    assert sweeps.plot_axes({"x": "sweep_tau.grid"}, summary["swept"], summary["rows"]) == \
        ("sweep_sigma.grid", None)  # tau takes one value here: sigma on the x axis
    assert [r["sweep_sigma.grid"] for r in summary["rows"]] == [1.5, 5.0]
    for r in summary["rows"]:
        assert r["status"] == "COMPLETED" and r["window"] > 0 and r["dev_bleu"] >= 0
        point = json.loads((sweep_dir / r["dir"] / "sweep_sigma.json").read_text())
        assert point["reference_tau"] == 1.0
    assert (sweep_dir / "summary.png").read_bytes()[:8] == PNG


def test_aggregate_gives_mean_and_sample_sd_of_completed_jobs(tmp_path):
    """A sweep of replicates (``aggregate: true``): mean ± sample sd over the completed jobs only."""
    sweep_dir = make_sweep(tmp_path)
    record = json.loads((sweep_dir / "sweep.json").read_text())
    (sweep_dir / "sweep.json").write_text(json.dumps({**record, "aggregate": True}))
    summary = sweeps.summarize(sweep_dir, wandb=False)
    stats = summary["stats"]["dev_bleu"]
    assert stats["n"] == 3 and stats["mean"] == pytest.approx(10.0) and stats["sd"] == pytest.approx(1.0)
    assert summary["stats"]["window"]["mean"] == pytest.approx(5.0)
    md = (sweep_dir / "summary.md").read_text()
    assert "| dev_bleu | 10.00 ± 1.00 | 3 |" in md and "n = 3" in md
    assert "**Best:**" not in md  # replicates: no best job
    with open(sweep_dir / "summary.csv", newline="") as handle:
        rows = {r["job"]: r for r in csv.DictReader(handle)}
    assert float(rows["mean"]["dev_bleu"]) == pytest.approx(10.0) and float(rows["sd"]["window"]) == pytest.approx(1.0)
    assert sweeps.aggregate([{"status": "COMPLETED", "a": 2.0}], ["a"])["a"] == {"n": 1, "mean": 2.0, "sd": None}
    assert sweeps.format_stat({"n": 2, "mean": 0.573, "sd": 0.011455}, 4) == "0.5730 ± 0.0115"
    assert sweeps.format_stat({"n": 1, "mean": 2.0, "sd": None}) == "2.00"
    assert sweeps.format_stat({"n": 0, "mean": None, "sd": None}) == "–"
    with pytest.raises(sweeps.ConfigError, match="aggregate: must be true or false"):
        sweeps.SweepSummary("x", "a.json", {"dev_bleu": "dev_bleu"}, "dev_bleu", aggregate="yes")
    # the other sweeps (no aggregate in their settings): unchanged
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    summary = sweeps.summarize(sweep_dir, wandb=False)
    assert summary["stats"] is None and "mean ± " not in (sweep_dir / "summary.md").read_text()
    assert "**Best:**" in (sweep_dir / "summary.md").read_text()
    assert len((sweep_dir / "summary.csv").read_text().splitlines()) == 6
