"""Every DVC stage lists, in its ``deps``, exactly the package files its code runs, as
``scripts/dvc_deps.py`` writes them.

A file missing from a stage's ``deps`` lets a change leave committed results stale while
``dvc status`` says all is up to date; a listed file the stage does not run re-runs it for nothing.

"The files a stage runs" is :func:`flexatt.provenance.code_files` of every ``flexatt`` module
named by ``python -m flexatt....`` in the stage's ``cmd`` (a ``foreach`` stage by its ``do``
template): the import closure, with the rules in that module's docstring (the same closure makes
a training run's resume fingerprint). ``scripts/dvc_deps.py`` writes the ``src/...`` entries of
``deps`` from it; data and artifact deps are left alone. These tests check that the committed
``dvc.yaml`` is what the script writes, and the script's rules.

Another version of ``dvc.yaml`` is checked by the script itself, e.g.
``git show HEAD~3:dvc.yaml | python scripts/dvc_deps.py --check -`` (exit status 1 on a problem).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_script
from flexatt import provenance
from flexatt.provenance import runs_code

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "src/flexatt/decoding/kernel.py"
dvc_deps = load_script("dvc_deps")
check, closure, folder_files, kernel_sources = (dvc_deps.check, dvc_deps.closure, dvc_deps.folder_files,
                                                 dvc_deps.kernel_sources)


def dvc_yaml() -> str:
    return (ROOT / "dvc.yaml").read_text(encoding="utf-8")


def stages() -> dict[str, dict]:
    return dvc_deps.load_stages(dvc_yaml())


# --------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("stage", sorted(stages()))
def test_stage_deps_are_the_import_closure_of_its_module(stage):
    problems = check(stage, stages()[stage])
    assert not problems, "\n".join(problems) + "\n(run `python scripts/dvc_deps.py`: it rewrites them)"


@pytest.mark.parametrize("path", ["dvc.yaml", *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("pipelines/*/dvc.yaml"))])
def test_dvc_yaml_is_what_the_script_writes(path):
    """Not only the same files: the same lines, in the script's order (the long profiles'
    pipelines too, their frozen units aside)."""
    text = (ROOT / path).read_text(encoding="utf-8")
    assert dvc_deps.written(text) == text, f"run `python scripts/dvc_deps.py {path}`: its src/ deps are stale"


def _line_of(lines: list[str], block, entry: str) -> int:
    """The index of ``- entry`` among the lines of a stage's deps ``block``."""
    return next(i for i in range(block.start, block.end) if lines[i].strip() == f"- {entry}")


def test_the_script_rewrites_only_the_src_lines_of_deps(tmp_path):
    """A dvc.yaml with a file missing and a stale one (sweep_tau), a folder listed file by file
    and a comment on a src line (train), two entries swapped (filter): --check names each stage
    and file and exits 1; the script then writes back the committed file, but for the comment,
    which it keeps."""
    text = dvc_yaml()
    lines = text.splitlines(keepends=True)
    blocks = {b.stage: b for b in dvc_deps.deps_blocks(lines)}
    assert blocks["filter"].start < blocks["train"].start < blocks["sweep_tau"].start  # edited bottom-up
    i = _line_of(lines, blocks["train"], "src/flexatt/checkpoints.py")
    lines[i] = lines[i].rstrip("\n") + "  # kept\n"
    commented = "".join(lines)  # what the script writes back
    i = _line_of(lines, blocks["sweep_tau"], "src/flexatt/metrics.py")
    lines[i] = lines[i].replace("src/flexatt/metrics.py", "src/flexatt/stages/filter.py")
    i = _line_of(lines, blocks["train"], "src/flexatt/attention")
    indent = lines[i][:lines[i].index("-")]
    lines[i:i + 1] = [f"{indent}- {f}\n" for f in sorted(folder_files("src/flexatt/attention"))]
    first = blocks["filter"].start
    lines[first], lines[first + 1] = lines[first + 1], lines[first]
    path = tmp_path / "dvc.yaml"
    path.write_text("".join(lines), encoding="utf-8")

    result = subprocess.run([sys.executable, "scripts/dvc_deps.py", "--check", str(path)], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "filter: src/ deps are out of order (sorted, kernel sources last)",
        "train: deps list the files of src/flexatt/attention one by one (scripts/dvc_deps.py lists the folder)",
        "sweep_tau: deps miss src/flexatt/metrics.py (the stage runs it)",
        "sweep_tau: deps list src/flexatt/stages/filter.py, which the stage does not run"]

    result = subprocess.run([sys.executable, "scripts/dvc_deps.py", str(path)], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "sweep_tau: + src/flexatt/metrics.py" in result.stdout.splitlines()
    written = path.read_text(encoding="utf-8")
    assert written == commented != text
    assert [(a, b) for a, b in zip(written.splitlines(), text.splitlines()) if a != b] == [
        ("        - src/flexatt/checkpoints.py  # kept", "        - src/flexatt/checkpoints.py")]
    assert subprocess.run([sys.executable, "scripts/dvc_deps.py", "--check", str(path)], cwd=ROOT,
                          capture_output=True).returncode == 0


def test_a_package_folder_is_listed_whole_only_when_the_stage_runs_all_of_it():
    """attention/ and variants/ run whole for a training stage: folders; data/ does not (its empty
    __init__ runs no code, and training does not read raw corpora): files; csrc/ is no package."""
    written = dvc_deps.code_deps(closure("flexatt.stages.train"))
    assert {"src/flexatt/attention", "src/flexatt/variants"} <= set(written)
    assert "src/flexatt/data" not in written and "src/flexatt/data/batching.py" in written
    assert written[-len(kernel_sources()):] == sorted(kernel_sources())
    assert written[:-len(kernel_sources())] == sorted(written[:-len(kernel_sources())])


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
    for edit in ("variants/extra.py", "attention/flexible.py", "csrc/kernel.cpp"):
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
