"""The long profiles' DVC pipelines (``pipelines/<profile>/``): params composed from ``conf/``,
every finished unit a frozen stage whose lock entry names the code and parameters it ran with,
nothing stale but the DVC-cached data, and a report rebuilt from products alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flexatt import freeze

ROOT = Path(__file__).resolve().parents[1]
#: the RNN's long profiles, whose 56 first units ran before their pipelines split a unit in two
RNN_PROFILES = ("bible", "grc")
#: every long profile with finished units: the RNN's and the Transformer's (their pipelines generated)
PROFILES = RNN_PROFILES + tuple(p for p in ("bible_tf", "grc_tf")
                                if (yaml.safe_load((ROOT / "pipelines" / p / "units.yaml").read_text()) or {}).get("finished"))


def dvc(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, capture_output=True, text=True)


def lock(profile: str) -> dict:
    return yaml.safe_load((ROOT / "pipelines" / profile / "dvc.lock").read_text())["stages"]


@pytest.mark.parametrize("profile", PROFILES)
def test_a_profiles_params_are_conf_composed_with_the_profile(profile):
    from omegaconf import OmegaConf

    from flexatt.config import compose

    committed = yaml.safe_load((ROOT / "pipelines" / profile / "params.yaml").read_text())
    composed = OmegaConf.to_container(compose([f"profile={profile}"], ROOT / "conf"), resolve=True)
    assert committed == composed, f"run `flexatt params profile={profile} --output pipelines/{profile}/params.yaml`"


@pytest.mark.parametrize("profile", PROFILES)
def test_every_finished_unit_is_a_frozen_stage_of_its_profile(profile):
    from flexatt.products import done_units, read_plan, rerun_due

    done = done_units(ROOT / "results" / profile / "units")
    finished = yaml.safe_load((ROOT / "pipelines" / profile / "units.yaml").read_text())["finished"]
    # ran on uncommitted edits, or predate a fix the plan names: pending again
    again = rerun_due(done, ROOT, read_plan(ROOT / "conf" / "units" / f"{profile}.yaml"))
    assert sorted(item["unit"] for item in finished.values()) == sorted(set(done) - again)
    pending = yaml.safe_load((ROOT / "pipelines" / profile / "units.yaml").read_text())["pending"]
    assert again <= {item["unit"] for item in pending.values()}
    plots = yaml.safe_load((ROOT / "pipelines" / profile / "dvc.yaml").read_text()).get("plots") or []
    curves = plots[0]["dev_bleu_by_epoch"]["y"] if plots else {}
    assert sorted(curves) == sorted(f"../../results/{profile}/units/{item['unit']}/curve.csv" for item in finished.values()
                                    if done[item["unit"]]["kind"] == "train" and done[item["unit"]]["budget"] == 1.0)
    spec = yaml.safe_load((ROOT / "pipelines" / profile / "dvc.yaml").read_text())["stages"]["unit"]
    assert spec["do"]["frozen"] is True
    stages = lock(profile)
    for key, item in finished.items():
        assert item["source"] == done[item["unit"]]["source"], key
        assert f"unit@{key}" in stages, f"{key}: no lock entry (python python -m flexatt.freeze {profile})"


def test_a_folder_hash_from_git_objects_is_the_one_dvc_writes():
    """The recipe of :func:`freeze.tree_hash` against DVC's own lock: the root pipeline's
    ``train@global`` entry of ``src/flexatt/attention`` at the commit that last wrote dvc.lock."""
    commit = subprocess.run(["git", "log", "-1", "--format=%H", "--", "dvc.lock"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.strip()
    locked = yaml.safe_load(subprocess.run(["git", "show", f"{commit}:dvc.lock"], cwd=ROOT, capture_output=True,
                                           text=True, check=True).stdout)["stages"]
    folders = [d for stage in locked.values() for d in stage.get("deps", []) if d["path"].startswith("src/flexatt/")
               and d["md5"].endswith(".dir")]
    assert folders
    for dep in folders[:3]:
        assert freeze.tree_hash(commit, dep["path"], root=ROOT) == {k: dep[k] for k in ("md5", "size", "nfiles")}


@pytest.mark.parametrize("profile", PROFILES)
def test_a_frozen_units_lock_entry_names_the_code_of_its_recorded_commit(profile):
    """Every entry's ``src/flexatt`` is the folder at the unit's commit, not today's; the
    parameters of two units (one of them a fine-tuning) are ``conf/`` of their commits (the RNN's
    profiles, whose units span many commits)."""
    finished = yaml.safe_load((ROOT / "pipelines" / profile / "units.yaml").read_text())["finished"]
    stages = lock(profile)
    today = freeze.tree_hash("HEAD", root=ROOT)["md5"]
    differ = 0
    for key, item in finished.items():
        dep = next(d for d in stages[f"unit@{key}"]["deps"] if d["path"] == "src/flexatt")
        assert {k: dep[k] for k in ("md5", "size", "nfiles")} == freeze.tree_hash(item["source"]["commit"], root=ROOT), key
        differ += dep["md5"] != today
    if profile not in RNN_PROFILES:
        return
    assert differ > len(finished) // 2
    def when(key: str) -> int:  # the commit time of a unit's run
        return int(subprocess.run(["git", "log", "-1", "--format=%ct", finished[key]["source"]["commit"]], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout)

    newest = max(finished, key=when)  # composed under the profile's name at its commit (bible was "converged")
    for key in [k for k in finished if "-ft-" in k][:1] + ["global-s1", newest]:
        item = finished[key]
        params = stages[f"unit@{key}"]["params"][f"pipelines/{profile}/params.yaml"]
        assert params == freeze.composed_params(item["source"]["commit"], profile,
                                                      item["source"].get("overrides", []), item["variant"], ROOT)


def _changed(profile: str, *stages: str) -> dict:
    out = dvc("status", "--json", *(f"pipelines/{profile}/dvc.yaml:{s}" for s in stages))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout or "{}")


@pytest.mark.parametrize("profile", PROFILES)
def test_the_units_and_the_report_are_up_to_date(profile):
    """What a fresh clone has of them (git's files: no DVC cache) is what their locks record;
    the data stages are the only ones whose outputs DVC caches."""
    assert _changed(profile, "unit", "report") == {}


@pytest.mark.parametrize("profile", PROFILES)
def test_a_change_to_a_frozen_units_products_shows(profile, tmp_path):
    """Frozen means its dependencies are not compared, not that its outputs are not."""
    finished = yaml.safe_load((ROOT / "pipelines" / profile / "units.yaml").read_text())["finished"]
    key, item = next(iter(finished.items()))
    curve = ROOT / "results" / profile / "units" / item["unit"] / "curve.csv"
    saved = curve.read_bytes()
    try:
        curve.write_bytes(saved + b"\n")
        changed = _changed(profile, f"unit@{key}")
        assert changed and "changed outs" in json.dumps(changed)
    finally:
        curve.write_bytes(saved)
    assert _changed(profile, f"unit@{key}") == {}


def test_the_report_refuses_references_the_units_did_not_decode(tmp_path):
    from flexatt.errors import DataError
    from flexatt.products import done_units
    from flexatt.stages.report import read_references

    done = done_units(ROOT / "results" / "grc" / "units")
    bad = tmp_path / "test.ref"
    bad.write_text("not the references\n", encoding="utf-8")
    with pytest.raises(DataError, match="test.ref: not the references the units decoded"):
        read_references({"test": bad}, done)
    with pytest.raises(DataError, match="missing.ref: not found"):
        read_references({"test": tmp_path / "missing.ref"}, done)


def test_freezing_without_the_tokenized_data_names_the_file_and_what_makes_it(tmp_path):
    from flexatt.errors import DataError
    from flexatt.products import done_units

    manifests = dict(list(done_units(ROOT / "results" / "grc" / "units").items())[:1])
    assert manifests
    with pytest.raises(DataError, match=r"tok/train\.npz: not found: the units of grc are checked against the "
                                        r"tokenized data they read; make it first \(`dvc repro` of the tokenize stage"):
        freeze.check_data("grc", tmp_path / "tok", manifests)


@pytest.mark.slow
def test_a_fresh_clone_rebuilds_the_greek_report_byte_for_byte(tmp_path):
    """``dvc repro -f`` of the report stage in a clone of the committed files (no checkpoint, no
    DVC cache, no tokenized data) gives the committed report, table and figure."""
    clone = tmp_path / "clone"
    files = subprocess.run(["git", "ls-files", "-z", "--", "src", "conf", "data/nt_grc_en", "pipelines/grc",
                            "results/grc/units", "results/grc/report.json", "results/grc/report.md",
                            "results/grc/figures/units.png", ".dvc/config", ".dvcignore", "pyproject.toml"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, clone / name)
    subprocess.run(["git", "init", "-q"], cwd=clone, check=True)
    env = {**os.environ, "PYTHONPATH": str(clone / "src")}
    before = {n: (clone / "results/grc" / n).read_bytes() for n in ("report.json", "report.md", "figures/units.png")}
    status = subprocess.run([sys.executable, "-m", "dvc", "status", "--json", "pipelines/grc/dvc.yaml:report"],
                            cwd=clone, env=env, capture_output=True, text=True)
    assert status.returncode == 0 and json.loads(status.stdout or "{}") == {}, status.stdout + status.stderr
    run = subprocess.run([sys.executable, "-m", "dvc", "repro", "-s", "-f", "pipelines/grc/dvc.yaml:report"],
                         cwd=clone, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    for name, content in before.items():
        assert (clone / "results/grc" / name).read_bytes() == content, name


def test_the_training_curves_of_the_units_are_dvc_plots():
    """``dvc plots show`` draws every unit trained for its profile's budget, an epoch a point."""
    from flexatt.products import done_units

    out = dvc("plots", "show", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)["data"]
    for profile in PROFILES:
        trained = [m for m in done_units(ROOT / "results" / profile / "units").values()
                   if m["kind"] == "train" and m["budget"] == 1.0]
        plot = data[f"pipelines/{profile}/dvc.yaml::dev_bleu_by_epoch"][0]["content"]["data"]["values"]
        assert len(plot) == sum(m["training"]["epochs"] for m in trained) > 0
        assert {row["val_bleu"] for row in plot} and all(float(row["val_bleu"]) >= 0 for row in plot)


def test_flexatt_repro_plans_the_root_pipeline_unless_given_a_long_profiles_stage():
    """``flexatt repro`` with no stage runs what ``dvc repro`` runs without targets: the root
    ``dvc.yaml``, not the long profiles' pipelines; one of their stages is a target by address."""
    from flexatt import schedule

    everything = schedule.plan(force=True, root=ROOT)
    assert everything.order and not [name for name in everything.order if ":" in name]
    report = "pipelines/grc/dvc.yaml:report"
    assert schedule.plan([report], force=True, root=ROOT).order[-1] == report


#: a small plan for the smoke profile's pipeline: two seeds of Global, one fixed window and
#: flexible (whose seed-2 fixed window is chosen from the first seed's units)
SMOKE_PLAN = """seeds: [1, 2]
seeded: [global, flexible]
fixed: [local_m]
others: []
flexible: flexible
parents: [flexible]
"""
#: the smoke profile as a long profile: data folders of its own, two epochs, a short τ search
SMOKE_PARAMS = ["profile=smoke", "filter.out_dir=artifacts/smoke/filter", "filter.metrics_file=results/smoke/filter.json",
                "tokenize.out_dir=artifacts/smoke/tok", "tokenize.metrics_file=results/smoke/tokenize.json",
                "train.epochs=2", "train.lr_halve_from_epoch=1", "train.early_stopping_patience=null", "train.threads=1",
                "logger.enabled=false", "sweep_tau.grid=[1.0]", "sweep_tau.search_steps=1",
                "sweep_tau.add_log_mean_len=false", "sweep_tau.curve_taus=[0.5]"]


@pytest.mark.slow
def test_the_smoke_profile_runs_its_units_end_to_end_through_dvc(tmp_path):
    """The smoke profile as a long profile's pipeline (grc's dvc.yaml on its data, a small plan):
    ``flexatt repro --commit`` of its report trains and decodes every pending unit as DVC stages,
    commits each unit the moment it finishes, frozen, and the report; a second round runs the
    unit the first round's products chose (seed 2's fixed window) and nothing else again."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {**os.environ, "PYTHONPATH": str(clone / "src")}

    def run(*args: str) -> subprocess.CompletedProcess:
        out = subprocess.run([sys.executable, *args], cwd=clone, env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        return out

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=clone, capture_output=True, text=True, check=True).stdout

    git("config", "user.name", "test")
    git("config", "user.email", "test@example.org")
    pipeline = clone / "pipelines" / "smoke"
    # in place of the smoke profile's own pipeline (flexatt.pipeline's, whose outputs are these
    # folders too), and with its results kept in git as a long profile's units are
    shutil.rmtree(pipeline)
    pipeline.mkdir()
    ignore = clone / ".gitignore"
    ignore.write_text("".join(line for line in ignore.read_text().splitlines(keepends=True)
                              if line.strip() != "/results/smoke/"))
    text = (ROOT / "pipelines/grc/dvc.yaml").read_text()
    text = text[:text.index("\nplots:")].replace("data/nt_grc_en", "conf/data/synthetic.yaml").replace("grc", "smoke")
    (pipeline / "dvc.yaml").write_text(text)
    (pipeline / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    (clone / "conf/units/smoke.yaml").write_text(SMOKE_PLAN)
    run("-m", "flexatt.cli", "params", *SMOKE_PARAMS, "--output", "pipelines/smoke/params.yaml")
    run("-m", "flexatt.freeze", "smoke")
    pending = yaml.safe_load((pipeline / "units.yaml").read_text())["pending"]
    assert list(pending) == ["global-s1", "local_m-s1", "flexible-s1", "global-s2", "flexible-s2"]
    assert pending["local_m-s1"]["after"] == "results/smoke/units/flexible-s1"  # matched in its decoding
    git("add", "-A")
    git("commit", "-qm", "the smoke profile's pipeline")

    first = run("-m", "flexatt.cli", "repro", "--commit", "pipelines/smoke/dvc.yaml:report")
    assert "report: done" in first.stdout
    units = yaml.safe_load((pipeline / "units.yaml").read_text())
    assert sorted(units["finished"]) == sorted(pending) and list(units["pending"]) == ["local_m-s2"]
    log = git("log", "--format=%s")
    assert all(f"smoke: unit {name} finished" in log for name in pending)
    from flexatt.products import done_units

    done = done_units(clone / "results/smoke/units")
    assert done["local_m-s1"]["matched_by"]["unit"] == "flexible-s1"
    assert "local_m-s1" in done["flexible-s1"]["summary"]["matched"]
    assert done["global-s1"]["source"]["commit"] and not done["global-s1"]["source"]["uncommitted_edits"]

    second = run("-m", "flexatt.cli", "repro", "--commit", "pipelines/smoke/dvc.yaml:report")
    assert "train@local_m-s2: done" in second.stdout and "train@global-s1" not in second.stdout
    assert not yaml.safe_load((pipeline / "units.yaml").read_text())["pending"]
    status = run("-m", "dvc", "status", "--json", "pipelines/smoke/dvc.yaml")
    changed = {k for k in json.loads(status.stdout or "{}")}
    assert not changed, changed
    assert not git("status", "--porcelain", "--", "results", "pipelines")  # all committed
    report = json.loads((clone / "results/smoke/report.json").read_text())
    assert report


def test_pending_units_pin_their_groups_precision_and_name_what_they_wait_on(tmp_path):
    """The committed ``pending`` list is what :func:`flexatt.freeze.pending_items` writes: a unit at
    its comparison group's precision, a fixed window matched in its decoding to its seed's finished
    flexible unit (a stage dependency), a fine-tuning after its parent's weights; an item once
    listed is kept as it is."""
    from flexatt.products import comparison_group, done_units, parse_unit, read_plan

    pending = yaml.safe_load((ROOT / "pipelines/grc/units.yaml").read_text())["pending"]
    done = done_units(ROOT / "results/grc/units")
    assert freeze.pending_items("grc", done, "artifacts/grc/tok", ROOT) == pending
    ft = read_plan(ROOT / "conf/units/grc.yaml").finetuning
    for item in pending.values():
        unit = parse_unit(item["unit"])
        if unit.kind != "train" and (unit.run > 1 or unit.seed != 1):  # a pair at the selected β: the plan's
            expected = ft.precision
        else:
            group = {m["training"]["precision"] for n, m in done.items()
                     if comparison_group(parse_unit(n)) == comparison_group(unit)}
            assert len(group) == 1, item["unit"]
            expected = group.pop()
        assert f"trainer.precision={expected}" in item["train_options"].split(), item["unit"]
    fixed = next(i for i in pending.values() if parse_unit(i["unit"]).variant.startswith("local_m"))  # a fixed window
    flexible = f"results/grc/units/flexible-s{parse_unit(fixed['unit']).seed}"
    assert fixed["after"] == flexible and f"--match-flexible {flexible}" in fixed["decode_options"]
    assert pending["sact-s2"]["after"] == "artifacts/grc/tok" and pending["sact-s2"]["decode_options"] == ""
    listed = {**pending, "sact-s2": {**pending["sact-s2"], "train_options": "kept"}}
    assert freeze.pending_items("grc", done, "artifacts/grc/tok", ROOT, listed=listed)["sact-s2"]["train_options"] == "kept"
    (tmp_path / "conf/units").mkdir(parents=True)
    (tmp_path / "conf/units/t.yaml").write_text(yaml.safe_dump({
        "seeds": [1], "seeded": ["flexible"], "parents": ["flexible"],
        "finetuning": {"parent": "flexible", "betas": [1.0], "epochs": 1, "pairs": 1}}))
    fresh = freeze.pending_items("t", {}, "artifacts/t/tok", tmp_path)
    assert list(fresh) == ["flexible-s1", "flexible-s1-ctl-r1", "flexible-s1-ft-b1-r1"]
    assert fresh["flexible-s1"]["weights"] == "weights.fp16.pt" and "--keep-weights" in fresh["flexible-s1"]["decode_options"]
    control = fresh["flexible-s1-ctl-r1"]
    assert control["parent"] == "results/t/units/flexible-s1/weights.fp16.pt"
    assert f"--parent {control['parent']}" in control["train_options"] and control["weights"] == "model.pt"
