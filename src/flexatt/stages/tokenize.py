"""Stage ``tokenize``: train SentencePiece on the training split, encode every split.

Usage::

    python -m flexatt.stages.tokenize                         # params.yaml
    python -m flexatt.stages.tokenize tokenize.model_type=char tokenize.out_dir=artifacts/tok_char

Reads ``tokenize.in_dir`` (the filter stage's output) and writes to ``tokenize.out_dir``:
``src.model`` and ``tgt.model`` (the same model twice when ``tokenize.joint``), ``{split}.npz``
(the encoded splits, see :mod:`flexatt.data.subwords`), the detokenised references for BLEU
(``{dev,test}.ref`` and ``.ref2``) and ``stats.json``; the statistics also go to
``tokenize.metrics_file``.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from flexatt import config as C
from flexatt.data.filtering import SPLITS
from flexatt.data.subwords import MODEL_TYPES, UNK_ID, EncodedSplit, Vocab, train_sentencepiece
from flexatt.errors import ConfigError, DataError
from flexatt.io import atomic_path, write_json

log = logging.getLogger("flexatt.tokenize")


def _read(path: Path) -> list[str]:
    if not path.is_file():
        raise DataError(path, "not found (run the filter stage first)")
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def _side_stats(ids: list[list[int]]) -> dict:
    lengths = np.array([len(s) for s in ids])
    total = int(lengths.sum())
    unk = sum(s.count(UNK_ID) for s in ids)
    return {"tokens_mean": round(float(lengths.mean()), 2), "tokens_max": int(lengths.max()),
            "unk_rate": round(unk / max(total, 1), 5)}


def run(cfg: DictConfig) -> dict:
    in_dir = Path(C.check_str(cfg, "tokenize.in_dir"))
    out_dir = Path(C.check_str(cfg, "tokenize.out_dir"))
    model_type = C.check_choice(cfg, "tokenize.model_type", MODEL_TYPES)
    joint = C.check_bool(cfg, "tokenize.joint")
    vocab_size = C.check_int(cfg, "tokenize.vocab_size", minimum=8)
    coverage = C.check_float(cfg, "tokenize.character_coverage", gt=0.0)
    if coverage > 1.0:
        raise ConfigError("tokenize.character_coverage", f"must be in (0, 1] (got {coverage})")
    threads = C.check_int(cfg, "tokenize.threads", minimum=1)
    seed = C.check_int(cfg, "tokenize.seed", minimum=0)
    metrics_file = C.check_str(cfg, "tokenize.metrics_file", optional=True)

    text = {(split, side): _read(in_dir / f"{split}.{side}") for split in SPLITS for side in ("src", "tgt")}
    with atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        sides = (("joint", [in_dir / "train.src", in_dir / "train.tgt"]),) if joint else (
            ("src", [in_dir / "train.src"]), ("tgt", [in_dir / "train.tgt"]))
        for name, inputs in sides:
            log.info("training SentencePiece %s (%s, %d) on %s", name, model_type, vocab_size,
                     ", ".join(map(str, inputs)))
            try:
                train_sentencepiece(inputs, tmp / f"{name}.model", model_type, vocab_size, coverage,
                                    threads, seed)
            except RuntimeError as exc:  # e.g. a vocab_size larger than the data allows
                raise ConfigError("tokenize.vocab_size", f"SentencePiece refused: {exc}") from exc
        if joint:
            shutil.copyfile(tmp / "joint.model", tmp / "src.model")
            shutil.move(tmp / "joint.model", tmp / "tgt.model")
        vocabs = {side: Vocab(tmp / f"{side}.model") for side in ("src", "tgt")}

        stats: dict = {"model_type": model_type, "joint": joint,
                       "vocab": {side: len(v) for side, v in vocabs.items()}}
        for split in SPLITS:
            ids = {side: vocabs[side].encode(text[split, side]) for side in ("src", "tgt")}
            EncodedSplit.from_lists(ids["src"], ids["tgt"]).save(tmp / f"{split}.npz")
            stats[split] = {side: _side_stats(ids[side]) for side in ("src", "tgt")}
            if split != "train":
                shutil.copyfile(in_dir / f"{split}.tgt", tmp / f"{split}.ref")
                if (in_dir / f"{split}.ref2").is_file():
                    shutil.copyfile(in_dir / f"{split}.ref2", tmp / f"{split}.ref2")
        dev_ids = vocabs["tgt"].encode(text["dev", "tgt"])
        same = sum(a == b for a, b in zip(vocabs["tgt"].decode(dev_ids), text["dev", "tgt"]))
        stats["dev_tgt_roundtrip"] = round(same / max(len(dev_ids), 1), 4)
        write_json(tmp / "stats.json", stats)
    if metrics_file:
        write_json(metrics_file, stats)

    print(f"tokenize: {model_type} vocab src {stats['vocab']['src']} tgt {stats['vocab']['tgt']}"
          f"{' (joint)' if joint else ''}; train tokens/sentence src "
          f"{stats['train']['src']['tokens_mean']} tgt {stats['train']['tgt']['tokens_mean']}; "
          f"dev round trip {stats['dev_tgt_roundtrip']:.2%} (in {out_dir})")
    return stats


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
