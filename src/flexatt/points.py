"""Decoded points: the decoding settings, a row's checkpoint, and :class:`Decoder`, the one
decoder of (model, split, τ) that the τ search, the sweeps, the comparisons and the units read.
It decodes each point once and keeps it as a stored record (:func:`decode_record`: the
translations, the per-sentence windows and BLEU statistics, the summary), so that a later stage
can load what an earlier one decoded (:meth:`Decoder.load`) instead of decoding it again."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from flexatt import config as C
from flexatt import schema
from flexatt.checkpoints import load_model
from flexatt.data.evalset import EvalSet
from flexatt.decoding.translate import DecodeOptions, Translation, translate_split
from flexatt.errors import ConfigError
from flexatt.tau import label


def decode_options(cfg: DictConfig | schema.Params) -> DecodeOptions:
    """The ``decode`` group as :class:`~flexatt.decoding.translate.DecodeOptions` (at τ = ∞)."""
    return DecodeOptions(**schema.group(cfg, "decode").model_dump())


def checkpoint_of(cfg: DictConfig | schema.Params, name: str, key: str) -> Path:
    """The checkpoint of row ``name`` (``evaluate.checkpoints``), an existing file; ``key`` names
    the list it came from."""
    checkpoints = schema.group(cfg, "evaluate").checkpoints
    if name not in checkpoints:
        raise ConfigError(key, f"must be one of {', '.join(checkpoints)} (got {name!r})")
    return C.require_file(f"evaluate.checkpoints.{name}", checkpoints[name], hint="train that model first")


def decode_record(split: str, tau: float, out: Translation, data: EvalSet) -> dict:
    """One decode as stored: its text, per-sentence windows (positions scored summed over steps;
    steps; source lengths) and sacrebleu's per-sentence BLEU statistics, and its summary (window
    per sentence then averaged, and step-weighted; BLEU and chrF with the BLEU signature; seconds;
    the backend that decoded it); a Transformer's also per cross-attention layer
    (``layer_windows``, ``layer_window_sum``)."""
    from sacrebleu.metrics import BLEU

    from flexatt.claims import sentence_stats
    from flexatt.metrics import corpus_bleu, corpus_chrf

    bleu, signature = corpus_bleu(out.hypotheses, [data.references])
    stats = sentence_stats(BLEU(), out.hypotheses, data.references)
    layers = {}  # a Transformer's windows per cross-attention layer
    if out.layer_window_sum is not None:
        layers = {"layer_windows": [round(w, 3) for w in out.layer_windows],
                  "layer_window_sum": out.layer_window_sum.tolist()}
    return {
        "split": split, "tau": tau,
        "window": round(out.mean_window, 3), "window_step_weighted": round(out.step_weighted_window, 3),
        "bleu": round(bleu, 2), "chrf": round(corpus_chrf(out.hypotheses, [data.references])[0], 2),
        "bleu_signature": signature, "seconds": round(out.seconds, 2), "decoded_by": out.decoded_by,
        "hypotheses": out.hypotheses, "window_sum": out.window_sum.tolist(), "steps": out.steps.tolist(),
        "src_lengths": np.asarray(out.src_lengths).tolist(), "bleu_stats": [list(map(int, s)) for s in stats],
        **layers,
    }


def translation_of(record: dict) -> Translation:
    """A stored record (:func:`decode_record`) as the :class:`~flexatt.decoding.translate.Translation`
    its decode returned (no traces; the seconds as stored, to the hundredth)."""
    layers = record.get("layer_window_sum")
    return Translation(list(record["hypotheses"]), np.asarray(record["window_sum"], dtype=np.float64),
                       np.asarray(record["steps"], dtype=np.int64), np.asarray(record["src_lengths"], dtype=np.int64),
                       float(record["seconds"]), {}, dict(record["decoded_by"]),
                       None if layers is None else np.asarray(layers, dtype=np.float64))


def sample_traces(model, data: EvalSet, options: DecodeOptions, indices: Iterable[int],
                  hypotheses: list[str] | None = None) -> dict[int, object]:
    """The per-step traces (:class:`~flexatt.decoding.search.Trace`) of the sentences ``indices``
    of ``data``, decoded on their own: beam search does not depend on the batch a sentence is
    decoded in, so they are those of the whole split's decode (``hypotheses``, where given, are
    checked against it: a sentence that decodes otherwise on its own is reported)."""
    from flexatt.data.subwords import EncodedSplit

    indices = sorted(set(indices))
    if not indices:
        return {}
    sub = EncodedSplit.from_lists([data.split.src(i).tolist() for i in indices],
                                  [data.split.tgt(i).tolist() for i in indices])
    out = translate_split(model, sub, data.tgt_vocab, options, trace_indices=set(range(len(indices))))
    for k, i in enumerate(indices):
        if hypotheses is not None and out.hypotheses[k] != hypotheses[i]:
            print(f"warning: sentence {i} decodes otherwise on its own than in its split; its trace is of "
                  f"{out.hypotheses[k]!r}", flush=True)
    return {i: out.traces[k] for k, i in enumerate(indices)}


def summary_point(record: dict) -> dict:
    """What a decode contributes to a τ search and a unit's manifest: τ, window, BLEU."""
    return {"tau": record["tau"], "window": record["window"], "bleu": record["bleu"]}


def timed_point(record: dict) -> dict:
    """:func:`summary_point` and the decoding time per sentence (the default pipeline's sweeps)."""
    return {**summary_point(record), "ms_per_sentence": round(1000 * record["seconds"] / max(len(record["hypotheses"]), 1), 2)}


class Decoder:
    """Decodes (model, split, τ) once and keeps the stored record (:func:`decode_record`) of each,
    ``records[(model, split, τ)]`` (τ a float, ``inf`` for every position); :meth:`point` gives
    its summary (``summary``: :func:`timed_point` by default). A model is a row of
    ``evaluate.checkpoints`` of ``cfg`` (``key`` names the setting that lists the models, in the
    error about one that is not) or one given by :meth:`use`.

    ``sets``: split -> :class:`~flexatt.data.evalset.EvalSet`; ``options``: the decoding settings
    (default: ``cfg``'s ``decode``)."""

    def __init__(self, cfg: schema.Params | None, sets: dict[str, EvalSet], key: str = "sweep_tau.models", *,
                 options: DecodeOptions | None = None, summary: Callable[[dict], dict] = timed_point):
        if cfg is None and options is None:
            raise ValueError("Decoder needs the params or the decoding options")
        self.cfg, self.sets, self.key, self.summary = cfg, sets, key, summary
        self.options = options if options is not None else decode_options(cfg)
        self.models: dict[str, object] = {}
        self.records: dict[tuple[str, str, float], dict] = {}
        self.decoded_by: dict[str, dict] = {}  # model -> backend, simd, torch

    def use(self, name: str, model) -> None:
        """Decode ``model`` as ``name``: a model that is not a row of ``evaluate.checkpoints``
        (a sweep's run, a unit's model)."""
        self.models[name] = model

    def load(self, name: str, records: Iterable[dict]) -> None:
        """Records of ``name`` decoded before (a stage's or a unit's stored decodes): not decoded
        again. Their beam settings must be this decoder's (the caller's to check)."""
        for r in records:
            self.records[(name, r["split"], float(r["tau"]))] = r

    def stored(self, name: str, splits: Iterable[str]) -> list[dict]:
        """The records of ``name``, by split (in the order of ``splits``) then τ."""
        order = list(splits)
        keys = sorted((k for k in self.records if k[0] == name and k[1] in order),
                      key=lambda k: (order.index(k[1]), k[2]))
        return [self.records[k] for k in keys]

    def record(self, name: str, split: str, tau: float) -> dict:
        """The stored record of ``name`` on ``split`` at ``tau``, decoded if it is not yet."""
        key = (name, split, float(tau))
        if key not in self.records:
            if name not in self.models:
                if self.cfg is None:
                    raise ConfigError(self.key, f"no model {name!r} to decode")
                self.models[name] = load_model(checkpoint_of(self.cfg, name, self.key))
            data = self.sets[split]
            out = translate_split(self.models[name], data.split, data.tgt_vocab, self.options.at(tau))
            self.records[key] = r = decode_record(split, float(tau), out, data)
            print(f"  {name:18s} {split:5s} tau={label(tau):<8s} window {r['window']:7.2f}  BLEU {r['bleu']:6.2f}"
                  f"  ({r['seconds']:.1f} s)", flush=True)
        self.decoded_by.setdefault(name, self.records[key]["decoded_by"])
        return self.records[key]

    def point(self, name: str, split: str, tau: float) -> dict:
        """The summary of :meth:`record` (``summary``)."""
        return self.summary(self.record(name, split, tau))

    def hypotheses(self, name: str, split: str, tau: float) -> list[str]:
        return self.record(name, split, tau)["hypotheses"]

    def points(self, name: str, split: str) -> list[dict]:
        """The summaries of every record of ``name`` on ``split`` (decoded or loaded), by τ."""
        return [self.summary(r) for r in self.stored(name, [split])]


def write_decodes(path: str | Path, decoder: Decoder, names: Iterable[str], splits: Iterable[str]) -> Path:
    """The records of ``names`` on ``splits`` that ``decoder`` holds, for a later stage to load
    (:func:`read_decodes`): ``{"beam_size", "alpha", "records": {name: [record, ...]}}``, compact
    JSON compressed as a unit's decodes are (:func:`flexatt.products.pack_json`; the same records
    give the same bytes)."""
    from flexatt.io import atomic_path
    from flexatt.products import pack_json

    splits = list(splits)
    records = {name: decoder.stored(name, splits) for name in names}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(pack_json({"beam_size": decoder.options.beam_size, "alpha": decoder.options.alpha,
                                         "records": {n: r for n, r in records.items() if r}}, path.name))
    return path


def read_decodes(path: str | Path, options: DecodeOptions) -> dict[str, list[dict]]:
    """The records :func:`write_decodes` wrote, model -> records; refused (the message names the
    file) where they were decoded with other beam settings than ``options``."""
    from flexatt.errors import DataError
    from flexatt.products import unpack_json

    path = Path(path)
    if not path.is_file():
        raise DataError(path, "not found (run the stage that writes it first)")
    stored = unpack_json(path)
    if (stored["beam_size"], stored["alpha"]) != (options.beam_size, options.alpha):
        raise DataError(path, f"decoded with beam {stored['beam_size']}, alpha {stored['alpha']}, not beam "
                        f"{options.beam_size}, alpha {options.alpha}")
    return stored["records"]


def load_decodes(decoder: Decoder, path: str | Path, stage: str) -> int:
    """Load the records :func:`write_decodes` wrote at ``path`` into ``decoder`` (not decoded
    again); returns how many. Without the file (a stage run by hand before the one that writes
    it) nothing is loaded and ``stage`` says so: what it needs is decoded, to the same result."""
    path = Path(path)
    if not path.is_file():
        print(f"{stage}: no stored decodes at {path}: what it needs is decoded here", flush=True)
        return 0
    loaded = 0
    for name, records in read_decodes(path, decoder.options).items():
        decoder.load(name, records)
        loaded += len(records)
    return loaded
