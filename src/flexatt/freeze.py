"""Bring a long profile's finished units into its pipeline as frozen stages, with lock entries
that name the code and parameters each unit ran with.

    python -m flexatt.freeze bible grc     # pipelines/<profile>/units.yaml and dvc.lock

(``flexatt repro --commit`` runs it for a profile each time one of its units finishes.)

A finished unit folder ``results/<profile>/units/<unit>/`` becomes the item ``unit@<key>`` of
the ``unit`` stage of ``pipelines/<profile>/dvc.yaml`` (``<key>``: the unit's name with ``.``
as ``_``, which DVC refuses in stage names), listed in ``pipelines/<profile>/units.yaml``. Its lock
entry is what DVC records for it (``dvc commit``: the product folder's hash, the tokenized data
it read, which :func:`check_data` first proves to be the files the unit recorded, digest for
digest), with two fields replaced by the unit's own record, so that the entry says what ran:

* the ``src/flexatt`` dependency: the hash DVC gives that folder at the commit in the unit's
  ``unit.json`` (``source.commit``), computed from git's objects (:func:`tree_hash`);
* the parameters: ``conf/`` of that commit composed with the profile and the unit's recorded
  overrides (the long profile was called ``converged`` then on the Bible).

The stage is frozen, so ``dvc status`` does not compare those entries with today's code:
a refactor does not mark the finished units stale. A unit that ran as the live ``train`` and
``decode`` stages (``units.yaml``'s ``pending``, :func:`pending_items`) moves to ``finished`` here
once its products exist; its commit is the one it ran (a unit refuses uncommitted edits), so the
entry is the one DVC would write. Run again whenever the ``unit`` stage's definition or the plan
changes, or units finish.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import yaml

#: the profile a unit's recorded commit knew it by
OLD_NAMES = {"bible": "converged"}
#: the parameters the ``unit`` stage lists (``variants.<variant>`` besides)
PARAM_KEYS = ("model", "trainer", "train", "finetune", "decode", "sweep_tau")


def git(*args: str, data: bytes | None = None, root: Path = Path(".")) -> bytes:
    return subprocess.run(["git", *args], cwd=root, input=data, capture_output=True, check=True).stdout


def tree_hash(commit: str, folder: str = "src/flexatt", root: Path = Path(".")) -> dict:
    """DVC's hash of ``folder`` as it was at ``commit`` (``md5``: the md5 of the sorted JSON list of
    ``{"md5", "relpath"}`` of its files, ``.dir`` appended; ``size``, ``nfiles``), from git's
    objects; ``__pycache__`` and ``*.pyc`` are ignored, as ``.dvcignore`` says."""
    listing = git("ls-tree", "-r", "-l", "--full-tree", commit, folder, root=root).decode().splitlines()
    blobs = []
    for line in listing:
        meta, path = line.split("\t", 1)
        _, kind, sha, size = meta.split()
        if kind == "blob" and "__pycache__" not in path.split("/") and not path.endswith(".pyc"):
            blobs.append((path, sha, int(size)))
    contents = git("cat-file", "--batch", data="".join(f"{sha}\n" for _, sha, _ in blobs).encode(), root=root)
    entries, offset = [], 0
    for path, _, size in blobs:
        header_end = contents.index(b"\n", offset)
        body = contents[header_end + 1:header_end + 1 + size]
        offset = header_end + 1 + size + 1
        entries.append({"md5": hashlib.md5(body).hexdigest(), "relpath": path[len(folder) + 1:]})
    entries.sort(key=lambda e: e["relpath"])
    digest = hashlib.md5(json.dumps(entries, sort_keys=True).encode()).hexdigest()
    return {"md5": f"{digest}.dir", "size": sum(size for *_, size in blobs), "nfiles": len(blobs)}


def composed_params(commit: str, profile: str, overrides: list[str], variant: str, root: Path = Path(".")) -> dict:
    """The parameters of the ``unit`` stage as ``conf/`` of ``commit`` composed them."""
    from omegaconf import OmegaConf

    from flexatt.config import compose

    with tempfile.TemporaryDirectory() as tmp:
        tarfile.open(fileobj=BytesIO(git("archive", commit, "conf", root=root)), mode="r:").extractall(tmp, filter="data")
        named = profile if (Path(tmp) / "conf" / "profile" / f"{profile}.yaml").is_file() else OLD_NAMES.get(profile, profile)
        names = [f"profile={named}", *overrides]  # the profile under its name at that commit
        cfg = OmegaConf.to_container(compose(names, Path(tmp) / "conf"), resolve=True)
    out = {key: cfg[key] for key in PARAM_KEYS if key in cfg}
    if variant in cfg.get("variants", {}):
        out[f"variants.{variant}"] = cfg["variants"][variant]
    return out


def check_data(profile: str, tok: Path, manifests: dict[str, dict]) -> None:
    """Refuse tokenized data whose files differ from any unit's record (names unit and file), or
    that is not there (names the file and the stage that writes it)."""
    from flexatt.errors import DataError
    from flexatt.products import DATA_KEYS, data_difference, data_digests

    if not manifests:
        return
    if missing := [name for name in DATA_KEYS if not (tok / name).is_file()]:
        raise DataError(tok / missing[0], f"not found: the units of {profile} are checked against the tokenized "
                        f"data they read; make it first (`dvc repro` of the tokenize stage that writes {tok})")
    if differ := data_difference(data_digests(tok), manifests):
        raise DataError(tok / differ[1], f"not the file unit {profile}/{differ[0]} read")


def items(profile: str, manifests: dict[str, dict]) -> dict[str, dict]:
    """``units.yaml``'s ``finished``: per stage key, the unit's folder name, variant, the options
    that would run it again, and its recorded source."""
    from flexatt.products import parse_unit

    out = {}
    for name, manifest in sorted(manifests.items()):
        unit = parse_unit(name)
        options = []
        if manifest.get("weights") not in (None, "not kept"):
            options.append("--keep-weights")
        if unit.kind != "train":
            options.append(f"--parent results/{profile}/units/{unit.parent}/weights.fp16.pt")
        if "matched_by" in manifest:
            options.append(f"--match-flexible results/{profile}/units/{manifest['matched_by']['unit']}")
        options += manifest["source"].get("overrides", [])
        out[key(name)] = {"unit": name, "variant": unit.variant, "options": " ".join(options),
                          "source": manifest["source"]}
    return out


def key(name: str) -> str:
    """A unit's key in a foreach stage (DVC refuses ``.`` in stage names)."""
    return name.replace(".", "_")


def pending_items(profile: str, manifests: dict[str, dict], data_dir: str, root: Path = Path("."),
                  finished: set[str] | None = None, listed: dict[str, dict] | None = None) -> dict[str, dict]:
    """``units.yaml``'s ``pending``: the units of the profile's plan (:func:`flexatt.products.plan`,
    in its order) that have no products yet (or are not in ``finished``: products to run again,
    :func:`flexatt.products.rerun_due`), each with what its ``train`` and ``decode`` stages
    need: the file its weights go to, the options of each step, and two paths its stages depend
    on (``parent``: a fine-tuning's parent weights; ``after``: the flexible unit a fixed window is
    matched to in its decoding; the tokenized data where there is none). A unit trains at the
    precision its comparison group already trained at (:func:`flexatt.products.comparison_group`:
    the two sides of a pair at one precision), a fine-tuning pair at the selected β at the plan's
    ``finetuning.precision``, pinned in its options so that any machine keeps it.
    ``finished``: the units frozen (default: every unit with products but those to run again);
    ``listed``: the pending
    items written before, kept as they are (a unit's stages do not change once listed: one may be
    running)."""
    from flexatt.products import Unit, comparison_group, parse_unit, plan, read_plan

    spec = read_plan(root / "conf" / "units" / f"{profile}.yaml")
    units = plan(spec, manifests)
    planned = {u.name for u in units}
    out = {}
    if finished is None:
        from flexatt.products import rerun_due

        finished = set(manifests) - rerun_due(manifests, root, spec)
    for unit in units:
        if unit.name in finished:
            continue
        if (listed or {}).get(key(unit.name), {}).get("unit") == unit.name:
            out[key(unit.name)] = listed[key(unit.name)]
            continue
        group = sorted({str(m["training"]["precision"]) for n, m in manifests.items()
                        if comparison_group(parse_unit(n)) == comparison_group(unit) and "precision" in m["training"]})
        train, decode = [], []
        if unit.keep_weights:
            train.append("--keep-weights")
            decode.append("--keep-weights")
        parent = data_dir
        if unit.kind != "train":
            parent = f"results/{profile}/units/{unit.parent}/weights.fp16.pt"
            train.append(f"--parent {parent}")
        ft = spec.finetuning
        if unit.kind != "train" and ft is not None and ft.precision and (unit.run > 1 or unit.seed != spec.seeds[0]):
            train.append(f"trainer.precision={ft.precision}")  # a pair at the selected β: the claim's precision
        elif len(group) == 1:
            train.append(f"trainer.precision={group[0]}")
        after = data_dir
        flexible = Unit(spec.flexible, unit.seed).name
        if unit.kind == "train" and unit.budget == 1.0 and unit.variant in spec.fixed \
                and spec.flexible in spec.parents and (flexible in manifests or flexible in planned):
            if unit.name not in manifests.get(flexible, {}).get("summary", {}).get("matched", {}):
                after = f"results/{profile}/units/{flexible}"
                decode.append(f"--match-flexible {after}")
        out[key(unit.name)] = {"unit": unit.name, "variant": unit.variant,
                               "weights": "weights.fp16.pt" if unit.keep_weights else "model.pt",
                               "train_options": " ".join(train), "decode_options": " ".join(decode),
                               "parent": parent, "after": after}
    return out


def freeze(profile: str, root: str | os.PathLike = ".", only: list[str] | None = None) -> tuple[int, int]:
    """Write ``units.yaml`` (the finished units, frozen; the pending ones), the curves of
    ``dvc.yaml``'s plot (:func:`write_curves`) and the finished units' lock entries, under DVC's
    lock of the repository at ``root`` (stages of other units may be writing theirs); returns the counts of finished and pending units. ``only``: the units newly
    frozen are these (a stage that just finished), not every unit with products (another unit's
    decoding may have written its products and not yet its lock entry)."""
    from dvc.repo import Repo

    from dvc.utils.serialize import dump_yaml

    from flexatt.products import done_units, read_plan, rerun_due

    root = Path(root)
    folder = root / "pipelines" / profile
    with Repo(str(root)) as repo, repo.lock:
        manifests = done_units(root / "results" / profile / "units")
        params = yaml.safe_load((folder / "params.yaml").read_text())
        check_data(profile, root / params["train"]["data_dir"], manifests)
        before = yaml.safe_load((folder / "units.yaml").read_text()) if (folder / "units.yaml").is_file() else {}
        before = before or {}
        frozen = set(manifests) if only is None else \
            {i["unit"] for i in (before.get("finished") or {}).values()} | set(only)
        # ran on uncommitted edits, or predate a fix the plan names: pending again, never frozen
        due = rerun_due(manifests, root, read_plan(root / "conf" / "units" / f"{profile}.yaml"))
        frozen -= due
        finished = items(profile, {n: m for n, m in manifests.items() if n in frozen})
        pending = pending_items(profile, manifests, params["train"]["data_dir"], root, frozen & set(manifests),
                                before.get("pending") or {})
        header = (f"# The units of pipelines/{profile}/dvc.yaml, written by python -m flexatt.freeze: `finished`,\n"
                  f"# the frozen `unit` stage's, from results/{profile}/units/*/unit.json (source: the commit each\n"
                  f"# ran from and whether its tree had uncommitted edits); `pending`, the `train` and `decode`\n"
                  f"# stages', the units of conf/units/{profile}.yaml's plan that have no products yet (or products to\n"
                  f"# run again: of uncommitted edits to what they ran, or older than a fix the plan's run_again\n"
                  f"# names), in its order.\n")
        _write(folder / "units.yaml", header + yaml.safe_dump({"finished": finished, "pending": pending},
                                                               sort_keys=False, width=110))
        write_curves(profile, root, [i["unit"] for i in finished.values()])
        lock_path = folder / "dvc.lock"
        if lock_path.is_file():  # (none: no stage of the pipeline has run here)
            lock = yaml.safe_load(lock_path.read_text())
            for stage in [s for s in lock["stages"] if s.split("@")[0] in ("train", "decode")]:
                if stage.split("@", 1)[1] in finished:  # a pending unit finished: frozen from now on
                    del lock["stages"][stage]
            for name in due:  # to be re-run: its train and decode stages replace its frozen one
                lock["stages"].pop(f"unit@{key(name)}", None)
            dump_yaml(lock_path, lock)  # as DVC writes its lock
    new = finished if only is None else {k: i for k, i in finished.items() if i["unit"] in only}
    if not new:
        return len(finished), len(pending)
    # dvc commit takes the lock itself
    done = subprocess.run([sys.executable, "-m", "dvc", "--wait-for-lock", "commit", "-f", "-q",
                           *(f"pipelines/{profile}/dvc.yaml:unit@{k}" for k in new)], cwd=root,
                          capture_output=True, text=True)
    if done.returncode != 0:
        from flexatt.errors import DataError

        raise DataError(lock_path, f"dvc commit of {', '.join(new)} failed: {done.stderr.strip()[-800:]}")
    with Repo(str(root)) as repo, repo.lock:
        lock = yaml.safe_load(lock_path.read_text())
        params_file = f"pipelines/{profile}/params.yaml"
        for name, item in new.items():
            entry = lock["stages"][f"unit@{name}"]
            commit = item["source"]["commit"]
            for dep in entry["deps"]:
                if dep["path"] == "src/flexatt":
                    dep.update(tree_hash(commit, root=root))
            entry["params"] = {params_file: composed_params(commit, profile, item["source"].get("overrides", []),
                                                            item["variant"], root)}
        dump_yaml(lock_path, lock)  # as DVC writes its lock
    return len(finished), len(pending)


def write_curves(profile: str, root: Path, finished: list[str]) -> None:
    """The ``dev_bleu_by_epoch`` plot of ``pipelines/<profile>/dvc.yaml``: the curve of every
    finished unit trained for the budget (``dvc plots show``), where the pipeline has that plot.
    The plot's ``y`` lines are replaced as text, the rest of the file (its comments, its layout)
    kept as it is."""
    import re

    from flexatt.products import parse_unit

    from flexatt import pipeline

    path = root / "pipelines" / profile / "dvc.yaml"
    text = path.read_text(encoding="utf-8")
    if pipeline.generated(path, profile):  # its plot is the generator's
        base = pipeline.base_of(profile, root)
        if base is not None:
            _write(path, pipeline.derive(profile, base, root))
        return
    trained = [n for n in sorted(finished) if parse_unit(n).kind == "train" and parse_unit(n).budget == 1.0]
    found = re.search(r"^(  - dev_bleu_by_epoch:\n(?:      (?!y:).*\n)*      y:\n)((?:        .*\n)*)", text, re.M)
    if found is None:  # a pipeline without the plot
        return
    lines = "".join(f"        ../../results/{profile}/units/{n}/curve.csv: val_bleu\n" for n in trained)
    _write(path, text[:found.start(2)] + lines + text[found.end(2):])


def budget_note(spec, done: dict[str, dict]) -> str | None:
    """A failed budget check: why a profile's plan ends with its first seed, or that the plan keeps
    its budget as final all the same (None where the check passed or is not done)."""
    from flexatt.products import budget_gain, budget_short

    if not budget_short(spec, done):
        return None
    check = spec.budget_check
    gains = f"{check.variant} trained x{check.factor:g} gains {budget_gain(spec, done):+.2f} dev BLEU"
    if check.final:
        return f"kept the budget (budget_check.final), although {gains}"
    return f"the other seeds and the pairs wait: {gains}, so the budget is short: raise train.epochs first"


def _write(path: Path, text: str) -> None:
    from flexatt.io import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", nargs="+")
    from flexatt.errors import FlexattError

    for profile in parser.parse_args(argv).profiles:
        try:
            finished, pending = freeze(profile)
        except FlexattError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"{profile}: {finished} finished units frozen, {pending} pending (pipelines/{profile}/units.yaml)")
        from flexatt.products import done_units, read_plan

        note = budget_note(read_plan(Path("conf/units") / f"{profile}.yaml"), done_units(Path("results") / profile / "units"))
        if note:
            print(f"{profile}: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
