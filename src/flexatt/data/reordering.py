"""How much a corpus's gold word alignments reorder: crossing links and distortion.

Standard library only, so that the corpus build scripts (``scripts/build_nt_corpus.py``) load
this file as it is. Hand-written: the measures are a few lines over Pharaoh links, and no
alignment library we use computes them.

A sentence's alignment is a set of links ``(i, j)`` between 0-based source token ``i`` of ``S``
and target token ``j`` of ``T``. Over a corpus:

* ``crossing_link_pairs``: of the pairs of links of a sentence that share neither word (a pair
  sharing a word can neither cross nor keep an order), the fraction that cross,
  ``(i1 - i2) · (j1 - j2) < 0``, pooled over all sentences;
* ``sentences_with_crossing``: the share of sentences with at least one crossing pair;
* ``mean_distortion``: the mean over all links of ``|i/S - j/T|``.

A monotone alignment scores 0 on all three.
"""

from __future__ import annotations

from collections.abc import Iterable


def parse_pharaoh(line: str) -> list[tuple[int, int]]:
    """``"0-1 2-2"`` -> ``[(0, 1), (2, 2)]``."""
    return [(int(i), int(j)) for i, j in (link.split("-") for link in line.split())]


class Reordering:
    """The measures above, accumulated one sentence at a time (:meth:`add`, :meth:`summary`)."""

    def __init__(self) -> None:
        self.pairs = self.crossing = self.with_crossing = self.sentences = self.links = 0
        self.distortion = 0.0

    def add(self, links: Iterable[tuple[int, int]], src_len: int, tgt_len: int) -> None:
        """One sentence: its links and its source and target lengths in tokens."""
        links = list(links)
        here = 0
        for a, (i1, j1) in enumerate(links):
            self.distortion += abs(i1 / src_len - j1 / tgt_len)
            for i2, j2 in links[a + 1:]:
                if i1 != i2 and j1 != j2:
                    self.pairs += 1
                    here += (i1 - i2) * (j1 - j2) < 0
        self.crossing += here
        self.with_crossing += here > 0
        self.sentences += 1
        self.links += len(links)

    def summary(self) -> dict[str, float | int]:
        """``{crossing_link_pairs, sentences_with_crossing, mean_distortion, sentences, links}``
        (the three measures rounded to 4 decimals; 0 where there is nothing to count)."""
        ratio = lambda a, b: round(a / b, 4) if b else 0.0  # noqa: E731
        return {"crossing_link_pairs": ratio(self.crossing, self.pairs),
                "sentences_with_crossing": ratio(self.with_crossing, self.sentences),
                "mean_distortion": ratio(self.distortion, self.links),
                "sentences": self.sentences, "links": self.links}
