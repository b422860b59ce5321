"""Every profile's DVC pipeline (``pipelines/<profile>/``) is what ``flexatt pipeline`` makes of
the root ``dvc.yaml`` and ``conf/``: a change to either cannot leave a profile's pipeline behind
(run ``flexatt pipeline smoke char paper``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flexatt import pipeline

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = sorted(p.parent.name for p in ROOT.glob("pipelines/*/dvc.yaml") if pipeline.generated(p, p.parent.name))
#: the generated pipelines of the short profiles (the root's stages) and of the long profiles that
#: read another's data (its units)
GENERATED = [p for p in PIPELINES if pipeline.base_of(p, ROOT) is None]
DERIVED = [p for p in PIPELINES if p not in GENERATED]


def test_the_short_profiles_have_generated_pipelines():
    assert GENERATED == ["char", "paper", "smoke"]
    assert DERIVED == ["bible_tf", "grc_tf"]


@pytest.mark.parametrize("profile", DERIVED)
def test_a_derived_pipeline_runs_its_bases_units_on_its_bases_data(profile):
    """The base's stages but its data stages, each with the profile's params file, results, training
    folders and plan; the data they read is the base's (one tokenize stage makes it, in the base's
    pipeline); no output of the base's pipeline is the profile's."""
    base = pipeline.base_of(profile, ROOT)
    theirs = yaml.safe_load((ROOT / "pipelines" / base / "dvc.yaml").read_text(encoding="utf-8"))
    ours = yaml.safe_load((ROOT / "pipelines" / profile / "dvc.yaml").read_text(encoding="utf-8"))
    assert list(ours["stages"]) == [s for s in theirs["stages"] if s not in pipeline.DATA_STAGES]
    params = yaml.safe_load((ROOT / "pipelines" / profile / "params.yaml").read_text(encoding="utf-8"))
    assert params["profile"] == profile and params["train"]["data_dir"] == f"artifacts/{base}/tok"

    def outs(spec):
        return {next(iter(o)) if isinstance(o, dict) else o for s in spec["stages"].values()
                for o in s.get("do", s).get("outs", []) + s.get("do", s).get("metrics", [])}

    assert not outs(ours) & outs(theirs)
    for name, spec in ours["stages"].items():
        do = spec.get("do", spec)
        assert do["cmd"].startswith(f"FLEXATT_PARAMS=pipelines/{profile}/params.yaml "), name
        assert list(do["params"][0]) == [f"pipelines/{profile}/params.yaml"], name
        assert f"/{base}/units" not in do["cmd"] and f"conf/units/{base}.yaml" not in do.get("deps", []), name
    assert f"conf/units/{profile}.yaml" in ours["stages"]["report"]["deps"]
    finished = (yaml.safe_load((ROOT / "pipelines" / profile / "units.yaml").read_text(encoding="utf-8"))["finished"]
                or {})
    from flexatt.products import parse_unit

    trained = [i["unit"] for i in finished.values() if parse_unit(i["unit"]).kind == "train"
               and parse_unit(i["unit"]).budget == 1.0]
    assert ("plots" in ours) == bool(trained)  # the dev BLEU curves of its units, once there are some


def test_dvc_sees_a_derived_pipelines_units_after_its_bases_tokenize():
    """``dvc`` builds one graph of every pipeline: a derived profile's unit depends on the stage of
    the base's pipeline that writes its data."""
    from dvc.repo import Repo

    pending = next(iter(yaml.safe_load((ROOT / "pipelines/grc_tf/units.yaml").read_text(encoding="utf-8"))["pending"]))
    with Repo(str(ROOT)) as repo:
        graph = repo.index.graph
        stage = next(s for s in graph if s.addressing == f"pipelines/grc_tf/dvc.yaml:train@{pending}")
        upstream = {s.addressing for s in __import__("networkx").descendants(graph, stage)}
    assert "pipelines/grc/dvc.yaml:tokenize" in upstream


@pytest.mark.parametrize("profile", GENERATED + DERIVED)
def test_committed_pipeline_is_what_the_generator_writes(profile):
    dvc_yaml, params = pipeline.generate(profile, ROOT)
    folder = ROOT / "pipelines" / profile
    assert (folder / "dvc.yaml").read_text(encoding="utf-8") == dvc_yaml, f"run `flexatt pipeline {profile}`"
    assert (folder / "params.yaml").read_text(encoding="utf-8") == params, f"run `flexatt pipeline {profile}`"


@pytest.mark.parametrize("profile", GENERATED)
def test_every_root_stage_runs_with_the_profiles_params_at_the_root(profile):
    """The root's stages, each at the repository root with the profile's params file, the same
    deps and outputs; the outputs resolve (params.yaml beside dvc.yaml) under the profile's folders."""
    root = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    ours = yaml.safe_load((ROOT / "pipelines" / profile / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    assert list(ours) == list(root)
    params_file = f"pipelines/{profile}/params.yaml"
    for name, spec in root.items():
        theirs, mine = spec.get("do", spec), ours[name].get("do", ours[name])
        assert ours[name].get("foreach") == spec.get("foreach")
        assert mine["wdir"] == "../.."
        assert mine["cmd"] == f"FLEXATT_PARAMS={params_file} {theirs['cmd']}"
        assert mine["params"] == [{params_file: theirs["params"]}]
        assert mine.get("deps") == theirs.get("deps") and mine.get("metrics") == theirs.get("metrics"), name
        plots = [{next(iter(p)) if isinstance(p, dict) else p: {"cache": False}} for p in theirs.get("plots", [])]
        assert mine.get("outs", []) == theirs.get("outs", []) + plots, name  # plots kept as plain outputs
        assert "plots" not in mine
    params = yaml.safe_load((ROOT / "pipelines" / profile / "params.yaml").read_text(encoding="utf-8"))
    assert params["profile"] == profile
    assert params["train"]["out_dir"] == f"artifacts/{profile}/models"
    assert params["evaluate"]["table"] == f"results/{profile}/table1.md"


@pytest.mark.parametrize("profile", GENERATED)
def test_a_profile_pipeline_declares_no_plot(profile):
    """``dvc plots show`` draws every pipeline's declared plots: a profile not yet run would add
    blank charts, so its pipeline declares none (its plot files are outputs all the same)."""
    text = (ROOT / "pipelines" / profile / "dvc.yaml").read_text(encoding="utf-8")
    assert "plots" not in yaml.safe_load(text) and "\n      plots:" not in text and "\n    plots:" not in text


@pytest.mark.parametrize("profile, message", [
    ("nope", "no profile 'nope' in conf/profile/"),
    ("default", "the root dvc.yaml"),
    ("bible", "written by hand"),
])
def test_what_is_not_a_generated_profile_is_refused_by_name(profile, message, capsys):
    assert pipeline.main([profile], root=ROOT) == 2
    assert message in capsys.readouterr().err


def test_a_profile_whose_outputs_are_not_its_own_is_refused(tmp_path):
    """Without ``paths`` of its own a profile's outputs would be the default pipeline's."""
    import shutil

    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    shutil.copy(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    text = (tmp_path / "conf/profile/paper.yaml").read_text(encoding="utf-8")
    (tmp_path / "conf/profile/paper.yaml").write_text(text.replace("artifacts/paper", "artifacts"), encoding="utf-8")
    with pytest.raises(pipeline.ConfigError, match=r"paths.artifacts: conf/profile/paper.yaml must set it to artifacts/paper"):
        pipeline.generate("paper", tmp_path)


def test_check_names_a_stale_pipeline(tmp_path, capsys):
    import shutil

    for rel in ("conf", "pipelines/smoke"):
        shutil.copytree(ROOT / rel, tmp_path / rel)
    shutil.copy(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    assert pipeline.main(["smoke"], check=True, root=tmp_path) == 0
    (tmp_path / "dvc.yaml").write_text((ROOT / "dvc.yaml").read_text(encoding="utf-8").replace(
        "python -m flexatt.stages.filter", "python -m flexatt.stages.filter --changed"), encoding="utf-8")
    assert pipeline.main(["smoke"], check=True, root=tmp_path) == 1
    assert "pipelines/smoke/dvc.yaml" in capsys.readouterr().err


def test_flexatt_repro_takes_a_profiles_pipeline_file_for_all_its_stages():
    """``flexatt repro pipelines/smoke/dvc.yaml`` (``make smoke``) plans every stage of that
    pipeline and nothing of another; a file that is no pipeline is refused by name."""
    from flexatt.schedule import plan

    stages = yaml.safe_load((ROOT / "pipelines/smoke/dvc.yaml").read_text(encoding="utf-8"))["stages"]
    variants = yaml.safe_load((ROOT / "pipelines/smoke/params.yaml").read_text(encoding="utf-8"))["variants"]
    finetuned = yaml.safe_load((ROOT / "pipelines/smoke/params.yaml").read_text(encoding="utf-8"))["finetune"]["variants"]
    expected = {f"pipelines/smoke/dvc.yaml:{name}" for name in stages if "foreach" not in stages[name]}
    expected |= {f"pipelines/smoke/dvc.yaml:train@{v}" for v in variants}
    expected |= {f"pipelines/smoke/dvc.yaml:{s}@{v}" for s in ("finetune", "control") for v in finetuned}
    assert set(plan(["pipelines/smoke/dvc.yaml"], force=True, root=ROOT).order) == expected
    with pytest.raises(ValueError, match="no such stage: pipelines/nope/dvc.yaml"):
        plan(["pipelines/nope/dvc.yaml"], root=ROOT)
