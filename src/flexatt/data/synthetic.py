"""A synthetic translation task with controlled local reordering (Joey NMT's reverse task, refined).

The source is a random sequence of made-up words; the target translates each word through a
fixed one-to-one lexicon and reverses every consecutive chunk of ``chunk`` words::

    source:  ko-3 ma-1 ti-7 | pe-2 lu-5 ...        (chunk = 3)
    target:  TI-7 MA-1 KO-3 | ... LU-5 PE-2

So the correct attention moves forward chunk by chunk and backwards inside a chunk: a task on
which a small window suffices, and whose gold word alignment is known exactly (it is returned as
the ``align`` side field, in Pharaoh format). Used by the tests and the ``smoke`` profile.

``reverse`` sets how much the task reorders: the share of chunks that are reversed (the others
are translated in order). Which chunks is decided by the source itself, so that the target stays
a function of the source (a chunk reversed at random would make the order unpredictable, and the
task unlearnable in part whatever the attention): a chunk is reversed when the lexicon entry of
its first word is among the first ``round(reverse * vocab_size)`` entries, which the seeded
RNG's uniform draw of words makes a share ``reverse`` of the chunks. Nothing more is drawn, so
every level has the same source sentences, and at 1.0 (the default) every chunk is reversed:
the corpus is byte for byte what the generator wrote before it had a level. At 0.0 the task is
monotone.

Run ``python -m flexatt.data.synthetic PREFIX`` to write ``PREFIX.src``, ``PREFIX.tgt`` and
``PREFIX.align``.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from flexatt.data.corpus import RawPair, ReadResult
from flexatt.io import write_lines

_SYLLABLES = ["ka", "lo", "mi", "ne", "pu", "ri", "sa", "te", "vo", "zu"]


def _word(index: int) -> str:
    """A made-up source word for lexicon entry ``index`` (e.g. ``"lo-12"``)."""
    return f"{_SYLLABLES[index % len(_SYLLABLES)]}-{index}"


def reorder_permutation(length: int, chunk: int, flips: Sequence[bool] | None = None) -> list[int]:
    """Target position j reads source position ``perm[j]``: each chunk of ``chunk`` reversed, or
    (``flips`` given, one flag per chunk) the chunks whose flag is true."""
    perm: list[int] = []
    for k, start in enumerate(range(0, length, chunk)):
        positions = range(start, min(start + chunk, length))
        perm.extend(reversed(positions) if flips is None or flips[k] else positions)
    return perm


def iter_generate(n_pairs: int, vocab_size: int = 40, min_len: int = 3, max_len: int = 12,
                  chunk: int = 3, seed: int = 1, reverse: float = 1.0) -> Iterator[tuple[str, str, str]]:
    """Yield ``n_pairs`` (source, target, Pharaoh alignment) triples, deterministically, one at
    a time (:func:`generate` collects them); ``reverse``: the share of chunks reversed."""
    if not (0 < min_len <= max_len) or vocab_size < 2 or chunk < 1 or n_pairs < 1 or not 0.0 <= reverse <= 1.0:
        raise ValueError("need n_pairs >= 1, vocab_size >= 2, chunk >= 1, 0 < min_len <= max_len, "
                         "0 <= reverse <= 1")
    rng = random.Random(seed)
    markers = round(reverse * vocab_size)  # a chunk whose first word's entry is below this is reversed
    for _ in range(n_pairs):
        words = [rng.randrange(vocab_size) for _ in range(rng.randint(min_len, max_len))]
        flips = None if markers >= vocab_size else [words[start] < markers for start in range(0, len(words), chunk)]
        perm = reorder_permutation(len(words), chunk, flips)
        src = " ".join(_word(w) for w in words)
        tgt = " ".join(_word(words[s]).upper() for s in perm)
        align = " ".join(f"{s}-{j}" for j, s in sorted(enumerate(perm), key=lambda js: js[1]))
        yield src, tgt, align


def generate(n_pairs: int, vocab_size: int = 40, min_len: int = 3, max_len: int = 12,
             chunk: int = 3, seed: int = 1, reverse: float = 1.0) -> list[tuple[str, str, str]]:
    """Generate ``n_pairs`` (source, target, Pharaoh alignment) triples, deterministically."""
    return list(iter_generate(n_pairs, vocab_size, min_len, max_len, chunk, seed, reverse))


def iter_synthetic(spec: Mapping) -> Iterator[RawPair]:
    """The synthetic corpus described by ``data.synthetic`` as :class:`RawPair` records, streamed."""
    triples = iter_generate(int(spec["n_pairs"]), int(spec["vocab_size"]), int(spec["min_len"]),
                            int(spec["max_len"]), int(spec["chunk"]), int(spec["seed"]),
                            float(spec.get("reverse", 1.0)))
    for i, (s, t, a) in enumerate(triples):
        yield RawPair(i + 1, s, t, {"align": a})


def read_synthetic(spec: Mapping) -> ReadResult:
    """The synthetic corpus described by ``data.synthetic`` as :class:`RawPair` records."""
    return ReadResult(list(iter_synthetic(spec)), [])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prefix", type=Path, help="writes PREFIX.src, PREFIX.tgt, PREFIX.align")
    parser.add_argument("--n-pairs", type=int, default=1000)
    parser.add_argument("--vocab-size", type=int, default=40)
    parser.add_argument("--min-len", type=int, default=3)
    parser.add_argument("--max-len", type=int, default=12)
    parser.add_argument("--chunk", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reverse", type=float, default=1.0, help="the share of chunks reversed (default: all)")
    args = parser.parse_args(argv)
    triples = generate(args.n_pairs, args.vocab_size, args.min_len, args.max_len, args.chunk, args.seed,
                       args.reverse)
    for i, suffix in enumerate(("src", "tgt", "align")):
        write_lines(f"{args.prefix}.{suffix}", (t[i] for t in triples))


if __name__ == "__main__":
    main()
