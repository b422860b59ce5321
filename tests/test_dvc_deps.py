"""Every DVC stage lists, in its ``deps``, every package file its module runs.

A stage's code is its module under ``flexatt.stages`` and everything that module imports from
the package, directly or transitively (read statically with ``ast``), plus the C++ source of the
fused kernel for stages whose code can build it (``flexatt/fused.py``). A file missing from
``deps`` lets a change leave committed results stale while ``dvc status`` says all is up to date;
a listed file the stage does not run re-runs it for nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
KERNEL = "src/flexatt/csrc/fused_decode.cpp"
STAGE_CMD = re.compile(r"python -m (flexatt\.stages\.\w+)")


def module_file(name: str) -> Path | None:
    """The file of module ``name`` (``pkg/__init__.py`` for a package), or None outside src/."""
    path = SRC.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def _imports(path: Path, name: str) -> set[str]:
    """The flexatt modules ``path`` (module ``name``) imports: ``import flexatt.x``, ``from
    flexatt.x import y`` (``y`` may be a submodule), ``from flexatt import x``, relative imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return {m for m in found if m == "flexatt" or m.startswith("flexatt.")}


def closure(module: str) -> set[str]:
    """Repository-relative paths of every package file ``module`` runs (empty files left out:
    an empty ``__init__.py`` runs no code)."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        # importing a.b.c runs a/__init__.py and a/b/__init__.py too
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            sub = ".".join(parts[:i])
            path = module_file(sub)
            if path is not None and sub not in seen:
                seen[sub] = path
                todo.extend(_imports(path, sub))
    files = {str(p.relative_to(ROOT)) for p in seen.values() if p.stat().st_size > 0}
    if "src/flexatt/fused.py" in files:
        files.add(KERNEL)
    return files


def stages() -> dict[str, dict]:
    """dvc.yaml's stages (a ``foreach`` stage by its ``do`` template)."""
    raw = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    return {name: spec.get("do", spec) for name, spec in raw.items()}


def check(stage: str, spec: dict) -> list[str]:
    """The problems of one stage's deps, each naming the stage and the file."""
    match = STAGE_CMD.search(spec["cmd"])
    assert match, f"{stage}: cmd does not run a flexatt.stages module: {spec['cmd']!r}"
    needed = closure(match.group(1))
    listed = {d for d in spec.get("deps", []) if isinstance(d, str) and d.startswith("src/")}
    return ([f"{stage}: deps miss {f} (the stage runs it)" for f in sorted(needed - listed)]
            + [f"{stage}: deps list {f}, which the stage does not run" for f in sorted(listed - needed)])


@pytest.mark.parametrize("stage", sorted(stages()))
def test_stage_deps_are_the_import_closure_of_its_module(stage):
    problems = check(stage, stages()[stage])
    assert not problems, "\n".join(problems)


def test_the_check_catches_a_missing_and_a_stale_dependency():
    spec = dict(stages()["sweep_tau"])
    deps = [d for d in spec["deps"] if d != "src/flexatt/metrics.py"] + ["src/flexatt/stages/filter.py"]
    problems = check("sweep_tau", {**spec, "deps": deps})
    assert problems == ["sweep_tau: deps miss src/flexatt/metrics.py (the stage runs it)",
                        "sweep_tau: deps list src/flexatt/stages/filter.py, which the stage does not run"]


def test_closure_follows_transitive_and_submodule_imports():
    files = closure("flexatt.stages.evaluate")
    # evaluate -> evaluation -> train -> training -> model -> attention; the kernel via fused.py
    assert {"src/flexatt/attention.py", "src/flexatt/train.py", "src/flexatt/data/subwords.py",
            KERNEL} <= files
    assert "src/flexatt/stages/filter.py" not in closure("flexatt.stages.evaluate")
