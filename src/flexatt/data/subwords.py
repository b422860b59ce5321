"""SentencePiece vocabularies and the encoded corpus format.

Ids are fixed across every model type: ``0`` padding, ``1`` unknown, ``2`` begin and ``3`` end of
sentence. Encoded sentences hold neither BOS nor EOS; batching adds them.

An encoded split is one ``.npz`` file holding, per side, all token ids concatenated
(``src_ids``, int32) and the start of each sentence (``src_offsets``, int64, ``n + 1`` entries),
so a split is four arrays, not a Python list per sentence, and :meth:`EncodedSplit.load`
memory-maps them: a corpus of millions of pairs is read from disk as batches touch it.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flexatt.errors import DataError
from flexatt.io import atomic_path

#: the special tokens' ids: :func:`train_sentencepiece` gives every vocabulary these, and
#: :class:`Vocab` refuses one that has others, so the searches and the batches can use them as
#: the vocabulary's own
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


def train_sentencepiece(inputs: list[Path], model_path: Path, model_type: str, vocab_size: int,
                        character_coverage: float = 1.0, threads: int = 1, seed: int = 1) -> None:
    """Train a SentencePiece model on the lines of ``inputs`` and write it to ``model_path``.

    ``vocab_size`` is exact for unigram and bpe, an upper bound for char and word (their
    vocabulary is what the data holds).
    """
    import sentencepiece as spm

    spm.set_random_generator_seed(seed)
    prefix = model_path.with_suffix("")
    spm.SentencePieceTrainer.train(
        input=[str(p) for p in inputs],
        model_prefix=str(prefix),
        model_type=model_type,
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        hard_vocab_limit=model_type in ("unigram", "bpe"),
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        num_threads=threads,
        input_sentence_size=0,  # use every sentence: no sampling, no run-to-run variation
        shuffle_input_sentence=False,
        minloglevel=2,
    )
    prefix.with_suffix(".vocab").unlink(missing_ok=True)
    _drop_paths(model_path)


def _drop_paths(model_path: Path) -> None:
    """Remove the training file paths SentencePiece records, so equal data give equal bytes."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_path.read_bytes())
    proto.trainer_spec.model_prefix = ""
    inputs = [Path(p).name for p in proto.trainer_spec.input]
    del proto.trainer_spec.input[:]
    proto.trainer_spec.input.extend(inputs)
    model_path.write_bytes(proto.SerializeToString())


class Vocab:
    """One side's SentencePiece model: text ⇄ ids."""

    def __init__(self, model_path: str | os.PathLike):
        import sentencepiece as spm

        self.path = Path(model_path)
        if not self.path.is_file():
            raise DataError(self.path, "SentencePiece model not found (run the tokenize stage)")
        self.sp = spm.SentencePieceProcessor(model_file=str(self.path))
        found = (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id())
        if found != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise DataError(self.path, f"special token ids (pad, unk, bos, eos) are {found}, not "
                            f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)} (a SentencePiece model not made by the tokenize stage)")

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, lines: list[str]) -> list[list[int]]:
        return self.sp.encode(lines, out_type=int)

    def pieces(self, line: str) -> list[str]:
        return self.sp.encode(line, out_type=str)

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Ids to detokenised text; stops at the first EOS and ignores PAD/BOS."""
        cleaned = []
        for seq in ids:
            seq = list(seq)
            if EOS_ID in seq:
                seq = seq[:seq.index(EOS_ID)]
            cleaned.append([i for i in seq if i not in (PAD_ID, BOS_ID)])
        return self.sp.decode(cleaned)


@dataclass
class EncodedSplit:
    """A split's token ids (without BOS/EOS), flat with offsets, for both sides."""

    src_ids: np.ndarray
    src_offsets: np.ndarray
    tgt_ids: np.ndarray
    tgt_offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    @staticmethod
    def from_lists(src: list[list[int]], tgt: list[list[int]]) -> EncodedSplit:
        if len(src) != len(tgt):
            raise ValueError(f"{len(src)} source but {len(tgt)} target sentences")

        def flat(seqs):
            offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
            offsets[1:] = np.cumsum([len(s) for s in seqs])
            ids = np.fromiter((i for s in seqs for i in s), dtype=np.int32, count=int(offsets[-1]))
            return ids, offsets

        return EncodedSplit(*flat(src), *flat(tgt))

    def src(self, i: int) -> np.ndarray:
        return self.src_ids[self.src_offsets[i]:self.src_offsets[i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        return self.tgt_ids[self.tgt_offsets[i]:self.tgt_offsets[i + 1]]

    @property
    def src_lengths(self) -> np.ndarray:
        return np.diff(self.src_offsets)

    @property
    def tgt_lengths(self) -> np.ndarray:
        return np.diff(self.tgt_offsets)

    def save(self, path: str | os.PathLike) -> None:
        with atomic_path(path) as tmp, open(tmp, "wb") as out:
            np.savez(out, src_ids=self.src_ids, src_offsets=self.src_offsets,
                     tgt_ids=self.tgt_ids, tgt_offsets=self.tgt_offsets)

    @staticmethod
    def load(path: str | os.PathLike, mmap: bool = True) -> EncodedSplit:
        """Read an encoded split; with ``mmap`` its arrays are memory-mapped, read-only.

        Memory-mapped, a split costs address space, not memory: the pages of the token ids
        are read when a batch touches them and the OS may drop them again, so training on
        millions of pairs holds no copy of the corpus. See :func:`_map_npz_member`."""
        keys = ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets")
        try:
            if mmap:
                split = EncodedSplit(*(_map_npz_member(path, k) for k in keys))
            else:
                with np.load(path, allow_pickle=False) as data:
                    split = EncodedSplit(*(data[k] for k in keys))
        except FileNotFoundError as exc:
            raise DataError(path, "encoded split not found (run the tokenize stage)") from exc
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            raise DataError(path, f"not a valid encoded split: {exc}") from exc
        for side in ("src", "tgt"):
            offsets, ids = getattr(split, f"{side}_offsets"), getattr(split, f"{side}_ids")
            if offsets[0] != 0 or offsets[-1] != len(ids) or np.any(np.diff(offsets) < 0):
                raise DataError(path, f"corrupt {side} offsets")
        if len(split.src_offsets) != len(split.tgt_offsets):
            raise DataError(path, "source and target sentence counts differ")
        return split


_ZIP_LOCAL_HEADER = 30  # bytes of a ZIP local file header before its name and extra field
_NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _map_npz_member(path: str | os.PathLike, key: str) -> np.ndarray:
    """The array ``key`` of the ``.npz`` at ``path``, memory-mapped where the file allows it.

    ``np.load`` ignores ``mmap_mode`` for ``.npz`` archives and reads every member it is asked
    for, so this maps the member itself: ``np.savez`` stores members uncompressed, and a stored
    member's ``.npy`` bytes lie contiguously in the archive after its local file header. A
    compressed member (``np.savez_compressed``) or an object array is read into memory."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(f"{key}.npy")
        if info.compress_type != zipfile.ZIP_STORED:
            with archive.open(info) as member:
                return np.lib.format.read_array(member, allow_pickle=False)
    with open(path, "rb") as raw:
        raw.seek(info.header_offset)
        local = raw.read(_ZIP_LOCAL_HEADER)
        if len(local) != _ZIP_LOCAL_HEADER or local[:4] != b"PK\x03\x04":
            raise ValueError(f"{key}.npy: bad ZIP local header")
        name_len, extra_len = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
        start = info.header_offset + _ZIP_LOCAL_HEADER + name_len + extra_len
        raw.seek(start)
        read_header = _NPY_HEADER_READERS.get(np.lib.format.read_magic(raw))
        if read_header is None:  # a newer .npy version: read it, do not guess its layout
            with np.load(path, allow_pickle=False) as data:
                return data[key]
        shape, fortran, dtype = read_header(raw)
        data_start = raw.tell()
    if dtype.hasobject:
        raise ValueError(f"{key}.npy: object arrays are not allowed")
    count = int(np.prod(shape))
    if data_start - start + count * dtype.itemsize != info.file_size:
        raise ValueError(f"{key}.npy: {info.file_size} bytes stored, the header describes "
                         f"{data_start - start + count * dtype.itemsize}")
    if count == 0:
        return np.empty(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=data_start, shape=shape,
                     order="F" if fortran else "C")
