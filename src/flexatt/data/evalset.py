"""A split ready for decoding and scoring: ids, references, vocabularies."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flexatt.data.subwords import EncodedSplit, Vocab
from flexatt.errors import DataError
from flexatt.io import read_lines


@dataclass
class EvalSet:
    """A split ready for decoding and scoring: ids, references, vocabularies."""

    name: str
    split: EncodedSplit
    references: list[str]
    second_references: list[str] | None
    src_vocab: Vocab
    tgt_vocab: Vocab

    @staticmethod
    def load(tok_dir: str | Path, name: str) -> EvalSet:
        tok_dir = Path(tok_dir)
        split = EncodedSplit.load(tok_dir / f"{name}.npz")
        refs = read_lines(tok_dir / f"{name}.ref")
        ref2 = read_lines(tok_dir / f"{name}.ref2") if (tok_dir / f"{name}.ref2").is_file() else None
        for path, lines in ((f"{name}.ref", refs), (f"{name}.ref2", ref2)):
            if lines is not None and len(lines) != len(split):
                raise DataError(tok_dir / path, f"has {len(lines)} lines for {len(split)} sentences")
        return EvalSet(name, split, refs, ref2, Vocab(tok_dir / "src.model"), Vocab(tok_dir / "tgt.model"))

    @property
    def mean_src_len(self) -> float:
        """S̄: mean source length as the attention sees it (subword tokens + EOS)."""
        return float(np.mean(self.split.src_lengths + 1))
