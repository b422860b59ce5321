"""Cleaning, filtering and splitting sentence pairs (the ``filter`` stage's logic, pure functions).

Each pair is dropped for the FIRST of these reasons that applies, and counted under its name:

============== ===================================================================
``control``    a control character that cannot be made safe (C0/C1 controls that are not
               whitespace, e.g. NUL, ESC, DEL); whitespace controls (tab, vertical tab,
               form feed, lone CR, U+0085, U+2028/2029, …) are made safe as a space
``empty``      a side is empty or whitespace-only after cleaning
``too_long``   more than ``max_len`` whitespace-separated words on a side (paper: 50)
``ratio``      the longer side has more than ``max_ratio`` times the words of the shorter
``duplicate``  the exact (source, target) pair was already kept
============== ===================================================================

The filter stage applies them in two passes (docs/method.md, Filtering and splits): the
integrity rules (``control``, ``empty``, ``duplicate``) to the whole corpus before the split,
so no pair is both a training and a test pair; the length rules (``too_long``, ``ratio``) to
the training pairs only, as the papers do (2017 paper, §5.1). Dev and test keep sentences of
any length except what the model cannot encode, counted as ``too_long_eval``.

Text is cleaned by turning every whitespace character into a plain space and collapsing runs,
so tokens are exactly ``text.split(" ")``. Gold alignments (``align`` side field) index those
tokens; a link outside the cleaned sentence means the alignment file is out of line with the
corpus and is refused (:class:`~flexatt.errors.DataError`), never silently kept.
"""

from __future__ import annotations

import random
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from flexatt.data.corpus import RawPair, parse_alignment
from flexatt.errors import DataError

DROP_REASONS = ("control", "empty", "too_long", "ratio", "duplicate", "too_long_eval")
SPLITS = ("train", "dev", "test")


@dataclass
class FilterResult:
    """Kept pairs (cleaned, in input order) and the count and first lines of each drop reason."""

    kept: list[RawPair]
    dropped: Counter = field(default_factory=Counter)
    examples: dict[str, list[int]] = field(default_factory=dict)

    def drop(self, reason: str, line: int, max_examples: int = 10) -> None:
        self.dropped[reason] += 1
        lines = self.examples.setdefault(reason, [])
        if len(lines) < max_examples:
            lines.append(line)


def clean_text(text: str) -> str | None:
    """Normalise whitespace; return ``None`` when an unsafe control character is present.

    >>> clean_text(" a\\tb\\u2028c\\r d ")
    'a b c d'
    >>> clean_text("a\\x00b") is None
    True
    """
    for char in text:
        if unicodedata.category(char) == "Cc" and not char.isspace():
            return None
    return " ".join(text.split())


def filter_pairs(pairs: Sequence[RawPair], max_len: int | None, max_ratio: float | None,
                 align_source: str = "alignments", long_reason: str = "too_long") -> FilterResult:
    """Clean every pair and drop the ones that fail a rule (see the module docstring).

    Args:
        pairs: pairs as read; side fields are cleaned like the sentences, except ``align``.
        max_len: the largest number of words allowed on either side (``None``: no limit).
        max_ratio: the largest ratio of the longer to the shorter side's word count
            (``None``: no limit).
        align_source: file name used in the error message for a bad alignment line.
        long_reason: the name under which pairs longer than ``max_len`` are counted.

    Raises:
        DataError: an ``align`` link points outside its (cleaned) sentence, or is malformed.
    """
    result = FilterResult(kept=[])
    seen: set[tuple[str, str]] = set()
    for pair in pairs:
        src, tgt = clean_text(pair.src), clean_text(pair.tgt)
        sides = {k: (v if k == "align" else clean_text(v)) for k, v in pair.sides.items()}
        if src is None or tgt is None or any(v is None for v in sides.values()):
            result.drop("control", pair.line)
            continue
        if not src or not tgt:
            result.drop("empty", pair.line)
            continue
        n_src, n_tgt = src.count(" ") + 1, tgt.count(" ") + 1
        if max_len is not None and (n_src > max_len or n_tgt > max_len):
            result.drop(long_reason, pair.line)
            continue
        if max_ratio is not None and max(n_src, n_tgt) > max_ratio * min(n_src, n_tgt):
            result.drop("ratio", pair.line)
            continue
        if (src, tgt) in seen:
            result.drop("duplicate", pair.line)
            continue
        seen.add((src, tgt))
        if "align" in sides:
            where = f"{align_source}:{pair.line}"
            links = parse_alignment(sides["align"], where)
            for i, j in links:
                if i >= n_src or j >= n_tgt:
                    raise DataError(where, f"alignment link {i}-{j} is outside the sentence pair "
                                    f"({n_src} source and {n_tgt} target words): the alignment "
                                    "file is not in line with the corpus")
            sides["align"] = " ".join(f"{i}-{j}" for i, j in sorted(links))
        result.kept.append(RawPair(pair.line, src, tgt, sides))
    return result


def filter_and_split(pairs: Sequence[RawPair], dev_size: int, test_size: int, seed: int,
                     max_len: int, max_ratio: float, eval_max_len: int | None,
                     align_source: str = "alignments") -> tuple[dict[str, list[RawPair]], FilterResult]:
    """The filter stage's logic: integrity rules on every pair, the seeded split, then the
    length rules on the training pairs only; dev and test lose only pairs longer than
    ``eval_max_len`` words (``None``: none), counted as ``too_long_eval``.

    Returns the splits and one :class:`FilterResult` whose ``kept`` is every kept pair (train,
    then dev, then test) and whose counts cover both passes.

    Raises:
        ValueError: ``dev_size + test_size`` leaves no training pair.
        DataError: a bad gold alignment (see :func:`filter_pairs`).
    """
    clean = filter_pairs(pairs, None, None, align_source)
    splits = split_pairs(clean.kept, dev_size, test_size, seed)
    total = FilterResult(kept=[], dropped=clean.dropped, examples=clean.examples)
    for name in SPLITS:
        if name == "train":
            passed = filter_pairs(splits[name], max_len, max_ratio, align_source)
        else:
            passed = filter_pairs(splits[name], eval_max_len, None, align_source, long_reason="too_long_eval")
        for reason, count in passed.dropped.items():
            total.dropped[reason] += count
            lines = total.examples.setdefault(reason, [])
            lines.extend(passed.examples[reason][:max(0, 10 - len(lines))])
        splits[name] = passed.kept
        total.kept.extend(passed.kept)
    return splits, total


def split_pairs(pairs: Sequence[RawPair], dev_size: int, test_size: int,
                seed: int) -> dict[str, list[RawPair]]:
    """Split into train/dev/test at random with ``seed``; each split keeps the input order.

    The same pairs, sizes and seed always give the same split.

    Raises:
        ValueError: ``dev_size + test_size`` leaves no training pair.
    """
    n = len(pairs)
    if dev_size + test_size >= n:
        raise ValueError(f"dev_size + test_size = {dev_size + test_size} leaves no training pairs "
                         f"out of {n}")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    dev = sorted(order[:dev_size])
    test = sorted(order[dev_size:dev_size + test_size])
    train = sorted(order[dev_size + test_size:])
    return {name: [pairs[i] for i in idx] for name, idx in zip(SPLITS, (train, dev, test))}
