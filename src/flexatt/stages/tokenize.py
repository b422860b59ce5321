"""Stage ``tokenize``: train SentencePiece on the training split, encode every split.

Usage::

    python -m flexatt.stages.tokenize                         # params.yaml
    python -m flexatt.stages.tokenize tokenize.model_type=char tokenize.out_dir=artifacts/tok_char

Reads ``tokenize.in_dir`` (the filter stage's output) and writes to ``tokenize.out_dir``:
``src.model`` and ``tgt.model`` (the same model twice when ``tokenize.joint``), ``{split}.npz``
(the encoded splits, see :mod:`flexatt.data.subwords`), the detokenised references for BLEU
(``{dev,test}.ref`` and ``.ref2``) and ``stats.json``; the statistics also go to
``tokenize.metrics_file``.

Memory stays bounded on a corpus of millions of pairs:

* SentencePiece is trained on every training pair when there are at most
  :data:`SP_MAX_PAIRS` of them (the Bible corpus: 27k), else on a sample of exactly
  ``SP_MAX_PAIRS`` pairs (both sides of the same pairs, in corpus order), drawn by selection
  sampling (Knuth's Algorithm S) with ``random.Random(tokenize.seed)``: the same data and seed
  always give the same sample and so the same model (``stats.json`` then records it under
  ``sentencepiece_sample``). The sample is written under the names
  ``train.src``/``train.tgt`` in a scratch folder, so the model records the same input names.
* Each split is encoded :data:`ENCODE_CHUNK` sentences at a time; the token ids go to a scratch
  file and are copied into the ``.npz`` member by member, so only the sentence offsets
  (8 bytes per sentence) are held in memory. The ``.npz`` bytes are those of
  :meth:`~flexatt.data.subwords.EncodedSplit.save` for the same ids.
"""

from __future__ import annotations

import logging
import random
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from flexatt import config as C
from flexatt import schema
from flexatt.data.filtering import SPLITS
from flexatt.data.subwords import UNK_ID, Vocab, train_sentencepiece
from flexatt.errors import ConfigError, DataError
from flexatt.io import atomic_path, write_json

log = logging.getLogger("flexatt.tokenize")


SP_MAX_PAIRS = 300_000  # training pairs SentencePiece sees at most (a seeded sample beyond)
ENCODE_CHUNK = 10_000   # sentences encoded at a time
COPY_BLOCK = 1 << 22    # bytes of token ids copied at a time into the .npz


def _check_input(path: Path) -> Path:
    if not path.is_file():
        raise DataError(path, "not found (run the filter stage first)")
    return path


def _lines(path: Path) -> Iterator[str]:
    """The lines of a filter output as ``path.read_text(encoding="utf-8").split("\\n")[:-1]``
    gives them (universal newlines; text after the last newline is not a line), streamed."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.endswith("\n"):
                yield line[:-1]


def _chunks(lines: Iterator[str], size: int | None = None) -> Iterator[list[str]]:
    """``lines`` in lists of ``size`` (default :data:`ENCODE_CHUNK`, read at the call)."""
    size = size or ENCODE_CHUNK
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def sample_training_pairs(src: Path, tgt: Path, out_dir: Path, max_pairs: int, seed: int) -> tuple[list[Path], int]:
    """The training files SentencePiece reads: ``[src, tgt]`` themselves when they hold at most
    ``max_pairs`` pairs, else a sample of ``max_pairs`` pairs written to ``out_dir`` under the
    same names (selection sampling: each pair is taken with probability
    ``still needed / still unseen``, so exactly ``max_pairs``, uniformly, in corpus order).

    Returns the files and the number of pairs in the training split.
    """
    n = sum(1 for _ in _lines(src))
    if n <= max_pairs:
        return [src, tgt], n
    out_dir.mkdir()
    rng = random.Random(seed)
    needed = max_pairs
    samples = [out_dir / src.name, out_dir / tgt.name]
    with open(samples[0], "w", encoding="utf-8", newline="\n") as out_src, \
            open(samples[1], "w", encoding="utf-8", newline="\n") as out_tgt:
        for seen, (s, t) in enumerate(zip(_lines(src), _lines(tgt))):
            if needed and rng.random() * (n - seen) < needed:
                out_src.write(s + "\n")
                out_tgt.write(t + "\n")
                needed -= 1
    return samples, n


def encode_side(vocab: Vocab, path: Path, ids_file: Path) -> tuple[np.ndarray, int]:
    """Encode the lines of ``path`` chunk by chunk, appending the int32 ids to ``ids_file``.

    Returns the sentence offsets (int64, ``n + 1`` entries, as in
    :class:`~flexatt.data.subwords.EncodedSplit`) and the number of unknown-token ids.
    """
    lengths: list[np.ndarray] = []
    unk = 0
    with open(ids_file, "wb") as out:
        for chunk in _chunks(_lines(path)):
            seqs = vocab.encode(chunk)
            counts = np.fromiter((len(seq) for seq in seqs), dtype=np.int64, count=len(seqs))
            ids = np.fromiter((i for seq in seqs for i in seq), dtype=np.int32, count=int(counts.sum()))
            unk += int(np.count_nonzero(ids == UNK_ID))
            ids.tofile(out)
            lengths.append(counts)
    offsets = np.zeros(sum(len(c) for c in lengths) + 1, dtype=np.int64)
    if lengths:
        np.cumsum(np.concatenate(lengths), out=offsets[1:])
    return offsets, unk


def save_encoded(path: Path, sides: dict[str, tuple[Path, np.ndarray]]) -> None:
    """Write the ``.npz`` of an encoded split from each side's ids file and offsets, byte for byte
    as :meth:`EncodedSplit.save <flexatt.data.subwords.EncodedSplit.save>` (``np.savez``) writes
    it, without loading the ids."""
    header = np.lib.format.write_array_header_1_0
    with atomic_path(path) as tmp, open(tmp, "wb") as out, \
            zipfile.ZipFile(out, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as npz:
        for side in ("src", "tgt"):
            ids_file, offsets = sides[side]
            n_ids = ids_file.stat().st_size // 4
            if int(offsets[-1]) != n_ids:
                raise ValueError(f"{ids_file}: {n_ids} ids, the offsets end at {int(offsets[-1])}")
            with npz.open(f"{side}_ids.npy", "w", force_zip64=True) as member, open(ids_file, "rb") as ids:
                header(member, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.int32)),
                                "fortran_order": False, "shape": (n_ids,)})
                while block := ids.read(COPY_BLOCK):
                    member.write(block)
            with npz.open(f"{side}_offsets.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, offsets, allow_pickle=False)


def _side_stats(offsets: np.ndarray, unk: int) -> dict:
    lengths = np.diff(offsets)
    total = int(lengths.sum())
    return {"tokens_mean": round(float(lengths.mean()), 2), "tokens_max": int(lengths.max()),
            "unk_rate": round(unk / max(total, 1), 5)}


def run(cfg: DictConfig | schema.Params) -> dict:
    t = schema.params(cfg).tokenize
    in_dir, out_dir, model_type, joint = Path(t.in_dir), Path(t.out_dir), t.model_type, t.joint
    vocab_size, coverage, threads, seed, metrics_file = t.vocab_size, t.character_coverage, t.threads, t.seed, t.metrics_file

    inputs = {(split, side): _check_input(in_dir / f"{split}.{side}") for split in SPLITS for side in ("src", "tgt")}
    with atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        sample, n_train = sample_training_pairs(inputs["train", "src"], inputs["train", "tgt"],
                                                tmp / ".spm_sample", SP_MAX_PAIRS, seed)
        if n_train > SP_MAX_PAIRS:
            log.info("SentencePiece trains on a seeded sample of %d of the %d training pairs", SP_MAX_PAIRS, n_train)
        sides = (("joint", sample),) if joint else (("src", sample[:1]), ("tgt", sample[1:]))
        for name, files in sides:
            log.info("training SentencePiece %s (%s, %d) on %s", name, model_type, vocab_size,
                     ", ".join(map(str, files)))
            try:
                train_sentencepiece(files, tmp / f"{name}.model", model_type, vocab_size, coverage,
                                    threads, seed)
            except RuntimeError as exc:  # e.g. a vocab_size larger than the data allows
                raise ConfigError("tokenize.vocab_size", f"SentencePiece refused: {exc}") from exc
        shutil.rmtree(tmp / ".spm_sample", ignore_errors=True)
        if joint:
            shutil.copyfile(tmp / "joint.model", tmp / "src.model")
            shutil.move(tmp / "joint.model", tmp / "tgt.model")
        vocabs = {side: Vocab(tmp / f"{side}.model") for side in ("src", "tgt")}

        stats: dict = {"model_type": model_type, "joint": joint,
                       "vocab": {side: len(v) for side, v in vocabs.items()}}
        if n_train > SP_MAX_PAIRS:  # recorded only when a sample was drawn
            stats["sentencepiece_sample"] = {"pairs": SP_MAX_PAIRS, "of": n_train, "seed": seed}
        for split in SPLITS:
            encoded = {}
            for side in ("src", "tgt"):
                ids_file = tmp / f".{split}.{side}.ids"
                offsets, unk = encode_side(vocabs[side], inputs[split, side], ids_file)
                encoded[side] = (ids_file, offsets, unk)
            if len(encoded["src"][1]) != len(encoded["tgt"][1]):
                raise DataError(inputs[split, "tgt"], f"has {len(encoded['tgt'][1]) - 1} sentences but "
                                f"{inputs[split, 'src']} has {len(encoded['src'][1]) - 1}")
            save_encoded(tmp / f"{split}.npz", {side: e[:2] for side, e in encoded.items()})
            stats[split] = {side: _side_stats(offsets, unk) for side, (_, offsets, unk) in encoded.items()}
            for ids_file, _, _ in encoded.values():
                ids_file.unlink()
            if split != "train":
                shutil.copyfile(in_dir / f"{split}.tgt", tmp / f"{split}.ref")
                if (in_dir / f"{split}.ref2").is_file():
                    shutil.copyfile(in_dir / f"{split}.ref2", tmp / f"{split}.ref2")
        same = n_dev = 0
        for chunk in _chunks(_lines(inputs["dev", "tgt"])):
            decoded = vocabs["tgt"].decode(vocabs["tgt"].encode(chunk))
            same += sum(a == b for a, b in zip(decoded, chunk))
            n_dev += len(chunk)
        stats["dev_tgt_roundtrip"] = round(same / max(n_dev, 1), 4)
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
