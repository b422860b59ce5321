"""A long profile's units as data: the plan (``conf/units/<profile>.yaml``: which models, seeds,
budget check and fine-tuning pairs; the order they run in; the selections later units read, such
as the chosen β and the fixed window nearest flexible's) and the products a finished unit keeps in
``results/<profile>/units/<unit>/`` (written, verified against their manifest, loaded).

Nothing here trains or decodes: the report of a profile (:mod:`flexatt.stages.report`) and the
claims (:mod:`flexatt.unit_claims`) read units through this module alone, so that they depend on
no model code. Running a unit is :mod:`flexatt.units`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt

from flexatt.errors import ConfigError, DataError
from flexatt.tau import from_json, to_json

#: the files of a unit: always, with gold alignments, for a parent (units written before the
#: decodes and alignments were xz-compressed hold ``.json.gz`` files instead; both are read)
PRODUCTS = ("unit.json", "curve.csv", "decodes.json.xz")
ALIGNMENT_PRODUCTS = ("alignments.json.xz", "g.npz")
WEIGHTS = "weights.fp16.pt"
#: a fixed-window unit's match with its seed's flexible unit, decoded in its own stage: the flexible
#: model's records decoded there (its manifest's ``matched_by`` says which unit and weights)
MATCH_PRODUCT = "matched.json.xz"
#: variants whose decoding takes a threshold τ
TAU_ATTENTIONS = ("flexible", "flexible_sact")
SPLITS = ("dev", "test")


# --------------------------------------------------------------------------------------------
# The plan


class BudgetCheck(BaseModel):
    """The budget check: ``variant`` trained at ``factor`` times the profile's epochs. ``final``
    keeps the budget even where the check fails: the other seeds then run at it, and the report
    says what longer training still gains (for a budget whose next check no longer fits a unit)."""

    model_config = ConfigDict(extra="forbid")
    variant: str
    factor: Annotated[float, Field(gt=1.0)] = 1.5
    final: bool = False
    #: the other side of the claims the check's variant takes part in (Global for claim a), trained
    #: at the same ``factor`` at the first seed after the other seeds: does a claim's Δ move with
    #: the budget? (:func:`flexatt.unit_claims.budget_claims`)
    others: list[str] = Field(default_factory=list)


class Finetuning(BaseModel):
    """Fine-tuning units: the first seed's ``parent`` fine-tuned at each β of ``betas`` (fine-tuning
    seed 1) beside its control (β = 0), each ``epochs`` epochs at the constant ``finetune.lr`` (the
    control replays the same sequence); β selected on dev (:func:`select_beta`); then ``pairs``
    fine-tuning/control pairs at that β, fine-tuning seeds 1 to ``pairs`` (seed 1 is the sweep's),
    from the first seed's parent, and ``parent_pairs`` from the parent of each of ``parent_seeds``."""

    model_config = ConfigDict(extra="forbid")
    parent: str
    betas: Annotated[list[PositiveFloat], Field(min_length=1)]
    epochs: PositiveInt
    pairs: PositiveInt = 5
    tolerance: Annotated[float, Field(ge=0)] = 0.5
    #: the parents' training seeds beyond the first with ``parent_pairs`` pairs each at the selected
    #: β, fine-tuning seeds 1 to ``parent_pairs``: claim c's interval is over parents
    parent_seeds: list[PositiveInt] = Field(default_factory=list)
    parent_pairs: PositiveInt = 2
    #: the precision every pair at the selected β trains at (pinned in its stage's options), and
    #: the only one claim c reads: a corpus's pairs at one precision; ``None``: each pair's own
    precision: Optional[str] = None


class RunAgain(BaseModel):
    """A finished unit whose products a later fix of the code changes: those made from a commit
    that does not contain ``fixed_in`` are trained and decoded again (``why`` says what changed;
    the report names it)."""

    model_config = ConfigDict(extra="forbid")
    fixed_in: Annotated[str, Field(pattern=r"^[0-9a-f]{7,40}$")]
    why: Annotated[str, Field(min_length=1)]


class Plan(BaseModel):
    """``conf/units/<profile>.yaml``: which models a profile's units train, at which seeds.

    ``seeded`` variants train at every seed of ``seeds``; of ``fixed`` (the fixed-window
    baselines, trained at the first seed), the one whose dev window is nearest the first seed's
    flexible model at its selected τ (:func:`nearest_fixed`) trains at every seed too;
    ``others`` (further baselines) train at the first seed only; ``parents`` keep their weights (later units fine-tune them)."""

    model_config = ConfigDict(extra="forbid")
    seeds: Annotated[list[PositiveInt], Field(min_length=1)]
    seeded: Annotated[list[str], Field(min_length=1)]
    fixed: list[str] = Field(default_factory=list)
    others: list[str] = Field(default_factory=list)
    flexible: str = "flexible"
    parents: list[str] = Field(default_factory=list)
    budget_check: Optional[BudgetCheck] = None
    finetuning: Optional[Finetuning] = None
    #: finished units to run again where their products predate a fix (:func:`rerun_due`)
    run_again: dict[str, RunAgain] = Field(default_factory=dict)


@dataclass(frozen=True)
class Unit:
    """One model to train and decode: ``variant`` (a key of ``variants``) at ``seed``, for
    ``budget`` times the profile's epochs; or, with ``beta`` set, a fine-tuning of that unit's
    kept weights (its parent) with β = ``beta`` (0: the control) and fine-tuning seed ``run``."""

    variant: str
    seed: int
    budget: float = 1.0
    keep_weights: bool = False
    beta: Optional[float] = None
    run: int = 0

    @property
    def kind(self) -> str:
        """``train``, ``finetune`` or ``control``."""
        return "train" if self.beta is None else "control" if self.beta == 0 else "finetune"

    @property
    def parent(self) -> str | None:
        """The unit whose weights a fine-tuning or control starts from."""
        return None if self.beta is None else f"{self.variant}-s{self.seed}"

    @property
    def name(self) -> str:
        """``<variant>-s<seed>``, with ``-x<budget>`` for a budget check, ``-ft-b<β>-r<run>`` for a
        fine-tuning and ``-ctl-r<run>`` for its control."""
        base = f"{self.variant}-s{self.seed}"
        if self.kind == "finetune":
            return f"{base}-ft-b{self.beta:g}-r{self.run}"
        if self.kind == "control":
            return f"{base}-ctl-r{self.run}"
        return base + (f"-x{self.budget:g}" if self.budget != 1.0 else "")


def read_plan(path: str | os.PathLike) -> Plan:
    """The plan of ``conf/units/<profile>.yaml``; a wrong key or value is refused naming the file."""
    import yaml
    from pydantic import ValidationError

    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), "no unit plan for this profile")
    try:
        return Plan.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(k) for k in first["loc"])
        raise ConfigError(f"{path}: {where}", first["msg"]) from None


def plan(spec: Plan, done: dict[str, dict]) -> list[Unit]:
    """Every unit of ``spec`` in the order they run: the budget check's model at the first seed and
    the check itself (first: a failed check holds the rest of the plan), the first seed of every
    other model (fixed windows first, the flexible model last: its test decodes are matched to
    their windows; a flexible model that ran first with the check keeps its weights, and the fixed
    windows that finish after it are matched from them), the fine-tuning's β sweep beside its
    control, then the other seeds of the seeded models and of the fixed window nearest flexible's
    (per seed, flexible last again), then the fine-tuning/control pairs at the selected β (the
    first seed's parent's, then the other parents'), then the other sides of the budget check
    (``budget_check.others``). Units that wait for a choice made from finished units (``done``:
    name -> manifest) are listed once it can be made: the nearest fixed window's seeds, the pairs. Where the
    budget check has failed (:func:`budget_short`) and the budget is not kept as final, the plan ends
    with the first seed: more seeds of models trained too short would not decide anything; the
    profile's budget is raised first (:func:`budget_waits`)."""
    first, rest = spec.seeds[0], spec.seeds[1:]
    order = [*dict.fromkeys([*spec.seeded, *spec.fixed, *spec.others])]
    order = [v for v in order if v != spec.flexible]
    if spec.flexible in spec.seeded:
        order.append(spec.flexible)
    units = [Unit(v, first, keep_weights=v in spec.parents) for v in order]
    if spec.budget_check is not None:
        check = spec.budget_check.variant
        units.append(Unit(check, first, spec.budget_check.factor))
        if check != spec.flexible or check in spec.parents:  # the check first: it decides whether the rest is worth it
            base = [u for u in units[:-1] if u.variant == check]
            units = [*base, units[-1], *[u for u in units[:-1] if u not in base]]
    ft = spec.finetuning
    if ft is not None:
        units.append(Unit(ft.parent, first, beta=0.0, run=1))
        units += [Unit(ft.parent, first, beta=b, run=1) for b in ft.betas]
    if budget_waits(spec, done):
        return units  # the other seeds and the pairs wait for a budget that passes its check
    nearest = nearest_fixed(spec, first, done)
    seeded = [v for v in spec.seeded if v != spec.flexible] + ([nearest] if nearest and nearest not in spec.seeded else [])
    seeded += [spec.flexible] if spec.flexible in spec.seeded else []  # last: matched to that seed's fixed window
    units += [Unit(v, seed, keep_weights=v in spec.parents) for seed in rest for v in seeded]
    beta = select_beta(spec, done) if ft is not None else None
    if beta is not None:
        units += [Unit(ft.parent, first, beta=b, run=r) for r in range(2, ft.pairs + 1) for b in (beta, 0.0)]
        units += [Unit(ft.parent, s, beta=b, run=r) for s in ft.parent_seeds if s != first
                  for r in range(1, ft.parent_pairs + 1) for b in (beta, 0.0)]
    if spec.budget_check is not None:
        units += [Unit(v, first, spec.budget_check.factor) for v in spec.budget_check.others]
    return units


#: the most dev BLEU that training longer may still gain for the budget to count as enough
BUDGET_GAIN = 0.5


def budget_gain(spec: Plan, done: dict[str, dict]) -> float | None:
    """The dev BLEU (τ = ∞, beam search) that the budget check's model, trained ``factor`` times
    the budget, gains over the same model trained for the budget, at the first seed; ``None``
    without a check or until both units are done."""
    check = spec.budget_check
    if check is None:
        return None
    base, longer = (done.get(Unit(check.variant, spec.seeds[0], f).name) for f in (1.0, check.factor))
    if base is None or longer is None:
        return None
    return dev_gain(base, longer)


def dev_gain(base: dict, longer: dict) -> float:
    """The dev BLEU (τ = ∞) the unit ``longer`` gains over the unit ``base`` (manifests)."""
    return round(longer["summary"]["dev"]["inf"]["bleu"] - base["summary"]["dev"]["inf"]["bleu"], 2)


def budget_short(spec: Plan, done: dict[str, dict]) -> bool:
    """Whether the budget check is done and failed: training longer gains :data:`BUDGET_GAIN` dev
    BLEU or more."""
    gain = budget_gain(spec, done)
    return gain is not None and gain >= BUDGET_GAIN


def budget_waits(spec: Plan, done: dict[str, dict]) -> bool:
    """Whether the other seeds and the pairs wait for a longer budget: the check failed
    (:func:`budget_short`) and the plan does not keep its budget as final."""
    return budget_short(spec, done) and not spec.budget_check.final


def phase(spec: Plan, unit: Unit) -> int:
    """The stage of the plan ``unit`` belongs to: 0 the first seed of every claim (the budget
    check and the fine-tuning's β sweep beside its control included), 1 the other training seeds,
    2 the fine-tuning/control pairs after the sweep's and the budget check's other sides.
    :func:`plan` lists one profile's units in this order; a run of several profiles finishes a
    stage on every one before the next."""
    first = spec.seeds[0]
    if unit.kind != "train":
        return 2 if unit.run > 1 or unit.seed != first else 0
    if unit.budget != 1.0 and spec.budget_check is not None and unit.variant in spec.budget_check.others:
        return 2
    return 1 if unit.seed != first else 0


def comparison_group(unit: Unit) -> tuple:
    """The units that ``unit``'s numbers are paired with, as a key: the models trained at its seed
    (each paired claim compares two models of one seed, the budget check one model at two
    budgets), or the fine-tunings and control of its parent at its run (the β sweep at run 1, a
    fine-tuning/control pair at each later run)."""
    return ("seed", unit.seed) if unit.kind == "train" else ("run", unit.parent, unit.run)


def precision_conflicts(unit: Unit, precision: str, done: dict[str, dict]) -> dict[str, str]:
    """The finished units of ``unit``'s :func:`comparison_group` that trained at another precision
    than ``precision`` (name -> theirs, ``training.precision`` of the manifest). The two sides of
    a paired comparison train at one precision: bf16-mixed and float32 training end in different
    models, as another seed does, and a pair that mixed them would count that difference as the
    variants'. Different seeds (or pairs) may differ: the interval over seeds takes it in."""
    key = comparison_group(unit)
    return {name: str(m["training"]["precision"]) for name, m in sorted(done.items())
            if name != unit.name and "precision" in m.get("training", {})
            and comparison_group(parse_unit(name)) == key and str(m["training"]["precision"]) != str(precision)}


def select_beta(spec: Plan, done: dict[str, dict]) -> float | None:
    """The fine-tuning's β, chosen on dev once the sweep's units are done, by the rule the
    ``sweep_beta`` stage uses (:func:`flexatt.tau_search.select_beta`): among the βs whose dev BLEU
    at τ = ∞ is at most ``tolerance`` below the control's, the one whose dev window at its own
    selected τ is smallest. ``None`` while a sweep unit is missing or when no β keeps the
    control's BLEU (the pairs then wait for a decision)."""
    from flexatt.tau_search import select_beta as rule

    ft = spec.finetuning
    first = spec.seeds[0]
    control = done.get(Unit(ft.parent, first, beta=0.0, run=1).name)
    runs = {b: done.get(Unit(ft.parent, first, beta=b, run=1).name) for b in ft.betas}
    if control is None or any(m is None for m in runs.values()):
        return None
    points = [{"beta": b, "bleu": m["summary"]["dev"]["inf"]["bleu"], "window": m["summary"]["dev"]["selected"]["window"]}
              for b, m in runs.items()]
    chosen = rule(points, control["summary"]["dev"]["inf"]["bleu"], ft.tolerance)
    return chosen["beta"] if chosen else None


def nearest_fixed(spec: Plan, seed: int, done: dict[str, dict]) -> str | None:
    """The fixed-window variant whose dev window (τ = ∞) is nearest the flexible model's dev
    window at its selected τ, all at ``seed``; ``None`` until those units are done."""
    flexible = done.get(Unit(spec.flexible, seed).name)
    if flexible is None or not spec.fixed or any(Unit(v, seed).name not in done for v in spec.fixed):
        return None
    target = flexible["summary"]["dev"]["selected"]["window"]
    return min(spec.fixed, key=lambda v: (abs(done[Unit(v, seed).name]["summary"]["dev"]["inf"]["window"] - target), v))


def budget_overrides(epochs: int, halve_from: int, factor: float) -> list[str]:
    """``train.epochs`` and ``train.lr_halve_from_epoch`` for ``factor`` times the budget:
    ``ceil(factor · epochs)`` epochs, the extra ones at the full learning rate, then the same
    halvings as the budget (the decay's length is kept)."""
    longer = math.ceil(factor * epochs)
    return [f"train.epochs={longer}", f"train.lr_halve_from_epoch={halve_from + longer - epochs}"]




def tau_key(tau: float) -> str:
    """``inf`` or the τ as ``%g``: the key of an alignment or g_t entry."""
    return "inf" if math.isinf(tau) else f"{tau:g}"




# --------------------------------------------------------------------------------------------
# Writing and reading products


def pack_json(obj: Any, name: str) -> bytes:
    """``obj`` as compact JSON compressed for the product file ``name``: xz (``.json.xz``: its
    large dictionary shares the hypotheses that repeat from one τ to the next, about a quarter
    of gzip's size on a flexible unit's decodes) or gzip (``.json.gz``, units written before);
    neither stores a timestamp, so the same products give the same bytes."""
    import lzma

    data = json.dumps(to_json(obj), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if name.endswith(".xz"):
        return lzma.compress(data, format=lzma.FORMAT_XZ)
    if name.endswith(".gz"):
        buffer = io.BytesIO()
        with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, compresslevel=9) as gz:
            gz.write(data)
        return buffer.getvalue()
    raise ValueError(f"{name}: a product is .json.xz or .json.gz")


def product_path(folder: Path, stem: str) -> Path | None:
    """The unit's ``<stem>.json.xz`` or, written before, ``<stem>.json.gz``; ``None`` if neither."""
    return next((folder / f"{stem}.json{ext}" for ext in (".xz", ".gz") if (folder / f"{stem}.json{ext}").is_file()),
                None)


def unpack_json(path: Path) -> Any:
    import lzma

    data = path.read_bytes()
    return from_json(json.loads(lzma.decompress(data) if path.suffix == ".xz" else gzip.decompress(data)))


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_products(out: Path, manifest: dict, files: dict[str, bytes]) -> None:
    """Write ``files`` (name -> bytes) and ``unit.json`` (``manifest`` with each file's size and
    SHA-256) into ``out``, atomically as a whole: a unit's folder is complete or absent."""
    from flexatt.io import atomic_path

    out = Path(out)
    with atomic_path(out) as tmp:
        tmp = Path(tmp)
        tmp.mkdir(parents=True)
        listed = {}
        for name, data in files.items():
            (tmp / name).write_bytes(data)
            listed[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        text = json.dumps(to_json({**manifest, "files": listed}), indent=2, ensure_ascii=False) + "\n"
        (tmp / "unit.json").write_text(text, encoding="utf-8")
        if out.exists():
            import shutil

            shutil.rmtree(out)


def verified_manifest(folder: str | os.PathLike) -> dict:
    """A unit's manifest (``unit.json``), once every file it lists is the one the unit wrote
    (size and SHA-256) and it lists every product.

    Raises:
        DataError: as :func:`load_products`.
    """
    folder = Path(folder)
    try:
        manifest = from_json(json.loads((folder / "unit.json").read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(folder / "unit.json", f"unreadable unit manifest ({exc})") from None
    for name, info in manifest.get("files", {}).items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != info["bytes"] or file_sha256(path) != info["sha256"]:
            raise DataError(path, "missing or not the file the unit wrote (size or SHA-256 differ)")
    listed = manifest.get("files", {})
    missing = [name for name in PRODUCTS[1:] if name not in listed and name.replace(".xz", ".gz") not in listed]
    if missing:
        raise DataError(folder / "unit.json", f"lists no {', '.join(missing)}")
    return manifest


def load_products(folder: str | os.PathLike) -> dict:
    """A unit's products: ``manifest``, ``decodes``, ``alignments`` (or ``None``), ``g``
    (name -> array) and ``curve`` (rows of the learning curve).

    Raises:
        DataError: a file the manifest lists is missing or differs from what was written
            (size or SHA-256), or ``unit.json`` is unreadable (the message names the file).
    """
    import csv

    folder = Path(folder)
    manifest = verified_manifest(folder)
    with open(folder / "curve.csv", newline="", encoding="utf-8") as f:
        curve = list(csv.DictReader(f))
    g = {}
    if (folder / "g.npz").is_file():
        with np.load(folder / "g.npz") as archive:
            g = {key: archive[key] for key in archive.files}
    alignments = product_path(folder, "alignments")
    return {"manifest": manifest, "decodes": unpack_json(product_path(folder, "decodes")), "curve": curve, "g": g,
            "alignments": unpack_json(alignments) if alignments else None}


def done_units(folder: str | os.PathLike) -> dict[str, dict]:
    """The manifests of the finished units under ``folder`` (``results/<profile>/units``). A
    fixed-window unit matched to its seed's flexible unit in its own decoding (``matched_by``)
    adds that match to the flexible unit's ``summary["matched"]``, as if the flexible unit had
    decoded it (:func:`match_records` gives its records)."""
    folder = Path(folder)
    found = {}
    for manifest in sorted(folder.glob("*/unit.json")) if folder.is_dir() else []:
        found[manifest.parent.name] = from_json(json.loads(manifest.read_text(encoding="utf-8")))
    for name, manifest in sorted(found.items()):
        by = manifest.get("matched_by")
        if by is not None and by["unit"] in found:
            flexible = found[by["unit"]]
            kept = flexible.get("files", {}).get(WEIGHTS, {}).get("sha256")
            if kept != by["weights_sha256"]:
                raise DataError(folder / name / "unit.json", f"matched to weights of {by['unit']} other than "
                                "the ones it keeps (SHA-256 differs)")
            matched = flexible["summary"].setdefault("matched", {})
            if name in matched:
                raise DataError(folder / name / "unit.json", f"matched to {by['unit']}, which matched it too")
            matched[name] = by["match"]
    return found


def ran_on_edits(manifest: dict, root: str | os.PathLike = ".") -> bool:
    """Whether a finished unit ran on uncommitted edits to what it runs: its record says its tree
    had edits (``source.uncommitted_edits``) and the code of its recorded commit did not refuse
    them before training. Units refuse to train on edits to the package, ``conf/`` or their
    params file (:func:`flexatt.units.refuse_uncommitted`); a unit whose commit has that refusal
    and still records edits had them in other files (a ``dvc.lock`` its pipeline's data stages
    wrote): not what it ran. Without git or the commit, the record stands."""
    import subprocess

    source = manifest.get("source") or {}
    if not source.get("uncommitted_edits"):
        return False
    if not source.get("commit"):
        return True
    shown = subprocess.run(["git", "show", f"{source['commit']}:src/flexatt/units.py"], cwd=root,
                           capture_output=True, text=True)
    return shown.returncode != 0 or "def refuse_uncommitted(" not in shown.stdout


def predates(manifest: dict, commit: str, root: str | os.PathLike = ".") -> bool:
    """Whether a finished unit's products come from a commit that does not contain ``commit``
    (its recorded ``source.commit`` lacks it in its history). A record without a commit, or a
    commit that this repository's history does not hold, predates it."""
    import subprocess

    recorded = (manifest.get("source") or {}).get("commit")
    if not recorded:
        return True
    return subprocess.run(["git", "merge-base", "--is-ancestor", commit, recorded], cwd=root,
                          capture_output=True).returncode != 0


def rerun_due(done: dict[str, dict], root: str | os.PathLike = ".", spec: Plan | None = None) -> set[str]:
    """The finished units to train and decode again (as pending units) until their products say
    otherwise: those that ran on uncommitted edits to what they ran (:func:`ran_on_edits`: their
    products name code that did not run), and those the plan's ``run_again`` (``spec``) lists whose
    products predate the fix it names (:func:`predates`)."""
    again = {name for name, m in done.items() if ran_on_edits(m, root)}
    for name, entry in (spec.run_again if spec is not None else {}).items():
        if name in done and predates(done[name], entry.fixed_in, root):
            again.add(name)
    return again


def why_again(name: str, spec: Plan) -> str:
    """Why a finished unit is run again (:func:`rerun_due`), in a few words for the report."""
    entry = spec.run_again.get(name)
    return entry.why if entry is not None else "ran on uncommitted edits to what it ran"


def listed_again(listing: str | os.PathLike, done: dict[str, dict]) -> set[str]:
    """The finished units (``done``) that a pipeline's ``units.yaml`` (``listing``) lists as
    pending: to be run again (:func:`rerun_due`, which needs the repository's history, decided
    that when :mod:`flexatt.freeze` wrote the listing; a clone without that history reads it
    from the listing). No listing: none."""
    import yaml

    path = Path(listing)
    if not path.is_file():
        return set()
    pending = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("pending") or {}
    return {item["unit"] for item in pending.values()} & set(done)


def match_records(folder: str | os.PathLike, flexible: str, manifests: dict[str, dict]) -> list[dict]:
    """The decodes of the flexible unit ``flexible`` made by the fixed-window units under
    ``folder`` that were matched to it in their own decoding (``manifests``: :func:`done_units`)."""
    records = []
    for name, manifest in sorted(manifests.items()):
        if manifest.get("matched_by", {}).get("unit") == flexible:
            verified_manifest(Path(folder) / name)
            records += unpack_json(Path(folder) / name / MATCH_PRODUCT)["records"]
    return records




UNIT_NAME = re.compile(r"(?P<variant>\w+)-s(?P<seed>\d+)(?:-x(?P<budget>[\d.]+)|-ft-b(?P<beta>[\d.e+-]+)-r(?P<run>\d+)"
                       r"|-ctl-r(?P<control>\d+))?")


def parse_unit(name: str) -> Unit:
    """The unit named ``<variant>-s<seed>`` with ``-x<budget>``, ``-ft-b<β>-r<run>`` or
    ``-ctl-r<run>`` (:attr:`Unit.name`)."""
    match = UNIT_NAME.fullmatch(name)
    try:
        if match is None:
            raise ValueError
        g = match.groupdict()
        if g["beta"] is not None:
            unit = Unit(g["variant"], int(g["seed"]), beta=float(g["beta"]), run=int(g["run"]))
        elif g["control"] is not None:
            unit = Unit(g["variant"], int(g["seed"]), beta=0.0, run=int(g["control"]))
        else:
            unit = Unit(g["variant"], int(g["seed"]), float(g["budget"] or 1.0))
    except ValueError:
        raise ConfigError(name, "a unit is named <variant>-s<seed>, with -x<budget>, -ft-b<beta>-r<run> "
                          "or -ctl-r<run>") from None
    if unit.name != name or unit.budget <= 0 or (unit.beta is not None and unit.beta < 0):
        raise ConfigError(name, f"not a unit's name as written (that unit is {unit.name})")
    return unit


#: the data files whose digests every unit of a profile records and shares
DATA_KEYS = ("train.npz", "dev.npz", "test.npz", "src.model", "tgt.model", "dev.ref", "test.ref")


def data_digests(tok_dir: str | os.PathLike) -> dict[str, str]:
    """The digests of a profile's tokenized data (:data:`DATA_KEYS`), as a unit records them."""
    from flexatt.io import file_digest

    return {name: file_digest(Path(tok_dir) / name) for name in DATA_KEYS}


def data_difference(digests: dict[str, str], done: dict[str, dict]) -> tuple[str, str] | None:
    """The first finished unit and data file whose recorded digest differs from ``digests``
    (None: every unit trained on these data)."""
    for name, manifest in done.items():
        recorded = manifest.get("data", {})
        for key, digest in digests.items():
            if key in recorded and recorded[key] != digest:
                return name, key
    return None
