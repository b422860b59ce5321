"""Which package files a stage runs: the import closure that DVC's ``deps`` and a training run's
resume fingerprint both follow.

A stage's code is its module and every package module it imports, directly or transitively.
Imports are read statically (:mod:`ast`) at import level, not call level, so an import inside a
function or an ``if TYPE_CHECKING:`` block counts too: the closure over-approximates, it never
misses a file that is imported lazily. The rules:

* ``import flexatt.x``, ``from flexatt.x import y`` (``y`` counts when it is itself a submodule:
  a file ``flexatt/x/y.py`` or a package ``flexatt/x/y/``), ``from flexatt import x`` and
  relative imports (``from . import x``, ``from ..x import y``).
* Importing ``a.b.c`` executes ``a/__init__.py`` and ``a/b/__init__.py``: those count, unless the
  file holds no statement at all (empty, or only comments), since such a file runs no code.
* ``flexatt/decoding/kernel.py`` compiles the C/C++ sources under ``flexatt/csrc/`` at run time,
  so a closure holding ``kernel.py`` holds every C/C++ file there too.
* ``flexatt/variants/__init__.py`` imports every module in its folder, so a closure holding it
  holds every ``.py`` file there and what they import. ``dvc.yaml`` lists the folder itself, so
  that a new variant module is a dependency without editing ``dvc.yaml``.

``tests/test_dvc_deps.py`` checks every stage's ``deps`` in ``dvc.yaml`` against
:func:`code_files`; :func:`code_digest` hashes the same files for ``run.json``, so a change that
makes DVC re-run a training stage is exactly a change that stops it resuming an old ``last.ckpt``.
This is hand-written: tools that list a script's imports (``modulefinder``, ``pydeps``) execute or
resolve the whole environment; this needs only the package's own files, read without running them.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

PACKAGE = "flexatt"
PACKAGE_DIR = Path(__file__).resolve().parent
SRC = PACKAGE_DIR.parent
KERNEL = PACKAGE_DIR / "decoding" / "kernel.py"
CSRC = PACKAGE_DIR / "csrc"
VARIANTS = f"{PACKAGE}.variants"
VARIANTS_DIR = PACKAGE_DIR / "variants"
KERNEL_SUFFIXES = {".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh"}


def kernel_sources() -> set[Path]:
    """The C/C++ sources ``flexatt/decoding/kernel.py`` compiles (everything under ``flexatt/csrc``)."""
    if not CSRC.is_dir():
        return set()
    return {p for p in CSRC.rglob("*") if p.is_file() and p.suffix in KERNEL_SUFFIXES}


def module_file(name: str) -> Path | None:
    """The file of package module ``name`` (``pkg/__init__.py`` for a package), else None."""
    path = SRC.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def runs_code(path: Path) -> bool:
    """False for a file with no statement at all (empty, or only comments and blank lines)."""
    return bool(ast.parse(path.read_text(encoding="utf-8")).body)


def imported_modules(path: Path, name: str) -> set[str]:
    """The package modules that file ``path`` (module ``name``) imports (see the module doc);
    for ``from flexatt.x import y`` both ``flexatt.x`` and ``flexatt.x.y`` are kept, and
    :func:`module_file` decides whether the latter is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: level 1 is this package, 2 its parent, ...
                parts = package.split(".")
                if node.level - 1 >= len(parts):
                    raise ImportError(f"{path}: relative import beyond the top-level package")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names if alias.name != "*")
    return {m for m in found if m == PACKAGE or m.startswith(PACKAGE + ".")}


def variant_modules() -> list[str]:
    """The modules in ``flexatt/variants/`` (what its ``__init__`` imports)."""
    if not VARIANTS_DIR.is_dir():
        return []
    return sorted(f"{VARIANTS}.{p.stem if p.suffix == '.py' else p.name}" for p in VARIANTS_DIR.iterdir()
                  if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file())


def code_files(*modules: str) -> set[Path]:
    """Every package file that running ``modules`` executes, plus the kernel sources when
    ``decoding/kernel.py`` is among them (absolute paths)."""
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
                todo.extend(imported_modules(path, sub))
                if sub == VARIANTS:  # imports every module of its folder
                    todo.extend(variant_modules())
    files = {p for p in seen.values() if runs_code(p)}
    if KERNEL in files:
        files |= kernel_sources()
    return files


def code_digest(*modules: str) -> str:
    """SHA-256 over the paths (relative to ``src/``) and contents of :func:`code_files`."""
    digest = hashlib.sha256()
    for path in sorted(code_files(*modules)):
        digest.update(path.relative_to(SRC).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
