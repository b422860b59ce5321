"""scripts/profile_run.py: which files a scratch copy gets, which results it hands back.
(The whole pipeline in a copy runs in tests/test_pipeline.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import profile_run  # noqa: E402


def test_unknown_profile_is_refused_by_name(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "scripts/profile_run.py"), "nope", "--keep", str(tmp_path / "c")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "no profile 'nope' in conf/profile/" in result.stderr
    assert not (tmp_path / "c").exists()


def test_a_non_empty_folder_that_is_not_a_copy_is_refused(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "mine.txt").write_text("x")
    result = subprocess.run([sys.executable, str(ROOT / "scripts/profile_run.py"), "smoke", "--keep", str(tmp_path / "c")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "is not empty (and not a kept copy of the smoke profile)" in result.stderr
    assert (tmp_path / "c" / "mine.txt").read_text() == "x"


def test_copy_without_results_then_refresh(tmp_path):
    """Another profile's copy leaves out this tree's dvc.lock and results/, composes its params;
    a second make_copy over it (a resumed run) keeps what the copy made."""
    copy = tmp_path / "c"
    profile_run.make_copy(copy, ["profile=char"], results=False)
    assert not (copy / "dvc.lock").exists() and not (copy / "results").exists()
    assert (copy / "dvc.yaml").is_file() and (copy / "src/flexatt/model.py").is_file()
    assert profile_run.profile_of(copy) == "char"
    assert yaml.safe_load((copy / "params.yaml").read_text())["tokenize"]["model_type"] == "char"
    (copy / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    profile_run.make_copy(copy, ["profile=char"], results=False)
    assert (copy / "dvc.lock").read_text() == "schema: '2.0'\nstages: {}\n"
    log = subprocess.run(["git", "log", "--oneline"], cwd=copy, capture_output=True, text=True, check=True).stdout
    assert len(log.splitlines()) == 2
    assert profile_run.profile_of(tmp_path) is None


def test_copy_results_takes_only_the_outputs_the_lock_lists(tmp_path):
    copy, dest = tmp_path / "copy", tmp_path / "results_char"
    lock = {"schema": "2.0", "stages": {
        "tokenize": {"cmd": "x", "outs": [{"path": "artifacts/tok"}, {"path": "results/tokenize.json"}]},
        "train@global": {"cmd": "x", "outs": [{"path": "results/train/global.json"},
                                              {"path": "results/train/global.csv"}]},
        "evaluate": {"cmd": "x", "outs": [{"path": "results/figures/evaluate"}]}}}
    (copy / "results/train").mkdir(parents=True)
    (copy / "results/figures/evaluate").mkdir(parents=True)
    (copy / "artifacts/tok").mkdir(parents=True)
    (copy / "dvc.lock").write_text(yaml.safe_dump(lock))
    for rel in ("results/tokenize.json", "results/train/global.json", "results/train/global.csv",
                "results/train/local_m.json", "results/figures/evaluate/a.png", "artifacts/tok/x.npz"):
        (copy / rel).write_text(rel)
    (dest / "train").mkdir(parents=True)
    (dest / "stale.json").write_text("old")
    (dest / "train/stale.json").write_text("old")
    copied = profile_run.copy_results(copy, dest)
    assert copied == ["figures/evaluate/a.png", "tokenize.json", "train/global.csv", "train/global.json"]
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == sorted(
        [*copied, "dvc.lock"])
    assert (dest / "train/global.json").read_text() == "results/train/global.json"


def test_copy_results_of_the_stages_this_run_did(tmp_path):
    """With ``stages``, only those stages' outputs and lock entries: a lock restored from an
    earlier run still lists stages this run has yet to make again, and their files stay out."""
    copy, dest = tmp_path / "copy", tmp_path / "results"
    lock = {"schema": "2.0", "stages": {
        "train@flexible": {"cmd": "x", "outs": [{"path": "results/train/flexible.json", "md5": "new"}]},
        "train@global": {"cmd": "x", "outs": [{"path": "results/train/global.json", "md5": "old"}]}}}
    (copy / "results/train").mkdir(parents=True)
    (copy / "dvc.lock").write_text(yaml.safe_dump(lock))
    for name in ("flexible", "global"):
        (copy / f"results/train/{name}.json").write_text(name)
    (dest / "train").mkdir(parents=True)
    (dest / "train/global.json").write_text("an earlier run's")
    assert profile_run.copy_results(copy, dest, ["train@flexible"]) == ["train/flexible.json"]
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == [
        "dvc.lock", "train/flexible.json"]
    written = yaml.safe_load((dest / "dvc.lock").read_text())
    assert written == {"schema": "2.0", "stages": {"train@flexible": lock["stages"]["train@flexible"]}}


@pytest.mark.parametrize("script", ["profile_run.py", "smoke.py"])
def test_help(script):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--help"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and "--keep" in result.stdout and "--targets" in result.stdout


def test_a_run_in_several_invocations_keeps_the_stages_its_earlier_ones_did(tmp_path):
    """--targets A, then --targets B: B's invocation lists A's stages too, those its copy's lock
    holds, in their order and once; an earlier run of other code lists none."""
    (tmp_path / "results").mkdir()
    (tmp_path / "copy").mkdir()
    (tmp_path / "results/provenance.json").write_text(json.dumps(
        {"commit": "abc", "stages_done": ["filter", "tokenize", "train@global", "tokenize", "train@lost"]}))
    (tmp_path / "copy/dvc.lock").write_text(yaml.safe_dump(
        {"schema": "2.0", "stages": {name: {"cmd": "true"} for name in ("filter", "tokenize", "train@global")}}))
    earlier = profile_run.earlier_stages(tmp_path / "results", tmp_path / "copy", {"commit": "abc"})
    assert earlier == ["filter", "tokenize", "train@global"]
    assert profile_run.earlier_stages(tmp_path / "results", tmp_path / "copy", {"commit": "def"}) == []
    assert profile_run.earlier_stages(tmp_path / "none", tmp_path / "copy", {"commit": "abc"}) == []


def test_needed_stages_joins_the_ancestors_of_every_target(tmp_path):
    """Two targets with different ancestors: both chains are run, and nothing else (``dvc dag``
    itself takes a single target)."""
    stages = {name: {"cmd": "true", "deps": [dep], "outs": [out]} for name, dep, out in [
        ("a", "in.txt", "a.txt"), ("b", "a.txt", "b.txt"), ("c", "in.txt", "c.txt"), ("d", "c.txt", "d.txt"),
        ("e", "in.txt", "e.txt")]}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    assert profile_run.run_dvc(tmp_path, "init", "-q").returncode == 0
    assert profile_run.needed_stages(tmp_path, ["b", "d"]) == {"a", "b", "c", "d"}
    assert profile_run.needed_stages(tmp_path, ["b"]) == {"a", "b"}


@pytest.mark.slow
def test_a_stepwise_run_hands_back_each_stage_and_resumes_from_the_cache(tmp_path):
    """--stepwise --results copies the results and the provenance after every stage; a new copy
    (the old one lost with its machine) with the same --cache and --results skips what was done."""
    run = [sys.executable, str(ROOT / "scripts/profile_run.py"), "smoke", "--cache", str(tmp_path / "cache"),
           "--results", str(tmp_path / "r"), "--stepwise", "--targets", "train@global"]
    first = subprocess.run([*run, "--keep", str(tmp_path / "c1")], capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    provenance = json.loads((tmp_path / "r/provenance.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert provenance["commit"] == head and provenance["profile"] == "smoke"
    assert provenance["stages_done"] == ["filter", "tokenize", "train@global"]
    minutes = provenance["stage_minutes"]
    assert set(minutes) == {"filter", "tokenize", "train@global"} and all(m >= 0 for m in minutes.values())
    assert provenance["running"] is None and provenance["resumed_stages"] == []
    trained = (tmp_path / "r/train/global.json").read_text()
    assert set(yaml.safe_load((tmp_path / "r/dvc.lock").read_text())["stages"]) == {"filter", "tokenize",
                                                                                     "train@global"}
    assert any((tmp_path / "cache").rglob("*")) and not (tmp_path / "c1/.dvc/cache").exists()

    second = subprocess.run([*run, "--keep", str(tmp_path / "c2")], capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resuming from" in second.stdout
    assert "Running stage" not in second.stdout + second.stderr  # nothing ran again
    assert (tmp_path / "r/train/global.json").read_text() == trained
    assert json.loads((tmp_path / "r/provenance.json").read_text())["stage_minutes"] == minutes  # kept
    assert (tmp_path / "c2/artifacts/models/global/best.ckpt").is_file()  # checked out of the cache


def test_the_copy_runs_its_own_snapshot_of_the_code(tmp_path):
    """A stage in the copy imports the copy's src/, not the editable install's working tree."""
    copy = tmp_path / "c"
    profile_run.make_copy(copy, ["profile=smoke"], results=False)
    _, env = profile_run.dvc_env(copy)
    where = subprocess.run([sys.executable, "-c", "import flexatt; print(flexatt.__file__)"], cwd=copy, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where == str((copy / "src/flexatt/__init__.py").resolve())


def test_the_stage_clock_keeps_minutes_across_resumed_runs(tmp_path, monkeypatch):
    """Minutes are recorded for a stage that ran, kept for one that was up to date, and a stage
    left running by an interrupted run is listed as resumed."""
    now = [100.0]
    monkeypatch.setattr(profile_run.time, "monotonic", lambda: now[0])
    clock = profile_run.StageClock(tmp_path)  # no provenance yet
    clock.start("train@global")
    assert clock.record()["running"]["stage"] == "train@global"
    for _ in range(8):  # 8 ticks of 15 s
        now[0] += 15.0
        clock.tick()
    assert clock.record()["running"]["minutes"] == 2.0
    clock.stop(ran=True)
    assert clock.record() == {"stage_minutes": {"train@global": 2.0}, "resumed_stages": [],
                              "interrupted_minutes": {}, "running": None}
    clock.start("train@global")
    now[0] += 30.0
    clock.stop(ran=False)  # up to date: the minutes of the run that made it stay
    assert clock.record()["stage_minutes"] == {"train@global": 2.0}

    (tmp_path / "provenance.json").write_text(json.dumps(
        {"stage_minutes": {"filter": 0.5}, "running": {"stage": "train@flexible", "since": "2026-01-01T00:00:00"}}))
    resumed = profile_run.StageClock(tmp_path)  # left by a run that did not record its minutes
    assert resumed.record() == {"stage_minutes": {"filter": 0.5}, "resumed_stages": ["train@flexible"],
                                "interrupted_minutes": {}, "running": None}


def test_the_stage_clock_adds_the_interrupted_runs_and_skips_held_time(tmp_path, monkeypatch):
    """A stage cut off twice and finished by a third run is counted over all three; time while
    the processes were held (no tick for ten minutes) counts as one tick's gap at most."""
    now = [0.0]
    monkeypatch.setattr(profile_run.time, "monotonic", lambda: now[0])

    origin = {"commit": "a" * 40, "overrides": ["profile=bible"]}

    def run(minutes: float, finish: bool) -> dict:
        clock = profile_run.StageClock(tmp_path)
        clock.start("sweep_beta", origin)
        for _ in range(int(minutes * 4)):
            now[0] += 15.0
            clock.tick()
        if finish:
            clock.stop(ran=True)
        profile_run.write_provenance(tmp_path, "bible", [], [], {"commit": None}, clock)
        return json.loads((tmp_path / "provenance.json").read_text())

    assert run(3.0, finish=False)["running"]["minutes"] == 3.0  # cut off here
    second = run(2.0, finish=False)
    assert second["running"]["minutes"] == 5.0 and second["interrupted_minutes"] == {"sweep_beta": 3.0}

    clock = profile_run.StageClock(tmp_path)
    clock.start("sweep_beta", origin)
    now[0] += 15.0
    clock.tick()
    now[0] += 600.0  # held (SIGSTOP) for ten minutes
    clock.tick()
    now[0] += 15.0
    clock.stop(ran=True)
    record = clock.record()
    assert record["stage_minutes"] == {"sweep_beta": 5.0 + (15 + 30 + 15) / 60}
    assert record["resumed_stages"] == ["sweep_beta"] and record["interrupted_minutes"] == {"sweep_beta": 5.0}


@pytest.mark.parametrize("changed", ["commit", "overrides"])
def test_minutes_of_a_run_with_other_code_or_overrides_are_not_carried(tmp_path, monkeypatch, changed):
    """A stage taken up again by a run of another commit or other overrides may start its work
    over (a training's fingerprint names its code and settings): the interrupted run's minutes are
    not added; the stage is still listed as resumed."""
    monkeypatch.setattr(profile_run.time, "monotonic", lambda: 0.0)
    before = {"commit": "a" * 40, "overrides": ["profile=grc"]}
    (tmp_path / "provenance.json").write_text(json.dumps(
        {"stage_minutes": {}, "running": {"stage": "train@flexible", "since": "x", "minutes": 26.0,
                                          "origin": before}}))
    after = {**before, changed: "b" * 40 if changed == "commit" else ["profile=grc", "train.epochs=60"]}
    clock = profile_run.StageClock(tmp_path)
    clock.start("train@flexible", after)
    clock.stop(ran=True)
    record = clock.record()
    assert record["stage_minutes"] == {"train@flexible": 0.0} and record["interrupted_minutes"] == {}
    assert record["resumed_stages"] == ["train@flexible"]


def test_a_stage_finished_but_not_recorded_keeps_the_minutes_it_had(tmp_path, monkeypatch):
    """A run cut off after DVC finished a stage but before it wrote the minutes: the next run
    finds the stage up to date and records what the interrupted run had counted."""
    monkeypatch.setattr(profile_run.time, "monotonic", lambda: 0.0)
    origin = {"commit": "a" * 40, "overrides": ["profile=bible"]}
    (tmp_path / "provenance.json").write_text(json.dumps(
        {"stage_minutes": {}, "running": {"stage": "evaluate", "since": "x", "minutes": 7.5, "origin": origin}}))
    clock = profile_run.StageClock(tmp_path)
    clock.start("evaluate", origin)
    clock.stop(ran=False)
    assert clock.record()["stage_minutes"] == {"evaluate": 7.5}


def test_a_stage_that_runs_again_from_its_start_drops_the_earlier_runs_record(tmp_path, monkeypatch):
    """A finished stage that an earlier run had resumed (its interrupted minutes part of its
    total) runs again from its start (new code): it gets this run's minutes only and is no longer
    listed as resumed; a stage that stays up to date keeps its record."""
    now = [0.0]
    monkeypatch.setattr(profile_run.time, "monotonic", lambda: now[0])
    (tmp_path / "provenance.json").write_text(json.dumps(
        {"stage_minutes": {"sweep_beta": 183.8, "train@global": 35.7}, "resumed_stages": ["sweep_beta", "train@global"],
         "interrupted_minutes": {"sweep_beta": 43.0, "train@global": 5.0}, "running": None}))
    clock = profile_run.StageClock(tmp_path)
    clock.start("sweep_beta", {"commit": "b" * 40, "overrides": []})
    for _ in range(8):
        now[0] += 15.0
        clock.tick()
    clock.stop(ran=True)
    clock.start("train@global", {"commit": "b" * 40, "overrides": []})
    clock.stop(ran=False)
    record = clock.record()
    assert record["stage_minutes"] == {"sweep_beta": 2.0, "train@global": 35.7}
    assert record["resumed_stages"] == ["train@global"] and record["interrupted_minutes"] == {"train@global": 5.0}


def test_minutes_of_another_machine_are_not_carried(tmp_path):
    """A run on another kind of machine starts an empty clock; on the same machine it carries on."""
    here = {"cpu": "AMD EPYC", "simd": "AVX512", "native_bf16": True}
    (tmp_path / "provenance.json").write_text(json.dumps(
        {"stage_minutes": {"train@flexible": 87.2}, "resumed_stages": ["train@flexible"],
         "interrupted_minutes": {}, "running": {"stage": "train@local_p", "minutes": 12.0},
         "machine": {**here, "simd": "AVX2", "native_bf16": False}}))
    assert profile_run.StageClock(tmp_path, here).record() == {
        "stage_minutes": {}, "resumed_stages": [], "interrupted_minutes": {}, "running": None}
    carried = profile_run.StageClock(tmp_path, {**here, "simd": "AVX2", "native_bf16": False}).record()
    assert carried["stage_minutes"] == {"train@flexible": 87.2}
    assert carried["resumed_stages"] == ["train@flexible", "train@local_p"]


def test_run_counted_ticks_and_saves_while_the_command_runs(tmp_path, monkeypatch):
    """The stage's command runs to its end; the clock ticks and the provenance is saved meanwhile."""
    monkeypatch.setattr(profile_run.StageClock, "TICK", 0.05)
    monkeypatch.setattr(profile_run.StageClock, "SAVE_EVERY", 0.1)
    clock = profile_run.StageClock(None)
    clock.start("x")
    saves = []
    code = profile_run.run_counted([sys.executable, "-c", "import time; time.sleep(0.6); raise SystemExit(3)"],
                                   tmp_path, dict(os.environ), clock, lambda: saves.append(clock.record()))
    assert code == 3
    assert saves and saves[-1]["running"]["minutes"] >= 0
    assert clock.running["seconds"] >= 0.4


def test_the_provenance_names_the_tree_the_copy_was_made_from(tmp_path, monkeypatch):
    """Recomposing params.yaml (the beta the sweep chose) copies no file: the copy keeps the code
    it was made with; the provenance is the tree's state at that time, passed in, not read again."""
    copy = tmp_path / "c"
    profile_run.make_copy(copy, ["profile=smoke"], results=False)

    def no_files(root):
        raise AssertionError("files copied again")

    monkeypatch.setattr(profile_run, "tracked_files", no_files)
    profile_run.make_copy(copy, ["profile=smoke", "finetune.beta=10.0"], results=False, files=False)
    assert yaml.safe_load((copy / "params.yaml").read_text())["finetune"]["beta"] == 10.0
    source = {"commit": "0" * 40, "uncommitted_edits": False}
    record = profile_run.provenance("smoke", ["profile=smoke"], ["filter"], source)
    assert record["commit"] == "0" * 40 and record["stages_done"] == ["filter"] and "stage_minutes" not in record
