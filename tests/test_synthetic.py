"""The synthetic task's reordering level (data.synthetic.reverse): the default reverses every chunk
and draws exactly what the generator always drew; lower levels reverse that share of the chunks,
those whose first word is a marker, so the target stays a function of the source."""

from __future__ import annotations

import hashlib

import pytest

from flexatt.data.reordering import Reordering, parse_pharaoh
from flexatt.data.synthetic import generate, iter_synthetic, reorder_permutation

# sha256 of the smoke profile's corpus (conf/data/synthetic.yaml: 1,200 pairs, seed 1) as the
# generator wrote it before it had a reordering level: the default must stay byte-identical
SMOKE_CORPUS_SHA256 = "7e553fce57d98647c712d8fa9d8ac6c1eaf5772cb6f8a28b3194a7d175e2f122"
SMOKE = {"n_pairs": 1200, "vocab_size": 40, "min_len": 3, "max_len": 12, "chunk": 3, "seed": 1}


def digest(triples) -> str:
    return hashlib.sha256("\n".join("\t".join(t) for t in triples).encode()).hexdigest()


def crossing(triples) -> float:
    measures = Reordering()
    for src, tgt, align in triples:
        measures.add(parse_pharaoh(align), len(src.split()), len(tgt.split()))
    return measures.summary()["crossing_link_pairs"]


def test_the_default_level_draws_what_the_generator_always_drew():
    assert digest(generate(**SMOKE)) == SMOKE_CORPUS_SHA256
    assert digest(generate(**SMOKE, reverse=1.0)) == SMOKE_CORPUS_SHA256
    # the stage's reader, given the smoke config with and without the key
    pairs = [(p.src, p.tgt, p.sides["align"]) for p in iter_synthetic({**SMOKE, "reverse": 1.0})]
    assert digest(pairs) == SMOKE_CORPUS_SHA256
    assert digest((p.src, p.tgt, p.sides["align"]) for p in iter_synthetic(SMOKE)) == SMOKE_CORPUS_SHA256


def test_a_level_of_zero_is_monotone_with_the_same_sources():
    monotone, default = generate(**SMOKE, reverse=0.0), generate(**SMOKE)
    assert [s for s, _, _ in monotone] == [s for s, _, _ in default]  # the same words: nothing else drawn
    for src, tgt, align in monotone:
        assert tgt == src.upper() and align == " ".join(f"{i}-{i}" for i in range(len(src.split())))
    assert crossing(monotone) == 0.0


@pytest.mark.parametrize("level", [0.25, 0.5, 0.75])
def test_a_level_reverses_that_share_of_the_chunks_those_that_start_with_a_marker(level):
    triples = generate(**{**SMOKE, "n_pairs": 3000}, reverse=level)
    assert [s for s, _, _ in triples] == [s for s, _, _ in generate(**{**SMOKE, "n_pairs": 3000})]
    markers = round(level * SMOKE["vocab_size"])
    reversed_chunks = chunks = 0
    for src, tgt, align in triples:
        words = src.split()
        links = dict(parse_pharaoh(align))  # source -> target position: a permutation
        assert sorted(links.values()) == list(range(len(words)))
        assert all(words[i].upper() == tgt.split()[j] for i, j in links.items())
        for start in range(0, len(words), 3):
            positions = list(range(start, min(start + 3, len(words))))
            if len(positions) > 1:
                chunks += 1
                flipped = [links[i] for i in positions] == positions[::-1]
                assert flipped == (int(words[start].split("-")[1]) < markers)  # the source decides
                reversed_chunks += flipped
    assert abs(reversed_chunks / chunks - level) < 0.03
    # reordering grows with the level, about linearly (a full reversal: ~0.24 of link pairs cross)
    assert abs(crossing(triples) - level * crossing(generate(**SMOKE))) < 0.03


def test_the_permutation_of_chosen_chunks():
    assert reorder_permutation(7, 3, [True, False, True]) == [2, 1, 0, 3, 4, 5, 6]
    assert reorder_permutation(7, 3, [False, True, False]) == [0, 1, 2, 5, 4, 3, 6]
    assert reorder_permutation(7, 3) == reorder_permutation(7, 3, [True] * 3)


def test_the_target_is_a_function_of_the_source():
    """The same source sentence always gets the same target, at every level (no hidden coin)."""
    for level in (0.25, 0.5):
        seen = {}
        for src, tgt, _ in generate(**{**SMOKE, "n_pairs": 5000, "min_len": 3, "max_len": 3, "vocab_size": 6},
                                    reverse=level):
            assert seen.setdefault(src, tgt) == tgt


def test_a_level_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match="0 <= reverse <= 1"):
        generate(5, reverse=1.5)
