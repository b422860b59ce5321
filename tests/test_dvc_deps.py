"""Every DVC stage lists, in its ``deps``, exactly the package files its code runs.

A file missing from a stage's ``deps`` lets a change leave committed results stale while
``dvc status`` says all is up to date; a listed file the stage does not run re-runs it for nothing.

What "the files a stage runs" means here (the rules the check applies, decided once):

* The stage's code is every ``flexatt`` module named by ``python -m flexatt....`` in its ``cmd``
  (a ``foreach`` stage by its ``do`` template), and every package module those import, directly
  or transitively.
* Imports are read statically with :mod:`ast`, at import level, not call level: ``import
  flexatt.x``, ``from flexatt.x import y`` (``y`` counts when it is itself a submodule, i.e. a
  file ``flexatt/x/y.py`` or package ``flexatt/x/y/``), ``from flexatt import x``, and relative
  imports (``from . import x``, ``from ..x import y``). An import anywhere in a file counts,
  inside a function or an ``if TYPE_CHECKING:`` block too: the check over-approximates, it never
  misses a file because it was imported lazily.
* Importing ``a.b.c`` executes ``a/__init__.py`` and ``a/b/__init__.py``: those count, unless
  the file holds no statement at all (empty, or only comments), since such a file runs no code.
  An ``__init__.py`` that gains code later then has to be listed, and the check says so.
* ``flexatt/fused.py`` compiles the C++ sources under ``src/flexatt/csrc/`` at run time, so a
  stage whose closure holds ``fused.py`` also depends on every C/C++ file there.
* Only the ``src/...`` entries of ``deps`` are compared; data and artifact deps are left alone.

Run this file as a script to check another version of ``dvc.yaml`` against the current sources,
e.g. ``git show HEAD~3:dvc.yaml | python tests/test_dvc_deps.py -`` (exit status 1 on a problem).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = "flexatt"
FUSED = "src/flexatt/fused.py"
CSRC = SRC / PACKAGE / "csrc"
KERNEL_SUFFIXES = {".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh"}
STAGE_CMD = re.compile(r"python[0-9.]*\s+-m\s+(flexatt(?:\.\w+)*)")


def rel(path: Path) -> str:
    """``path`` relative to the repository root, with ``/`` (as dvc.yaml writes it)."""
    return path.relative_to(ROOT).as_posix()


def kernel_sources() -> set[str]:
    """The C/C++ sources ``flexatt/fused.py`` compiles (everything under ``src/flexatt/csrc``)."""
    if not CSRC.is_dir():
        return set()
    return {rel(p) for p in CSRC.rglob("*") if p.is_file() and p.suffix in KERNEL_SUFFIXES}


def module_file(name: str) -> Path | None:
    """The file of module ``name`` (``pkg/__init__.py`` for a package), or None outside src/."""
    path = SRC.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def runs_code(path: Path) -> bool:
    """False for a file with no statement at all (empty, or only comments and blank lines)."""
    return bool(ast.parse(path.read_text(encoding="utf-8")).body)


def _imports(path: Path, name: str) -> set[str]:
    """The package modules that file ``path`` (module ``name``) imports: ``import flexatt.x``,
    ``from flexatt.x import y`` (``flexatt.x.y`` is kept too: it may be a submodule, which
    :func:`module_file` decides), ``from flexatt import x``, relative imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: level 1 is this package, 2 its parent, ...
                parts = package.split(".")
                if node.level - 1 >= len(parts):
                    raise ImportError(f"{rel(path)}: relative import beyond the top-level package")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names if alias.name != "*")
    return {m for m in found if m == PACKAGE or m.startswith(PACKAGE + ".")}


def closure(*modules: str) -> set[str]:
    """Repository-relative paths of every package file that running ``modules`` executes (see
    the module doc for the rules), plus the kernel sources when ``fused.py`` is among them."""
    seen: dict[str, Path] = {}
    todo = list(modules)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__.py, a/b/__init__.py
            sub = ".".join(parts[:i])
            path = module_file(sub)
            if path is not None and sub not in seen:
                seen[sub] = path
                todo.extend(_imports(path, sub))
    files = {rel(p) for p in seen.values() if runs_code(p)}
    if FUSED in files:
        files |= kernel_sources()
    return files


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
    listed = [d.removeprefix("./") for d in deps if d.removeprefix("./").startswith("src/")]
    problems = [f"{stage}: deps list {f} more than once" for f in sorted({d for d in listed if listed.count(d) > 1})]
    problems += [f"{stage}: deps miss {f} (the stage runs it)" for f in sorted(needed - set(listed))]
    problems += [f"{stage}: deps list {f}, which the stage does not run" for f in sorted(set(listed) - needed)]
    return problems


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
    # evaluate -> evaluation -> train -> training -> model -> attention; the kernel via fused.py
    assert {"src/flexatt/attention.py", "src/flexatt/train.py", "src/flexatt/data/subwords.py",
            "src/flexatt/__init__.py", *kernel_sources()} <= files
    assert "src/flexatt/stages/filter.py" not in files
    # empty package __init__ files run no code and are not deps
    for init in ("src/flexatt/data/__init__.py", "src/flexatt/stages/__init__.py"):
        if (ROOT / init).is_file() and not runs_code(ROOT / init):
            assert init not in files


def test_fused_still_builds_the_kernel_from_csrc():
    """The kernel rule rests on fused.py compiling csrc/; fail here if that ever changes."""
    assert kernel_sources(), "src/flexatt/csrc/ holds no C/C++ source"
    assert "csrc" in (ROOT / FUSED).read_text(encoding="utf-8")


def main(argv: list[str]) -> int:
    """``python tests/test_dvc_deps.py [DVC_YAML | -]``: print every problem; exit 1 if any."""
    source = argv[0] if argv else str(ROOT / "dvc.yaml")
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    problems = check_all(load_stages(text))
    print("\n".join(problems) if problems else "dvc.yaml deps agree with the import closures")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
