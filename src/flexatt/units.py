"""Units of a long profile run: one trained model and everything decoded from it, small enough
to keep in git.

A long run (the ``bible`` and ``grc`` profiles) is a set of units (``conf/units/<profile>.yaml``
lists them; :func:`flexatt.products.plan` orders them, and :mod:`flexatt.products` writes and reads
what a unit keeps). A unit trains one model under the profile's equal budget
(``train.epochs`` under the ``fixed`` learning-rate schedule, early stopping off; the budget check
trains at a multiple of it, :func:`flexatt.products.budget_overrides`), takes its last checkpoint (the checkpoint
rule: the budget's end) and decodes what evaluation, comparison and the claims read, so that they
need no checkpoint:

- dev and test at τ = ∞ (beam search, ``decode``), each with its hypotheses, the per-sentence
  windows (positions scored, summed over steps; steps; source lengths) and sacrebleu's
  per-sentence BLEU sufficient statistics;
- a flexible model's dev τ search (the sweep_tau grid and bisections, :func:`flexatt.tau_search.search_points`,
  the selection rule :func:`flexatt.tau_search.select_tau`) and, on both splits, the trade-off
  curve's τs; test at the selected τ;
- where the corpus has gold word alignments, the forced-decoding alignments of every reference
  (at τ = ∞ and at the selected τ), their AER, the AER of a length-proportional diagonal on the
  same links (:func:`flexatt.decoding.alignments.diagonal_links`: the alignment that reads no words), and the g_t values;
- its learning curve, learning-rate sequence and provenance (commit, machine, threads,
  precision, wall minutes and the process's CPU minutes: against wall minutes times its threads,
  the share of its cores it had, so that a unit slowed by other work on the machine shows it).
  A unit interrupted and started again resumes its training from the last epoch while the code
  its process runs (this module's imports, the trainer's among them) is unchanged, else trains
  afresh; its minutes are those of every attempt that trained its model (:class:`AttemptClock`),
  and it says how many.

A model that later units fine-tune (``parents``) keeps its weights, rounded to float16
(``weights.fp16.pt``, about half of a float32 state); the unit then decodes those rounded weights,
so every number of the unit comes from the one set of weights that is kept.

Products (:data:`PRODUCTS`) are written to ``<out>/``: ``unit.json`` (the manifest and every
summary figure), ``curve.csv``, ``decodes.json.xz``, ``alignments.json.xz`` and ``g.npz`` where
there are gold alignments, ``weights.fp16.pt`` for a parent. :func:`load_products` reads them
back and checks that the files the manifest names are complete (sizes and SHA-256).

``python -m flexatt.units run UNIT --out DIR`` runs one unit in the current folder (its
``params.yaml``, or the file ``$FLEXATT_PARAMS`` names, as a long profile's pipeline does; its
tokenized data); ``python -m flexatt.units match DIR --match UNIT=WINDOW``
matches a finished flexible unit with kept weights to a fixed window finished after it
(:func:`match_later`); ``scripts/units.py`` runs a profile's pending units in a
kept copy and commits-ready copies their products into ``results/<profile>/units/``.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from flexatt.errors import ConfigError, DataError
from flexatt.products import (ALIGNMENT_PRODUCTS, MATCH_PRODUCT, PRODUCTS, SPLITS, TAU_ATTENTIONS, WEIGHTS, Unit, file_sha256,
                              product_path,
                              budget_overrides, load_products, pack_json, parse_unit, read_plan, tau_key, write_products)
from flexatt.tau import INF

if TYPE_CHECKING:
    from flexatt.points import Decoder

# --------------------------------------------------------------------------------------------
# Decoding a unit's products


#: the name a unit's one model has in its :class:`flexatt.points.Decoder`
MODEL = "unit"


def decode_products(model, p, tok_dir: Path, filter_dir: Path,
                    targets: dict[str, float] | None = None) -> tuple[dict, dict, dict | None, dict]:
    """Every decode of a unit's model: ``(summary, decodes, alignments, g_values)``.

    ``summary[split]``: ``inf`` (and, for a flexible model, ``selected``, ``selected_tau``,
    ``points``) as τ/window/BLEU points, and ``aer`` / ``aer_diagonal`` where the split has gold
    links. ``targets`` (fixed-window unit -> its dev window at τ = ∞): a flexible model is
    decoded on test at the τ whose dev window equals each (:func:`flexatt.tau_search.match_window`),
    ``summary["matched"][unit]``. ``decodes``: ``{"records": [...]}``, one stored record per (split, τ).
    ``alignments``: ``{split: {tau label: ["i-j ...", ...]}}`` or ``None``. ``g_values``:
    ``{"<split>/<tau label>": array}`` of the g_t seen in forced decoding (flexible models).
    A budget check's units are decoded in full too: claims a and b are re-asked at its budget
    (:func:`flexatt.unit_claims.budget_claims`).
    """
    from flexatt.data.evalset import EvalSet
    from flexatt.points import Decoder, decode_options, summary_point
    from flexatt.tau_search import dev_grid, search_points, select_tau

    st = p.sweep_tau
    options = decode_options(p)
    sets = {s: EvalSet.load(tok_dir, s) for s in SPLITS}
    decoder = Decoder(None, sets, options=options, summary=summary_point)
    decoder.use(MODEL, model)
    flexible = model.config.get("attention") in TAU_ATTENTIONS
    summary: dict[str, dict] = {s: {"inf": decoder.point(MODEL, s, INF)} for s in SPLITS}
    taus: dict[str, list[float]] = {s: [INF] for s in SPLITS}
    if flexible:
        grid = dev_grid(st.grid, sets["dev"].mean_src_len, st.add_log_mean_len)
        reference = summary["dev"]["inf"]["bleu"]
        points = search_points(lambda tau: decoder.point(MODEL, "dev", tau), grid, reference, st.tolerance,
                               st.search_steps)
        chosen = select_tau(points, reference, st.tolerance)
        selected = chosen["tau"] if chosen else INF
        summary["dev"].update(points=points, selected_tau=selected,
                              selected=chosen or summary["dev"]["inf"])
        curve = [t for t in st.curve_taus if not math.isinf(t)]  # τ = ∞: decoded above
        for tau in curve:
            decoder.point(MODEL, "dev", tau)
        summary["test"]["selected"] = decoder.point(MODEL, "test", selected)
        summary["test"]["selected_tau"] = summary["dev"]["selected_tau"]
        summary["test"]["curve"] = [decoder.point(MODEL, "test", tau) for tau in curve]
        taus = {s: [math.inf, *([selected] if not math.isinf(selected) else [])] for s in SPLITS}
        summary["matched"] = match_targets(decoder, targets or {}, p.compare.search_steps)
    alignments, g_values = _alignments(model, sets, filter_dir, taus, options, summary)
    return summary, _decodes(decoder, options), alignments, g_values


def flexible_decoder(folder: Path, p, to: list[str]) -> tuple[Decoder, dict]:
    """A finished flexible unit's kept weights (``weights.fp16.pt``, the ones all its numbers come
    from) as the model :data:`MODEL` of a :class:`flexatt.points.Decoder` on ``p``'s data, its stored decodes loaded (so a τ it decoded
    is not decoded again), and its products. The data must be the unit's (digests), and so must the
    beam settings. ``to``: the fixed-window units it is to be matched to (named in a refusal)."""
    from flexatt.data.evalset import EvalSet
    from flexatt.io import file_digest
    from flexatt.points import Decoder, decode_options, summary_point

    folder = Path(folder)
    products = load_products(folder)
    manifest = products["manifest"]
    if not (folder / WEIGHTS).is_file():
        raise DataError(folder / WEIGHTS, f"{manifest['unit']} kept no weights: it cannot be matched to "
                        f"{', '.join(sorted(to))} after its run")
    tok_dir = Path(p.train.data_dir)
    for name, digest in manifest["data"].items():
        if file_digest(tok_dir / name) != digest:
            raise DataError(tok_dir / name, f"not the data unit {manifest['unit']} decoded (digest differs)")
    options = decode_options(p)
    if (options.beam_size, options.alpha) != (manifest["decode"]["beam_size"], manifest["decode"]["alpha"]):
        raise ConfigError("decode", f"beam {options.beam_size}, alpha {options.alpha}: unit {manifest['unit']} "
                          f"decoded with beam {manifest['decode']['beam_size']}, alpha {manifest['decode']['alpha']}")
    decoder = Decoder(None, {s: EvalSet.load(tok_dir, s) for s in SPLITS}, options=options, summary=summary_point)
    decoder.use(MODEL, load_weights(folder / WEIGHTS))
    decoder.load(MODEL, products["decodes"]["records"])
    return decoder, products


def match_later(folder: Path, targets: dict[str, float], *, params: str | None = None,
                overrides: tuple[str, ...] = (), source: dict | None = None) -> dict:
    """Match a finished flexible unit to fixed windows that finished after it (``targets``: name
    -> dev window at τ = ∞, those not matched yet), in its own folder: its kept weights decoded as
    :func:`match_targets` does in the unit's own run (:func:`flexible_decoder`), the dev points
    already stored bracketing the search, so only the new τs are decoded. The decodes,
    ``summary["matched"]`` and the manifest's ``amended`` list (what was added, by which commit,
    on which machine, in how many minutes) are rewritten in place; every other product is kept
    byte for byte. (A pipeline's fixed-window unit is matched from its own decoding stage instead,
    :func:`decode_unit`'s ``match_flexible``: a stage writes only its own folder.) Returns the
    manifest."""
    from flexatt import config as C
    from flexatt import schema
    from flexatt.parallel import intra_op_threads

    started = time.perf_counter()
    folder = Path(folder)
    manifest = {k: v for k, v in load_products(folder)["manifest"].items() if k != "files"}
    todo = {n: w for n, w in targets.items() if n not in manifest["summary"].get("matched", {})}
    if not todo:
        return manifest
    p = schema.validate(C.load_params(params, [*overrides, f"train.seed={manifest['seed']}"]))
    decoder, products = flexible_decoder(folder, p, list(todo))
    with intra_op_threads(p.train.threads):
        matched = match_targets(decoder, todo, p.compare.search_steps)
    manifest["summary"].setdefault("matched", {}).update(matched)
    manifest.setdefault("amended", []).append({
        "matched": sorted(todo), "source": source or _git_commit(),
        "machine": _machine(), "minutes": round((time.perf_counter() - started) / 60, 1)})
    files = {name: (folder / name).read_bytes() for name in products["manifest"]["files"]}
    decodes = product_path(folder, "decodes").name  # the unit's own format
    files[decodes] = pack_json(_decodes(decoder, decoder.options), decodes)
    write_products(folder, manifest, files)
    return manifest


def match_into(unit: Unit, window: float, flexible: Path, p) -> tuple[dict, bytes]:
    """A fixed-window unit's match with the finished flexible unit of its seed (``flexible``: its
    product folder, weights kept): the τ at which that model's dev window equals ``window`` (this
    unit's dev window at τ = ∞) and test decoded there (:func:`match_targets`). Returns the
    manifest entry ``matched_by`` (the flexible unit, the SHA-256 of the weights decoded, the
    match) and the product :data:`flexatt.products.MATCH_PRODUCT`: the flexible model's records
    decoded here (its folder is not touched; :func:`flexatt.products.done_units` reads the match
    as the flexible unit's)."""
    decoder, products = flexible_decoder(flexible, p, [unit.name])
    manifest = products["manifest"]
    if manifest["seed"] != unit.seed or manifest["budget"] != 1.0 or manifest["kind"] != "train":
        raise ConfigError(str(flexible), f"{manifest['unit']} is not the flexible unit of {unit.name}'s seed")
    stored = {(r["split"], r["tau"]) for r in decoder.stored(MODEL, SPLITS)}
    entry = match_targets(decoder, {unit.name: window}, p.compare.search_steps)[unit.name]
    new = [r for r in decoder.stored(MODEL, SPLITS) if (r["split"], r["tau"]) not in stored]
    by = {"unit": manifest["unit"], "weights_sha256": file_sha256(Path(flexible) / WEIGHTS), "match": entry}
    return by, pack_json({"records": new}, MATCH_PRODUCT)


def _decodes(decoder: Decoder, options) -> dict:
    """The stored decodes: the beam settings and every record, by split then τ."""
    return {"beam_size": options.beam_size, "alpha": options.alpha, "records": decoder.stored(MODEL, SPLITS)}


def match_targets(decoder: Decoder, targets: dict[str, float], steps: int) -> dict[str, dict]:
    """For each fixed window (name -> its dev window), the τ at which this flexible model's dev
    window equals it, bracketed by the dev points already decoded, and test decoded there."""
    from flexatt.tau_search import match_window

    matched = {}
    for name, target in sorted(targets.items()):
        known = decoder.points(MODEL, "dev")
        match, new = match_window(lambda tau: decoder.point(MODEL, "dev", tau), known, target, steps)
        tau = match["tau"]
        matched[name] = {"target": target, "tau": tau, "dev": match, "test": decoder.point(MODEL, "test", tau),
                         "decoded": len(new)}
        print(f"unit: matched {name}'s dev window {target:.2f} at tau={tau:g}: dev {match['window']:.2f}, "
              f"test window {matched[name]['test']['window']:.2f} BLEU {matched[name]['test']['bleu']:.2f}", flush=True)
    return matched


def _alignments(model, sets: dict, filter_dir: Path, taus: dict[str, list[float]], options,
                summary: dict) -> tuple[dict | None, dict]:
    from flexatt.metrics import aer
    from flexatt.decoding.alignments import diagonal_links, forced_alignments, read_gold, word_count

    alignments: dict[str, dict] = {}
    g_values: dict[str, np.ndarray] = {}
    for split, data in sets.items():
        gold = read_gold(filter_dir / f"{split}.align", len(data.split))
        if gold is None:
            continue
        diagonal = [diagonal_links(word_count(data.src_vocab, data.split.src(i)), word_count(data.tgt_vocab, data.split.tgt(i)))
                    for i in range(len(data.split))]
        summary[split]["aer_diagonal"] = round(aer(diagonal, gold, restrict_to_covered=True), 4)
        alignments[split] = {}
        for tau in taus[split]:
            links, g, _ = forced_alignments(model, data, tau, options.batch_size, options.backend)
            key = tau_key(tau)
            alignments[split][key] = [" ".join(f"{s}-{t}" for s, t in sorted(sent)) for sent in links]
            summary[split].setdefault("aer", {})[key] = round(aer(links, gold, restrict_to_covered=True), 4)
            if g is not None:
                g_values[f"{split}/{key}"] = g.astype(np.float16)
        print(f"unit: {split} AER {summary[split]['aer']} (diagonal {summary[split]['aer_diagonal']})", flush=True)
    return (alignments or None), g_values


# --------------------------------------------------------------------------------------------
# Running one unit


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def _weights(checkpoint: Path, float16: bool) -> dict:
    """What :func:`load_weights` reads: the state dict of ``checkpoint``'s model (its floating-point
    tensors rounded to float16 where ``float16``: a parent's ``weights.fp16.pt``, about half of a
    float32 state), its model configuration and vocabulary sizes."""
    from flexatt.checkpoints import checkpoint_hparams, load_model

    state = load_model(checkpoint).state_dict()
    if float16:
        state = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
    hparams = checkpoint_hparams(checkpoint)
    return {"state_dict": state, "model_cfg": hparams["model_cfg"], "src_vocab": hparams["src_vocab"],
            "tgt_vocab": hparams["tgt_vocab"], "vocab_digests": hparams.get("vocab_digests")}


def load_weights(path: str | os.PathLike):
    """A model from a unit's weights (``weights.fp16.pt``, or a training's float32 ``model.pt``),
    in float32 and eval mode."""
    import torch

    from flexatt.model import build_model, joint_vocabulary

    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = build_model(saved["model_cfg"], saved["src_vocab"], saved["tgt_vocab"],
                        joint_vocab=joint_vocabulary(saved.get("vocab_digests")))
    model.load_state_dict(saved["state_dict"])
    return model.eval()


def _git(*args: str) -> str:
    import subprocess

    return subprocess.run(["git", *args], capture_output=True, text=True, check=False).stdout.strip()


def _runs(params: str | None = None) -> list[str]:
    """What a unit runs, as git paths: the package, ``conf/`` and its params file."""
    return ["src", "conf", params or os.environ.get("FLEXATT_PARAMS") or "params.yaml"]


def _git_commit(params: str | None = None) -> dict:
    """The commit HEAD names and whether what a unit runs (:func:`_runs`) holds uncommitted edits
    (other files, such as a ``dvc.lock`` its pipeline's stages update, do not count)."""
    return {"commit": _git("rev-parse", "HEAD") or None,
            "uncommitted_edits": bool(_git("status", "--porcelain", "--untracked-files=no", "--", *_runs(params)))}


def refuse_uncommitted(params: str | None) -> None:
    """Refuse to train where what a unit runs holds uncommitted edits (the package, ``conf/``, its
    params file): its ``source.commit`` would name code that did not run. Outside a git working
    tree there is nothing to compare, and the unit records no commit."""
    edited = _git("status", "--porcelain", "--untracked-files=all", "--", *_runs(params))
    if edited:
        files = ", ".join(line.split(maxsplit=1)[1] for line in edited.splitlines()[:5])
        raise ConfigError("source", f"uncommitted edits to what the unit runs ({files}): commit them first, "
                          "so that the unit's record names the code it ran")


class AttemptClock:
    """The wall and CPU seconds a unit's training took over all of its attempts.

    A unit whose process ended mid-training (killed, the machine gone) resumes from its last
    epoch when started again, so the minutes of its last process alone would understate it. The
    running attempt writes its seconds so far, added to its predecessors', to ``path`` every
    ``every`` seconds (a killed process writes nothing on its way out: an interruption loses at
    most ``every`` seconds of the record); the part of an epoch an interruption cut off, which the
    next attempt trains again, counts, since it was spent. ``path`` lies in the training's resume
    folder, beside ``last.ckpt``: a run that starts afresh (its resume state was of other code or
    data) deletes that folder, and the earlier attempts' seconds with it, since they trained
    another model; the clock notices the file gone and counts this attempt alone.
    Hand-written: a heartbeat file of three numbers needs no library."""

    def __init__(self, path: Path, every: float = 30.0, since: tuple[float, float] | None = None):
        """``since``: this attempt's start, ``(time.perf_counter(), time.process_time())``
        (default: now)."""
        self.path, self.every = Path(path), every
        self._wall0, self._cpu0 = since or (time.perf_counter(), time.process_time())
        self._earlier = self._read()  # {"wall", "cpu", "attempts"} of the attempts before this one
        self._expected = self._earlier is not None  # whether path should exist now
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="unit-clock", daemon=True)

    def _read(self) -> dict | None:
        try:
            state = json.loads(self.path.read_text(encoding="utf-8"))
            return {k: state[k] for k in ("wall", "cpu", "attempts")}
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _before(self, fresh: bool = False) -> dict:
        """The earlier attempts' ``{"wall", "cpu", "attempts"}``: none once the training is known
        to have started afresh (``fresh``, or its resume folder, and this file, gone)."""
        if fresh or (self._expected and not self.path.is_file()):
            self._earlier = None
        return dict(self._earlier or {"wall": 0.0, "cpu": 0.0, "attempts": 0})

    def _write(self) -> None:
        from flexatt.io import write_json

        before = self._before()
        state = {"wall": before["wall"] + time.perf_counter() - self._wall0,
                 "cpu": before["cpu"] + time.process_time() - self._cpu0, "attempts": before["attempts"] + 1}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.path, state)
        except OSError:  # the folder deleted under it (a run starting afresh): the next beat sees it
            pass
        else:
            self._expected = True

    def _beat(self) -> None:
        while not self._stopped.wait(self.every):
            self._write()

    def _halt(self) -> None:
        """Stop the heartbeat and write the final count, once."""
        if not self._stopped.is_set():
            self._stopped.set()
            self._thread.join()
            self._write()

    def __enter__(self) -> "AttemptClock":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._halt()  # also where training failed: what it took is kept for the next attempt

    def stop(self, *, fresh: bool) -> dict:
        """Training is over: stop the count (an interruption while decoding leaves the training's
        seconds) and return the earlier attempts' ``{"wall", "cpu", "attempts"}`` (zeros where
        ``fresh``, the training having started afresh, or where there were none)."""
        before = self._before(fresh)
        self._halt()
        return before


#: what a unit's training leaves in its folder for its decoding: the training's half of the
#: manifest, and the weights of the budget's last checkpoint (float32; a parent: float16, kept)
TRAINED, MODEL = "trained.json", "model.pt"


def run_unit(unit: Unit, out: Path, *, work: Path = Path("units"), params: str | None = None,
             overrides: tuple[str, ...] = (), source: dict | None = None, parent: Path | None = None,
             targets: dict[str, float] | None = None, match_flexible: Path | None = None) -> dict:
    """Train ``unit`` (:func:`train_unit`) and decode it (:func:`decode_unit`) in one process;
    returns the manifest."""
    folder = train_unit(unit, work=work, params=params, overrides=overrides, source=source, parent=parent)
    return decode_unit(unit, folder, out, params=params, overrides=overrides, targets=targets,
                       match_flexible=match_flexible)


def train_unit(unit: Unit, *, work: Path = Path("units"), params: str | None = None,
               overrides: tuple[str, ...] = (), source: dict | None = None, parent: Path | None = None) -> Path:
    """Train ``unit`` in the current folder (``params``: default ``$FLEXATT_PARAMS`` or
    ``params.yaml``; its tokenized data) into ``work/<unit>/`` (resumed from its state in
    ``.resume/`` when a run is started again) and leave there what its decoding reads: the weights
    of the budget's last checkpoint (:data:`MODEL`, float32; a parent's rounded to float16,
    :data:`WEIGHTS`, the weights later units start from and every decode of it reads), the learning
    curve and :data:`TRAINED` (the training's part of the manifest). ``source``: the commit the
    code came from (default: this folder's git). A fine-tuning or control starts from ``parent``
    (its parent unit's ``weights.fp16.pt``). Returns the folder. (One long function: a unit's
    training steps in the order they run, each a call.)"""
    import torch

    from flexatt import config as C
    from flexatt import schema
    from flexatt.io import save_torch, write_json
    from flexatt.trainer import model_config, resume_folder, train

    if source is None:
        refuse_uncommitted(params)
    started, started_cpu = time.perf_counter(), time.process_time()
    base = schema.params(C.load_params(params, list(overrides)))
    t = base.train
    if t.lr_schedule != "fixed" or t.early_stopping_patience is not None:
        raise ConfigError("train.lr_schedule", "units train an equal budget: lr_schedule must be fixed and "
                          "early_stopping_patience null")
    folder = work / unit.name
    common = dict(out_dir=str(folder / "model"), metrics_file=folder / f"{unit.variant}.json", run_name=unit.name)
    finetuning: dict = {}
    # beside the training's resume state (train's ckpt_dir: <out_dir>/<variant>)
    with AttemptClock(resume_folder(folder / "model" / unit.variant) / "clock.json", since=(started, started_cpu)) as clock:
        if unit.kind == "train":
            extra = [f"train.seed={unit.seed}"]
            if unit.budget != 1.0:
                extra += budget_overrides(t.epochs, t.lr_halve_from_epoch, unit.budget)
            p = schema.validate(C.load_params(params, [*overrides, *extra]))
            metrics, objects = train(p, unit.variant, job_type="unit", **common)
        else:
            p = schema.validate(C.load_params(params, [*overrides, f"train.seed={unit.run}"]))
            spec = read_plan(Path("conf/units") / f"{p.profile}.yaml").finetuning
            if spec is None:
                raise ConfigError(f"conf/units/{p.profile}.yaml", "has no finetuning section")
            if parent is None or not Path(parent).is_file():
                raise DataError(parent or unit.parent, f"the weights of {unit.parent} not found (run that unit first)")
            init = folder / "parent.ckpt"
            init.parent.mkdir(parents=True, exist_ok=True)
            saved = torch.load(parent, map_location="cpu", weights_only=True)
            save_torch({"state_dict": {f"model.{k}": v.float() if v.is_floating_point() else v
                                       for k, v in saved["state_dict"].items()}}, init)
            rates = [p.finetune.lr] * spec.epochs  # the fine-tuning's sequence; its control replays it
            metrics, objects = train(p, unit.variant, epochs=spec.epochs, lr=p.finetune.lr, beta=unit.beta,
                                     init_from=init, lr_epochs=rates, job_type=unit.kind, **common)
            finetuning = {"parent": unit.parent, "parent_sha256": file_sha256(Path(parent)), "beta": unit.beta,
                          "run": unit.run}
        # an attempt that resumed counts the seconds of the attempts before it
        earlier = clock.stop(fresh=metrics["resumed_from_epoch"] is None)
    checkpoint = objects["resume_dir"] / "last.ckpt"  # the budget's last epoch: the unit's checkpoint rule
    with torch.inference_mode(False):
        weights = _weights(checkpoint, float16=unit.keep_weights)
    save_torch(weights, folder / (WEIGHTS if unit.keep_weights else MODEL))
    curve = [row for row in (folder / f"{unit.variant}.csv").read_text().splitlines()[1:] if row]
    trained = {
        "unit": unit.name, "kind": unit.kind, "variant": unit.variant, "seed": unit.seed, "budget": unit.budget,
        **({"finetuning": finetuning} if finetuning else {}),
        "profile": p.profile, "model": model_config(p, unit.variant),
        "training": {**metrics, "lr_schedule": p.train.lr_schedule if unit.kind == "train" else "constant",
                     "lr_halve_from_epoch": p.train.lr_halve_from_epoch if unit.kind == "train" else None,
                     "stopped_by": "budget",
                     "checkpoint": "last", "checkpoint_epoch": len(curve),
                     "epochs_budget": p.train.epochs if unit.kind == "train" else len(curve),
                     "lr_sequence": [float(row.split(",")[2]) for row in curve]},
        "weights": "float16 (weights.fp16.pt): every decode of this unit is of the rounded weights"
                   if unit.keep_weights else "not kept",
        "source": source or {**_git_commit(params), "overrides": list(overrides)},
        "machine": _machine(),
        "seconds": {"wall": earlier["wall"] + time.perf_counter() - started,
                    "cpu": earlier["cpu"] + time.process_time() - started_cpu,
                    "threads": p.train.threads, "attempts": earlier["attempts"] + 1},
    }
    write_json(folder / TRAINED, trained)
    return folder


def decode_unit(unit: Unit, folder: Path, out: Path, *, params: str | None = None, overrides: tuple[str, ...] = (),
                targets: dict[str, float] | None = None, match_flexible: Path | None = None) -> dict:
    """Decode the unit that :func:`train_unit` left in ``folder`` (:func:`decode_products`:
    ``targets``, the fixed windows a flexible model is matched to) and write its products to
    ``out``; returns the manifest. ``match_flexible``: the products of the finished flexible unit
    of this fixed window's seed, matched to it here (:func:`match_into`)."""
    from flexatt import config as C
    from flexatt import schema
    from flexatt.parallel import intra_op_threads

    started, started_cpu = time.perf_counter(), time.process_time()
    trained = json.loads((folder / TRAINED).read_text(encoding="utf-8"))
    if trained["unit"] != unit.name:
        raise DataError(folder / TRAINED, f"the training of {trained['unit']}, not of {unit.name}")
    p = schema.validate(C.load_params(params, list(overrides)))
    weights = folder / (WEIGHTS if unit.keep_weights else MODEL)
    model = load_weights(weights)
    files: dict[str, bytes] = {"curve.csv": (folder / f"{unit.variant}.csv").read_bytes()}
    if unit.keep_weights:
        files[WEIGHTS] = weights.read_bytes()
    tok_dir, filter_dir = Path(p.train.data_dir), Path(p.tokenize.in_dir)
    with intra_op_threads(p.train.threads):
        summary, decodes, alignments, g_values = decode_products(model, p, tok_dir, filter_dir, targets)
        matched_by = None
        if match_flexible is not None:
            matched_by, files[MATCH_PRODUCT] = match_into(unit, summary["dev"]["inf"]["window"], match_flexible, p)
    files[PRODUCTS[2]] = pack_json(decodes, PRODUCTS[2])
    if alignments is not None:
        files[ALIGNMENT_PRODUCTS[0]] = pack_json(alignments, ALIGNMENT_PRODUCTS[0])
        if g_values:
            files["g.npz"] = _npz({k.replace("/", "__"): v for k, v in g_values.items()})
    from flexatt.products import data_digests

    seconds = trained.pop("seconds")
    source, machine = trained.pop("source"), trained.pop("machine")
    decoding = time.perf_counter() - started
    manifest = {
        **trained,
        "decode": {"beam_size": decodes["beam_size"], "alpha": decodes["alpha"]},
        "summary": summary,
        **({"matched_by": matched_by} if matched_by else {}),
        "data": data_digests(tok_dir),
        "source": source,
        "machine": machine,
        "minutes": {"train": round(seconds["wall"] / 60, 1), "decode": round(decoding / 60, 1),
                    "total": round((seconds["wall"] + decoding) / 60, 1),
                    "cpu": round((seconds["cpu"] + time.process_time() - started_cpu) / 60, 2),
                    "threads": seconds["threads"], "attempts": seconds["attempts"]},
    }
    write_products(out, manifest, files)
    log_decodes(p, manifest, decodes["records"], tok_dir)
    print(f"unit {unit.name}: {manifest['minutes']['total']} min, products "
          f"{sum(len(b) for b in files.values()) / 1e6:.2f} MB in {out}", flush=True)
    return manifest


def decode_figures(manifest: dict, records: list[dict], references: dict[str, list[str]]) -> dict[str, float]:
    """What a unit's decoding logs to W&B: per split, at τ = ∞ and (a flexible model) at its
    dev-selected τ, BLEU, chrF, RIBES and the window (``<split>/<inf|selected>/<metric>``), and AER
    where the split has gold links."""
    from flexatt.metrics import corpus_ribes

    found = {(r["split"], float(r["tau"])): r for r in records}
    out: dict[str, float] = {}
    for split in SPLITS:
        summary = manifest["summary"][split]
        taus = {"inf": INF, **({"selected": float(summary["selected_tau"])} if "selected_tau" in summary else {})}
        for point, tau in taus.items():
            record = found[(split, tau)]
            out.update({f"{split}/{point}/bleu": record["bleu"], f"{split}/{point}/chrf": record["chrf"],
                        f"{split}/{point}/window": record["window"],
                        f"{split}/{point}/ribes": round(100 * corpus_ribes(record["hypotheses"], references[split]), 2)})
            if "aer" in summary and tau_key(tau) in summary["aer"]:
                out[f"{split}/{point}/aer"] = summary["aer"][tau_key(tau)]
    return out


def log_decodes(p, manifest: dict, records: list[dict], tok_dir: Path) -> None:
    """The unit's decoding figures (:func:`decode_figures`) as the summary of a W&B run of its own
    (job type ``unit-decode``, grouped by profile: ``<profile>-units``), with its manifest's
    provenance as config; nothing where W&B is off (``logger.enabled``)."""
    from flexatt.tracking import start_run

    if not p.logger.enabled:
        return
    references = {s: (tok_dir / f"{s}.ref").read_text(encoding="utf-8").split("\n")[:-1] for s in SPLITS}
    grouped = p.model_copy(update={"logger": p.logger.model_copy(update={"group": p.logger.group or f"{p.profile}-units"})})
    with start_run(grouped, "unit-decode", manifest["unit"], tags=[manifest["variant"], p.profile, "unit"]) as run:
        run.config({"unit": manifest["unit"], "variant": manifest["variant"], "seed": manifest["seed"],
                    "kind": manifest["kind"], "budget": manifest.get("budget", 1.0), "source": manifest["source"],
                    "precision": manifest["training"].get("precision")})
        run.summary(decode_figures(manifest, records, references))


def _machine() -> dict:
    """Where a unit (or a later match) ran: CPU, cores, Python and torch versions, and whether the
    CPU multiplies bf16 natively (``bf16_native``: :func:`flexatt.runtime.native_cpu_bf16`;
    ``None`` where its flags cannot tell), which one model name may not say (an AMD EPYC has AVX-512
    BF16 or not)."""
    import torch

    from flexatt.runtime import native_cpu_bf16

    return {"cpu": _cpu(), "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "bf16_native": native_cpu_bf16()}


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexatt.units", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {"run": "train one unit here and write its products (train, then decode)",
                "train": "train one unit here into --work/<unit>/ (weights, curve, the training's record)",
                "decode": "decode a unit trained into --work/<unit>/ and write its products"}
    for name, text in commands.items():
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("unit", help="<variant>-s<seed>[-x<budget>], <variant>-s<seed>-{ft-b<beta>,ctl}-r<run>")
        cmd.add_argument("--work", type=Path, default=Path("units"), help="training checkpoints (default: units/)")
        cmd.add_argument("--keep-weights", action="store_true", help="keep the weights in float16 (a parent)")
        if name != "decode":
            cmd.add_argument("--parent", type=Path, help="a fine-tuning's or control's parent weights (weights.fp16.pt)")
            cmd.add_argument("--source", type=json.loads, help="JSON: the commit the code came from (default: git here)")
        if name != "train":
            cmd.add_argument("--out", required=True, type=Path, help="the folder of its products")
            cmd.add_argument("--match", action="append", default=[], metavar="UNIT=WINDOW",
                             help="a fixed-window unit and its dev window: a flexible model is matched to it")
            cmd.add_argument("--match-flexible", type=Path, metavar="FOLDER",
                             help="a fixed window: the products of its seed's flexible unit (weights kept), "
                                  "matched to it here")
    late = sub.add_parser("match", help="match a finished flexible unit with kept weights to later fixed windows")
    late.add_argument("folder", type=Path, help="the unit's products (results/<profile>/units/<unit>)")
    late.add_argument("--match", action="append", required=True, metavar="UNIT=WINDOW",
                      help="a fixed-window unit and its dev window")
    late.add_argument("--source", type=json.loads, help="JSON: the commit the code came from (default: git here)")
    args, overrides = parser.parse_known_args(argv)  # key=value overrides of params.yaml
    if any("=" not in item or item.startswith("-") for item in overrides):
        parser.error(f"unrecognized arguments: {' '.join(overrides)}")
    try:
        targets = {name: float(window) for name, window in (item.split("=", 1) for item in getattr(args, "match", []))}
    except ValueError:
        parser.error(f"--match takes UNIT=WINDOW (got {args.match})")
    from flexatt.errors import FlexattError

    try:
        if args.command == "match":
            match_later(args.folder, targets, overrides=tuple(overrides), source=args.source)
            return 0
        unit = parse_unit(args.unit)
        unit = Unit(unit.variant, unit.seed, unit.budget, args.keep_weights, unit.beta, unit.run)
        if args.command == "run":
            run_unit(unit, args.out, work=args.work, overrides=tuple(overrides), source=args.source,
                     parent=args.parent, targets=targets, match_flexible=args.match_flexible)
        elif args.command == "train":
            train_unit(unit, work=args.work, overrides=tuple(overrides), source=args.source, parent=args.parent)
        else:
            decode_unit(unit, args.work / unit.name, args.out, overrides=tuple(overrides), targets=targets,
                        match_flexible=args.match_flexible)
    except FlexattError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def log_to_stderr() -> None:
    """The package's INFO messages to stderr, the unit's log: among them the trainer's word on
    whether a unit's training resumed (from which checkpoint) or started again (a checkpoint of
    other code or configuration). A Hydra stage has its job logging; this module has none."""
    logger = logging.getLogger("flexatt")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


if __name__ == "__main__":
    log_to_stderr()
    sys.exit(main())
