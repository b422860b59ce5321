"""Write the code deps of every stage in ``dvc.yaml`` from the import closure, or check them.

    python scripts/dvc_deps.py                  # rewrite the src/ deps of every stage in dvc.yaml
    python scripts/dvc_deps.py --check          # exit 1, naming each stage and file that differ
    git show HEAD~3:dvc.yaml | python scripts/dvc_deps.py --check -    # another version of dvc.yaml

A file missing from a stage's ``deps`` lets a change leave committed results stale while
``dvc status`` says all is up to date; a listed file the stage does not run re-runs it for nothing.

"The files a stage runs" is :func:`flexatt.provenance.code_files` of every ``flexatt`` module
named by ``python -m flexatt....`` in the stage's ``cmd`` (a ``foreach`` stage by its ``do``
template): the import closure, with the rules in that module's docstring (the same closure makes
a training run's resume fingerprint). They are written as ``deps`` entries (:func:`code_deps`):

* a package folder below ``src/flexatt`` (one with an ``__init__.py``) every file of which DVC
  hashes is in the closure is listed as the folder (``src/flexatt/attention``), so that a new
  module there (a variant) is a dependency at once; the highest such folder wins;
* every other file of the closure is listed as itself;
* sorted by path, the kernel's C/C++ sources (``src/flexatt/csrc/``, which the closure holds
  through ``decoding/kernel.py``) last.

Only the ``src/...`` lines of each stage's ``deps:`` list are rewritten, as text: the new entries
stand where the first ``src/`` entry stood (at the head of the list where there was none), with its
indentation; every other line of the file (comments, data and artifact deps, their order) stays
as it is. ``tests/test_dvc_deps.py`` checks that the committed ``dvc.yaml`` is what this writes.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # the closure of this repository's package, whichever is installed

from flexatt import provenance  # noqa: E402
from flexatt.provenance import module_file  # noqa: E402

DVC_YAML = ROOT / "dvc.yaml"
STAGE_CMD = re.compile(r"python[0-9.]*\s+-m\s+(flexatt(?:\.\w+)*)")


# --------------------------------------------------------------------------------------
# what a stage runs
# --------------------------------------------------------------------------------------
def rel(path: Path) -> str:
    """``path`` relative to the repository root, with ``/`` (as dvc.yaml writes it)."""
    return path.relative_to(ROOT).as_posix()


def kernel_sources() -> set[str]:
    """The kernel's C/C++ sources, repository-relative."""
    return {rel(p) for p in provenance.kernel_sources()}


def closure(*modules: str) -> set[str]:
    """Repository-relative paths of :func:`flexatt.provenance.code_files`."""
    return {rel(p) for p in provenance.code_files(*modules)}


def folder_files(folder: str) -> set[str]:
    """The files DVC hashes for a folder in ``deps`` (``__pycache__`` is in ``.dvcignore``)."""
    return {rel(p) for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def stage_modules(spec: dict) -> list[str]:
    """The ``flexatt`` modules that a stage's ``cmd`` runs with ``python -m`` (a list ``cmd``:
    every command of it)."""
    cmd = spec.get("cmd", "")
    cmd = " && ".join(cmd) if isinstance(cmd, list) else str(cmd)
    return STAGE_CMD.findall(cmd)


def code_deps(needed: set[str]) -> list[str]:
    """The ``deps`` entries that cover exactly the repository-relative files ``needed`` (see the
    module doc: fully covered package folders as folders, the rest as files; sorted, the kernel
    sources last)."""
    package = rel(provenance.PACKAGE_DIR)
    entries: set[str] = set()
    for path in needed:
        parts = path.split("/")
        entry = path
        for depth in range(len(package.split("/")) + 1, len(parts)):  # the highest folder first
            folder = "/".join(parts[:depth])
            if (ROOT / folder / "__init__.py").is_file() and folder_files(folder) <= needed:
                entry = folder
                break
        entries.add(entry)
    kernel = kernel_sources()
    return sorted(entries, key=lambda e: (e in kernel, e))


def listed_src(spec: dict) -> list[str]:
    """The ``src/...`` entries of a stage's ``deps``, as written (a leading ``./`` and a
    trailing ``/`` dropped)."""
    deps = [d for d in spec.get("deps") or [] if isinstance(d, str)]
    return [d.removeprefix("./").rstrip("/") for d in deps if d.removeprefix("./").startswith("src/")]


# --------------------------------------------------------------------------------------
# checking a dvc.yaml
# --------------------------------------------------------------------------------------
def load_stages(text: str) -> dict[str, dict]:
    """The stages of a dvc.yaml text (a ``foreach`` stage by its ``do`` template), less the frozen
    ones: their code is the code that ran them, recorded in the lock (``docs/pipeline.md``)."""
    raw = (yaml.safe_load(text) or {}).get("stages") or {}
    stages = {name: spec.get("do", spec) for name, spec in raw.items()}
    return {name: spec for name, spec in stages.items() if not spec.get("frozen")}


def expected_deps(stage: str, spec: dict) -> tuple[list[str] | None, list[str]]:
    """The ``src/`` deps the stage should list, or None with the reason it has none (a ``cmd``
    that runs no ``python -m flexatt...`` module, or a module without a file)."""
    modules = stage_modules(spec)
    if not modules:
        return None, [f"{stage}: cmd runs no `python -m flexatt...` module, so its code deps cannot be "
                      f"checked: {spec.get('cmd', '')!r}"]
    missing = [m for m in modules if module_file(m) is None]
    if missing:
        return None, [f"{stage}: cmd runs {m}, which has no file under src/" for m in missing]
    return code_deps(closure(*modules)), []


def check(stage: str, spec: dict) -> list[str]:
    """The problems of one stage's ``deps``, each naming the stage and the file (empty: none).

    First what the listed entries cover (a folder: every file DVC hashes in it) against the
    files the stage runs: duplicates, files missed, files listed that the stage does not run;
    where they cover exactly those files, how the entries differ from what :func:`code_deps`
    writes (a folder listed file by file, the order)."""
    needed, problems = expected_deps(stage, spec)
    if needed is None:
        return problems
    listed = listed_src(spec)
    problems = [f"{stage}: deps list {f} more than once" for f in sorted({d for d in listed if listed.count(d) > 1})]
    covered = {f for d in listed for f in (folder_files(d) if (ROOT / d).is_dir() else [d])}
    runs = {f for d in needed for f in (folder_files(d) if (ROOT / d).is_dir() else [d])}
    problems += [f"{stage}: deps miss {f} (the stage runs it)" for f in sorted(runs - covered)]
    problems += [f"{stage}: deps list {f}, which the stage does not run" for f in sorted(covered - runs)]
    if problems or listed == needed:
        return problems
    folders = [d for d in needed if d not in listed and (ROOT / d).is_dir()]
    problems += [f"{stage}: deps list the files of {d} one by one (scripts/dvc_deps.py lists the folder)"
                 for d in folders]
    problems += [f"{stage}: deps list {d}, which scripts/dvc_deps.py writes otherwise" for d in listed
                 if d not in needed and not any(d.startswith(f + "/") for f in folders)]
    if not problems:
        problems = [f"{stage}: src/ deps are out of order (sorted, kernel sources last)"]
    return problems


def check_all(all_stages: dict[str, dict]) -> list[str]:
    return [problem for name, spec in all_stages.items() for problem in check(name, spec)]


# --------------------------------------------------------------------------------------
# rewriting dvc.yaml as text
# --------------------------------------------------------------------------------------
STAGE_LINE = re.compile(r"^  (?P<name>[A-Za-z_][\w@.-]*):\s*(#.*)?$")
DEPS_LINE = re.compile(r"^(?P<indent> +)deps:\s*(#.*)?$")
ITEM_LINE = re.compile(r"^(?P<indent> +)- (?P<value>.*?)\s*(#.*)?$")


@dataclass
class DepsBlock:
    """Where a stage's ``deps:`` list stands in dvc.yaml: the lines ``start:end`` (0-based,
    ``end`` excluded) of its items, comments and blank lines among them, and the items' indent."""

    stage: str
    start: int
    end: int
    indent: str


def _is_src(value: str) -> bool:
    return value.strip("'\"").removeprefix("./").startswith("src/")


def deps_blocks(lines: list[str]) -> list[DepsBlock]:
    """Every stage's ``deps:`` list among the ``lines`` of dvc.yaml (stages sit two spaces in
    under a top-level ``stages:``; a ``foreach`` stage's list is that of its ``do:``)."""
    blocks, stage, in_stages, i = [], None, False, 0
    while i < len(lines):
        line = lines[i]
        if line and not line[0].isspace() and not line.startswith("#"):
            in_stages, stage = line.rstrip().startswith("stages:"), None
        elif in_stages and (m := STAGE_LINE.match(line)):
            stage = m["name"]
        elif in_stages and stage and (m := DEPS_LINE.match(line)):
            j, indent = i + 1, None
            while j < len(lines):
                item = ITEM_LINE.match(lines[j])
                if item and len(item["indent"]) >= len(m["indent"]) and indent in (None, item["indent"]):
                    indent = item["indent"]
                elif not (lines[j].strip() == "" or lines[j].lstrip().startswith("#")):
                    break
                j += 1
            while j > i + 1 and not ITEM_LINE.match(lines[j - 1]):  # trailing blanks and comments stay outside
                j -= 1
            blocks.append(DepsBlock(stage, i + 1, j, indent or m["indent"] + "  "))
            i = j
            continue
        i += 1
    return blocks


def rewrite(text: str, wanted: dict[str, list[str]]) -> str:
    """``text`` (a dvc.yaml) with the ``src/`` entries of each stage in ``wanted`` replaced by
    ``wanted[stage]`` (see the module doc); a src line whose entry stays keeps its comment."""
    lines = text.splitlines(keepends=True)
    for block in reversed(deps_blocks(lines)):
        if block.stage not in wanted:
            continue
        kept: dict[str, str] = {}
        body, first = [], None
        for line in lines[block.start:block.end]:
            item = ITEM_LINE.match(line)
            if item and _is_src(item["value"]):
                first = len(body) if first is None else first
                kept.setdefault(item["value"].strip("'\"").removeprefix("./").rstrip("/"), line)
            else:
                body.append(line)
        new = [kept.get(dep, f"{block.indent}- {dep}\n") for dep in wanted[block.stage]]
        at = 0 if first is None else first
        lines[block.start:block.end] = body[:at] + new + body[at:]
    return "".join(lines)


def written(text: str) -> str:
    """What this script makes of the dvc.yaml ``text``: every stage whose cmd it can read gets
    its ``src/`` deps from the closure; the others are left as they are."""
    wanted = {}
    for stage, spec in load_stages(text).items():
        needed, _ = expected_deps(stage, spec)
        if needed is not None:
            wanted[stage] = needed
    return rewrite(text, wanted)


def main(argv: list[str] | None = None) -> int:
    """Rewrite (default) or ``--check`` a dvc.yaml; print what changed or what differs. Exit
    status 1: ``--check`` found a difference, or a stage's cmd names no module this can follow."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; print each stage and file that differ, exit 1 if any")
    parser.add_argument("file", nargs="?", default=str(DVC_YAML),
                        help="the dvc.yaml to read (default: the repository's; '-': standard input, with --check)")
    args = parser.parse_args(argv)
    if args.file == "-" and not args.check:
        parser.error("standard input goes with --check")
    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    stages = load_stages(text)
    if args.check:
        problems = check_all(stages)
        print("\n".join(problems) if problems else "dvc.yaml deps agree with the import closures")
        return 1 if problems else 0
    new = written(text)
    unreadable = [p for stage, spec in stages.items() for p in expected_deps(stage, spec)[1]]
    after = load_stages(new)
    edits = [f"{stage}: {sign} {dep}" for stage, spec in stages.items()
             for sign, deps in (("-", [d for d in listed_src(spec) if d not in listed_src(after[stage])]),
                                ("+", [d for d in listed_src(after[stage]) if d not in listed_src(spec)]))
             for dep in deps]
    edits += [f"{stage}: src/ deps reordered" for stage, spec in stages.items()
              if listed_src(spec) != listed_src(after[stage])
              and sorted(listed_src(spec)) == sorted(listed_src(after[stage]))]
    if new != text:
        Path(args.file).write_text(new, encoding="utf-8")
    print("\n".join([*unreadable, *edits]) or f"{args.file}: unchanged")
    return 1 if unreadable else 0


if __name__ == "__main__":
    sys.exit(main())
