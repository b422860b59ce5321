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

The filter stage streams, in two passes over the corpus (:func:`plan_split`, then
:func:`apply_split`; :func:`stream_filter_and_split` runs both). The first pass applies the
integrity rules and remembers of each pair only a 16-byte hash (BLAKE2b of ``source TAB
target``; two different pairs share one with a probability of about n²/2¹²⁹, 10⁻²⁶ at 4.5
million pairs) and one byte (kept or not); the split then needs only the number of kept pairs.
The second pass reads the corpus again, cleans the kept pairs again, assigns each its split,
applies the length rules and hands it to a writer. The result is exactly what
:func:`filter_and_split` gives on the list of the pairs, in about 100 bytes of memory per pair
during the first pass (the hashes) and one byte per pair during the second, whatever the
sentences' length.

**Fixed splits.** Where the corpus fixes each pair's split (:attr:`RawPair.split`: a TSV's
``split`` column, or dev and test files beside the training files), :func:`plan_split` with
``fixed=True`` takes it instead of drawing one: ``dev_size``, ``test_size`` and ``seed`` do not
apply. Dev and test are then kept as given, duplicates included (a fixed test set is scored
whole); the training pairs are deduplicated among themselves as above, and a training pair that
is also a dev or test pair is dropped as a ``duplicate`` too (found in the second pass, against
the dev and test pairs' hashes), so that still no pair is both a training and a test pair. The
length rules apply as above.

Text is cleaned by turning every whitespace character into a plain space and collapsing runs,
so tokens are exactly ``text.split(" ")``. Gold alignments (``align`` side field) index those
tokens; a link outside the cleaned sentence means the alignment file is out of line with the
corpus and is refused (:class:`~flexatt.errors.DataError`), never silently kept.
"""

from __future__ import annotations

import hashlib
import random
import re
import unicodedata
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from flexatt.data.corpus import SPLITS, RawPair, parse_alignment
from flexatt.errors import DataError

DROP_REASONS = ("control", "empty", "too_long", "ratio", "duplicate", "too_long_eval")


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
    if _UNSAFE_CONTROL.search(text):
        return None
    return " ".join(text.split())


# The characters clean_text refuses: category Cc (by Unicode's stability policy exactly
# U+0000-U+001F and U+007F-U+009F, in every version) that are not whitespace.
_UNSAFE_CONTROL = re.compile("[" + "".join(
    re.escape(chr(c)) for c in (*range(0x20), *range(0x7F, 0xA0))
    if unicodedata.category(chr(c)) == "Cc" and not chr(c).isspace()) + "]")


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
    seen: set[bytes] = set()
    for pair in pairs:
        kept = check_pair(pair, max_len, max_ratio, seen, align_source, long_reason)
        if isinstance(kept, str):
            result.drop(kept, pair.line)
        else:
            result.kept.append(kept)
    return result


def pair_digest(src: str, tgt: str) -> bytes:
    """The fixed-size (16-byte) key under which a cleaned pair is deduplicated."""
    return hashlib.blake2b(f"{src}\t{tgt}".encode("utf-8", "surrogatepass"), digest_size=16).digest()


def check_pair(pair: RawPair, max_len: int | None, max_ratio: float | None, seen: set[bytes] | None,
               align_source: str = "alignments", long_reason: str = "too_long") -> RawPair | str:
    """One pair through the rules of :func:`filter_pairs`: the cleaned pair, or the name of the
    first rule it fails. A kept pair's digest is added to ``seen`` (``None``: no deduplication).

    Raises:
        DataError: a bad gold alignment (see :func:`filter_pairs`).
    """
    src, tgt = clean_text(pair.src), clean_text(pair.tgt)
    sides = {k: (v if k == "align" else clean_text(v)) for k, v in pair.sides.items()}
    if src is None or tgt is None or any(v is None for v in sides.values()):
        return "control"
    if not src or not tgt:
        return "empty"
    n_src, n_tgt = src.count(" ") + 1, tgt.count(" ") + 1
    if max_len is not None and (n_src > max_len or n_tgt > max_len):
        return long_reason
    if max_ratio is not None and max(n_src, n_tgt) > max_ratio * min(n_src, n_tgt):
        return "ratio"
    if seen is not None:
        digest = pair_digest(src, tgt)
        if digest in seen:
            return "duplicate"
        seen.add(digest)
    if "align" in sides:
        where = f"{align_source}:{pair.line}"
        links = parse_alignment(sides["align"], where)
        for i, j in links:
            if i >= n_src or j >= n_tgt:
                raise DataError(where, f"alignment link {i}-{j} is outside the sentence pair "
                                f"({n_src} source and {n_tgt} target words): the alignment "
                                "file is not in line with the corpus")
        sides["align"] = " ".join(f"{i}-{j}" for i, j in sorted(links))
    return RawPair(pair.line, src, tgt, sides, pair.split)


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
    dev, test = split_indices(len(pairs), dev_size, test_size, seed)
    out: dict[str, list[RawPair]] = {name: [] for name in SPLITS}
    for i, pair in enumerate(pairs):
        out["dev" if i in dev else "test" if i in test else "train"].append(pair)
    return out


def split_indices(n: int, dev_size: int, test_size: int, seed: int) -> tuple[set[int], set[int]]:
    """The positions (0-based, among ``n`` pairs) of the dev and the test pairs; every other
    position is a training pair. ``random.Random(seed)`` shuffles the positions (an array of
    8-byte integers, not a list of objects) and the first ``dev_size``, then the next
    ``test_size`` are taken.

    Raises:
        ValueError: ``dev_size + test_size`` leaves no training pair.
    """
    if dev_size + test_size >= n:
        raise ValueError(f"dev_size + test_size = {dev_size + test_size} leaves no training pairs "
                         f"out of {n}")
    order = array("q", range(n))
    random.Random(seed).shuffle(order)
    return set(order[:dev_size]), set(order[dev_size:dev_size + test_size])


@dataclass
class SplitPlan:
    """What the first pass (:func:`plan_split`) learnt: the integrity drops (counts and first
    lines), which pairs survived them (one byte per pair read, in reading order), the dev and
    test positions among the survivors, their side fields, and a hash of the survivors in order
    (the second pass must meet the same pairs). With ``fixed`` splits, ``dev`` and ``test`` are
    empty (each pair carries its split) and ``held_out`` holds the hashes of the dev and test
    pairs, which no training pair may repeat."""

    read: int
    integrity: FilterResult
    kept: bytearray
    n_kept: int
    dev: set[int]
    test: set[int]
    side_keys: list[str]
    chain: bytes
    fixed: bool = False
    held_out: set[bytes] = field(default_factory=set)


@dataclass
class StreamResult:
    """What :func:`apply_split` wrote: all the drops (as :class:`FilterResult` counts them),
    the pairs read, and per split the pairs kept and their source and target word totals."""

    read: int = 0
    dropped: Counter = field(default_factory=Counter)
    examples: dict[str, list[int]] = field(default_factory=dict)
    pairs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SPLITS, 0))
    words: dict[str, list[int]] = field(default_factory=lambda: {name: [0, 0] for name in SPLITS})
    side_names: list[str] = field(default_factory=list)

    @property
    def kept(self) -> int:
        return sum(self.pairs.values())


def plan_split(pairs: Iterable[RawPair], dev_size: int, test_size: int, seed: int,
               align_source: str = "alignments", fixed: bool = False) -> SplitPlan:
    """The first pass: the integrity rules on every pair (deduplicating by :func:`pair_digest`),
    then the seeded split of the survivors (:func:`split_indices`); with ``fixed``, the split
    each pair carries (see the module docstring), and ``dev_size``, ``test_size`` and ``seed``
    are not used.

    Raises:
        ValueError: ``dev_size + test_size`` leaves no training pair, or the pairs do not all
            carry the same side fields; with ``fixed``, a pair without a split, or a split
            left without pairs.
        DataError: a bad gold alignment (see :func:`filter_pairs`).
    """
    integrity = FilterResult(kept=[])
    seen: set[bytes] = set()
    held_out: set[bytes] = set()
    per_split = dict.fromkeys(SPLITS, 0)
    kept = bytearray()
    chain = hashlib.blake2b(digest_size=16)
    side_keys: list[str] | None = None
    for pair in pairs:
        if fixed and pair.split not in SPLITS:
            raise ValueError(f"the pair of line {pair.line} has no split (got {pair.split!r})")
        # fixed dev and test pairs are kept as given: not deduplicated
        cleaned = check_pair(pair, None, None, seen if not fixed or pair.split == "train" else None, align_source)
        if isinstance(cleaned, str):
            integrity.drop(cleaned, pair.line)
            kept.append(0)
            continue
        if side_keys is None:
            side_keys = list(cleaned.sides)
        elif cleaned.sides.keys() != set(side_keys):
            raise ValueError(f"the pair of line {pair.line} has the side fields {sorted(cleaned.sides)}, "
                             f"the first pair {sorted(side_keys)}")
        kept.append(1)
        digest = pair_digest(cleaned.src, cleaned.tgt)
        chain.update(digest)
        if fixed:
            per_split[pair.split] += 1
            if pair.split != "train":
                held_out.add(digest)
    if fixed:
        del seen
        for name, count in per_split.items():
            if not count:
                raise ValueError(f"the corpus fixes no {name} pairs (of {len(kept)} read)")
        return SplitPlan(len(kept), integrity, kept, sum(per_split.values()), set(), set(), side_keys or [],
                         chain.digest(), True, held_out)
    n_kept = len(seen)
    del seen
    dev, test = split_indices(n_kept, dev_size, test_size, seed)
    return SplitPlan(len(kept), integrity, kept, n_kept, dev, test, side_keys or [], chain.digest())


def apply_split(plan: SplitPlan, pairs: Iterable[RawPair], write: Callable[[str, RawPair], None],
                max_len: int, max_ratio: float, eval_max_len: int | None,
                align_source: str = "alignments", corpus: str = "corpus") -> StreamResult:
    """The second pass, over the same pairs as :func:`plan_split`'s: clean each kept pair again,
    assign its split, apply the length rules (training: ``max_len`` and ``max_ratio``; dev and
    test: ``eval_max_len``) and call ``write(split, pair)`` for each pair that passes, each
    split's pairs in input order (the splits interleaved). With a plan of fixed splits, a
    training pair that repeats a dev or test pair is dropped as a ``duplicate``.

    Raises:
        DataError: the pairs are not those of the first pass (the corpus, named ``corpus`` in
            the message, changed in between).
    """
    result = StreamResult(read=plan.read)
    per_split = {name: FilterResult(kept=[]) for name in SPLITS}
    chain = hashlib.blake2b(digest_size=16)
    count = position = 0
    changed = False
    for pair in pairs:
        if count >= plan.read:
            changed = True
            break
        count += 1
        if not plan.kept[count - 1]:
            continue
        cleaned = check_pair(pair, None, None, None, align_source)
        if isinstance(cleaned, str):
            changed = True
            break
        digest = pair_digest(cleaned.src, cleaned.tgt)
        chain.update(digest)
        if plan.fixed:
            name = cleaned.split
        else:
            name = "dev" if position in plan.dev else "test" if position in plan.test else "train"
        position += 1
        src, tgt = cleaned.src, cleaned.tgt
        n_src, n_tgt = src.count(" ") + 1, tgt.count(" ") + 1
        if plan.fixed and name == "train" and digest in plan.held_out:
            per_split[name].drop("duplicate", cleaned.line)
            continue
        if name == "train":
            if n_src > max_len or n_tgt > max_len:
                per_split[name].drop("too_long", cleaned.line)
                continue
            if max(n_src, n_tgt) > max_ratio * min(n_src, n_tgt):
                per_split[name].drop("ratio", cleaned.line)
                continue
        elif eval_max_len is not None and (n_src > eval_max_len or n_tgt > eval_max_len):
            per_split[name].drop("too_long_eval", cleaned.line)
            continue
        result.pairs[name] += 1
        result.words[name][0] += n_src
        result.words[name][1] += n_tgt
        write(name, cleaned)
    if changed or count != plan.read or position != plan.n_kept or chain.digest() != plan.chain:
        raise DataError(corpus, "changed while the filter read it (its two passes met different pairs)")
    result.dropped, result.examples = Counter(plan.integrity.dropped), {
        k: list(v) for k, v in plan.integrity.examples.items()}
    for name in SPLITS:  # merged as filter_and_split merges them: train, dev, then test
        passed = per_split[name]
        for reason, count in passed.dropped.items():
            result.dropped[reason] += count
            lines = result.examples.setdefault(reason, [])
            lines.extend(passed.examples[reason][:max(0, 10 - len(lines))])
    result.side_names = sorted(plan.side_keys) if result.kept else []
    return result


def stream_filter_and_split(open_pairs: Callable[[], Iterable[RawPair]], write: Callable[[str, RawPair], None],
                            dev_size: int, test_size: int, seed: int, max_len: int, max_ratio: float,
                            eval_max_len: int | None, align_source: str = "alignments",
                            corpus: str = "corpus", fixed: bool = False) -> StreamResult:
    """:func:`filter_and_split` over a corpus read twice: ``open_pairs()`` must give the same
    pairs each time (e.g. a reader of the same files). See :func:`plan_split` (``fixed``: the
    splits the pairs carry) and :func:`apply_split`."""
    plan = plan_split(open_pairs(), dev_size, test_size, seed, align_source, fixed)
    return apply_split(plan, open_pairs(), write, max_len, max_ratio, eval_max_len, align_source, corpus)
