"""The rows of ``evaluate.checkpoints`` decoded on the evaluation sets: the decoding settings,
a row's checkpoint, and :class:`Decoder`, which decodes (row, split, τ) once and remembers the
point (window, BLEU, time) the τ search, the sweeps and the comparisons read."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from flexatt import config as C
from flexatt import schema
from flexatt.checkpoints import load_model
from flexatt.data.evalset import EvalSet
from flexatt.decoding.translate import DecodeOptions, translate_split
from flexatt.errors import ConfigError
from flexatt.metrics import corpus_bleu
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



class Decoder:
    """Decodes (model, split, τ) once and remembers the point (``memo``: ``tau``, a float, ``inf``
    for every position; window, BLEU, time; ``hypotheses``: the translations). Points are written
    to JSON as :func:`flexatt.io.write_json` writes them (∞ as ``null``). ``key`` names the setting that lists the models (in the
    error about a model that is not a row of ``evaluate.checkpoints``)."""

    def __init__(self, cfg: schema.Params, sets: dict[str, EvalSet], key: str = "sweep_tau.models"):
        self.cfg, self.sets, self.options, self.key = cfg, sets, decode_options(cfg), key
        self.models: dict[str, object] = {}
        self.memo: dict[tuple[str, str, float], dict] = {}
        self.hypotheses: dict[tuple[str, str, float], list[str]] = {}
        self.decoded_by: dict[str, dict] = {}  # model -> backend, simd, torch

    def use(self, name: str, model) -> None:
        """Decode ``model`` as ``name``: a model that is not a row of ``evaluate.checkpoints``
        (a sweep's run)."""
        self.models[name] = model

    def point(self, name: str, split: str, tau: float) -> dict:
        key = (name, split, tau)
        if key not in self.memo:
            if name not in self.models:
                self.models[name] = load_model(checkpoint_of(self.cfg, name, self.key))
            data = self.sets[split]
            out = translate_split(self.models[name], data.split, data.tgt_vocab, self.options.at(tau))
            self.decoded_by[name] = out.decoded_by
            bleu, _ = corpus_bleu(out.hypotheses, [data.references])
            self.hypotheses[key] = out.hypotheses
            self.memo[key] = {"tau": tau, "window": round(out.mean_window, 3), "bleu": round(bleu, 2),
                              "ms_per_sentence": round(out.ms_per_sentence, 2)}
            p = self.memo[key]
            print(f"  {name:18s} {split:5s} tau={label(tau):<8s} window {p['window']:7.2f}  BLEU {p['bleu']:6.2f}"
                  f"  ({p['ms_per_sentence']:.1f} ms/sentence)", flush=True)
        return self.memo[key]
