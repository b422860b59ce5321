"""Every DVC stage lists, in its ``deps``, exactly the package files its code runs.

A file missing from a stage's ``deps`` lets a change leave committed results stale while
``dvc status`` says all is up to date; a listed file the stage does not run re-runs it for nothing.

"The files a stage runs" is :func:`flexatt.provenance.code_files` of every ``flexatt`` module
named by ``python -m flexatt....`` in the stage's ``cmd`` (a ``foreach`` stage by its ``do``
template): the import closure, with the rules in that module's docstring (the same closure makes
a training run's resume fingerprint). Only the ``src/...`` entries of ``deps`` are compared; data
and artifact deps are left alone.

Run this file as a script to check another version of ``dvc.yaml`` against the current sources,
e.g. ``git show HEAD~3:dvc.yaml | python tests/test_dvc_deps.py -`` (exit status 1 on a problem).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from flexatt import provenance
from flexatt.provenance import module_file, runs_code

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "src/flexatt/decoding/kernel.py"
STAGE_CMD = re.compile(r"python[0-9.]*\s+-m\s+(flexatt(?:\.\w+)*)")


def rel(path: Path) -> str:
    """``path`` relative to the repository root, with ``/`` (as dvc.yaml writes it)."""
    return path.relative_to(ROOT).as_posix()


def kernel_sources() -> set[str]:
    return {rel(p) for p in provenance.kernel_sources()}


def closure(*modules: str) -> set[str]:
    """Repository-relative paths of :func:`flexatt.provenance.code_files`."""
    return {rel(p) for p in provenance.code_files(*modules)}


def load_stages(text: str) -> dict[str, dict]:
    """The stages of a dvc.yaml text (a ``foreach`` stage by its ``do`` template)."""
    raw = (yaml.safe_load(text) or {}).get("stages") or {}
    return {name: spec.get("do", spec) for name, spec in raw.items()}


def stages() -> dict[str, dict]:
    return load_stages((ROOT / "dvc.yaml").read_text(encoding="utf-8"))


def check(stage: str, spec: dict) -> list[str]:
    """The problems of one stage's ``deps``, each naming the stage and the file (empty: none)."""
    cmd = spec.get("cmd", "")
    cmd = " && ".join(cmd) if isinstance(cmd, list) else str(cmd)
    modules = STAGE_CMD.findall(cmd)
    if not modules:
        return [f"{stage}: cmd runs no `python -m flexatt...` module, so its code deps cannot be "
                f"checked: {cmd!r}"]
    missing_modules = [m for m in modules if module_file(m) is None]
    if missing_modules:
        return [f"{stage}: cmd runs {m}, which has no file under src/" for m in missing_modules]
    needed = closure(*modules)
    deps = [d for d in spec.get("deps") or [] if isinstance(d, str)]
    listed = [d.removeprefix("./").rstrip("/") for d in deps if d.removeprefix("./").startswith("src/")]
    problems = [f"{stage}: deps list {f} more than once" for f in sorted({d for d in listed if listed.count(d) > 1})]
    folders = {d: folder_files(d) for d in listed if (ROOT / d).is_dir()}
    covered = {f for d in listed if d not in folders for f in [d]} | {f for files in folders.values() for f in files}
    problems += [f"{stage}: deps miss {f} (the stage runs it)" for f in sorted(needed - covered)]
    problems += [f"{stage}: deps list {f}, which the stage does not run" for f in sorted(covered - needed)]
    return problems


def folder_files(folder: str) -> set[str]:
    """The files DVC hashes for a folder in ``deps`` (``__pycache__`` is in ``.dvcignore``)."""
    return {rel(p) for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def check_all(all_stages: dict[str, dict]) -> list[str]:
    return [problem for name, spec in all_stages.items() for problem in check(name, spec)]


# --------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("stage", sorted(stages()))
def test_stage_deps_are_the_import_closure_of_its_module(stage):
    problems = check(stage, stages()[stage])
    assert not problems, ("\n".join(problems) + "\n(edit the `deps` of this stage in dvc.yaml; "
                          "for a foreach stage, its `do:` template)")


def test_the_check_catches_a_missing_and_a_stale_dependency():
    spec = dict(stages()["sweep_tau"])
    deps = [d for d in spec["deps"] if d != "src/flexatt/metrics.py"] + ["src/flexatt/stages/filter.py"]
    problems = check("sweep_tau", {**spec, "deps": deps})
    assert problems == ["sweep_tau: deps miss src/flexatt/metrics.py (the stage runs it)",
                        "sweep_tau: deps list src/flexatt/stages/filter.py, which the stage does not run"]


def test_the_check_names_a_duplicate_and_a_cmd_it_cannot_read():
    spec = dict(stages()["filter"])
    twice = check("filter", {**spec, "deps": [*spec["deps"], "src/flexatt/io.py"]})
    assert twice == ["filter: deps list src/flexatt/io.py more than once"]
    assert check("x", {"cmd": "python scripts/x.py", "deps": []})[0].startswith("x: cmd runs no")
    assert check("x", {"cmd": "python -m flexatt.stages.nope", "deps": []}) == [
        "x: cmd runs flexatt.stages.nope, which has no file under src/"]


def test_closure_follows_transitive_and_submodule_imports():
    files = closure("flexatt.stages.evaluate")
    # evaluate -> evaluation -> checkpoints, model -> attention, variants/; the kernel via decoding/kernel.py
    assert {"src/flexatt/attention/__init__.py", "src/flexatt/attention/flexible.py",
            "src/flexatt/checkpoints.py", "src/flexatt/data/subwords.py",
            "src/flexatt/__init__.py", "src/flexatt/variants/__init__.py", *kernel_sources()} <= files
    # decoding does not run the training code, nor another stage
    assert not {"src/flexatt/trainer.py", "src/flexatt/task.py", "src/flexatt/stages/filter.py",
                "src/flexatt/stages/sweep_tau.py"} & files
    # empty package __init__ files run no code and are not deps
    for init in ("src/flexatt/data/__init__.py", "src/flexatt/stages/__init__.py"):
        if (ROOT / init).is_file() and not runs_code(ROOT / init):
            assert init not in files


def test_a_stage_without_the_variants_folder_is_told_to_list_it():
    spec = dict(stages()["evaluate"])
    deps = [d for d in spec["deps"] if d != "src/flexatt/variants"]
    assert check("evaluate", {**spec, "deps": deps}) == [
        "evaluate: deps miss src/flexatt/variants/__init__.py (the stage runs it)"]


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """A copy of src/flexatt that :mod:`flexatt.provenance` reads instead of the real one."""
    import shutil

    src = tmp_path / "src"
    shutil.copytree(ROOT / "src/flexatt", src / "flexatt", ignore=shutil.ignore_patterns("__pycache__"))
    package = src / "flexatt"
    for name, value in {"SRC": src, "PACKAGE_DIR": package, "KERNEL": package / "decoding" / "kernel.py",
                        "CSRC": package / "csrc", "VARIANTS_DIR": package / "variants"}.items():
        monkeypatch.setattr(provenance, name, value)
    return package


def test_resume_fingerprint_changes_exactly_with_the_files_of_the_stage(package_copy, monkeypatch):
    """The fingerprint of a training run hashes the import closure of the trainer and of the stage
    it runs: the files dvc.yaml lists for train@*. A new variant module, an edited attention or
    kernel changes it; an edit to another stage's module does not."""
    import types

    from flexatt import trainer

    monkeypatch.setattr(sys.modules["__main__"], "__spec__", types.SimpleNamespace(name="flexatt.stages.train"),
                        raising=False)
    files = provenance.code_files("flexatt.trainer", "flexatt.stages.train")
    listed = [d for d in stages()["train"]["deps"] if d.startswith("src/")]
    listed = {f for d in listed for f in (folder_files(d) if (ROOT / d).is_dir() else [d])}
    assert {f.relative_to(package_copy.parent).as_posix() for f in files} == {f.removeprefix("src/") for f in listed}
    before = trainer._code_digest()
    assert before == provenance.code_digest("flexatt.trainer", "flexatt.stages.train")
    (package_copy / "stages/filter.py").write_text("# another stage\n", encoding="utf-8")
    assert trainer._code_digest() == before
    for edit in ("variants/extra.py", "attention/flexible.py", "csrc/fused_decode.cpp"):
        path = package_copy / edit
        line = "EDITED = 1" if path.suffix == ".py" else "// edited"
        path.write_text((path.read_text(encoding="utf-8") if path.exists() else "") + f"\n{line}\n",
                        encoding="utf-8")
        after = trainer._code_digest()
        assert after != before, edit
        before = after


def test_the_kernel_backend_still_builds_from_csrc():
    """The kernel rule rests on decoding/kernel.py compiling csrc/; fail here if that ever changes."""
    assert kernel_sources(), "src/flexatt/csrc/ holds no C/C++ source"
    assert "csrc" in (ROOT / KERNEL).read_text(encoding="utf-8")


def main(argv: list[str]) -> int:
    """``python tests/test_dvc_deps.py [DVC_YAML | -]``: print every problem; exit 1 if any."""
    source = argv[0] if argv else str(ROOT / "dvc.yaml")
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    problems = check_all(load_stages(text))
    print("\n".join(problems) if problems else "dvc.yaml deps agree with the import closures")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
