"""Filtering drops and counts what it must, keeps true pairs, and splits deterministically."""

from __future__ import annotations

import pytest

from flexatt.data.corpus import RawPair
from flexatt.data.filtering import clean_text, filter_and_split, filter_pairs, split_pairs
from flexatt.data.synthetic import generate, reorder_permutation
from flexatt.errors import DataError


def pairs_of(*rows, sides=None):
    return [RawPair(i + 1, s, t, dict(sides[i]) if sides else {}) for i, (s, t) in enumerate(rows)]


def test_clean_text_makes_whitespace_controls_safe():
    assert clean_text("  a\tb\x0bc\x0cd\re\u0085f\u2028g\u2029h  ") == "a b c d e f g h"
    for unsafe in ("\x00", "\x1b", "\x7f", "\x9b"):
        assert clean_text(f"a{unsafe}b") is None


def test_each_drop_reason_is_counted_and_first_wins():
    rows = [
        ("hola mundo", "hello world"),          # 1 kept
        ("   ", "empty source"),                 # 2 empty
        ("a\x00b", "nul byte"),                  # 3 control
        (" ".join(["w"] * 51), "long"),          # 4 too_long (checked before ratio)
        ("uno", "one two three four"),           # 5 ratio (4 > 3 x 1)
        ("hola  mundo", "hello\tworld"),         # 6 duplicate of 1 after cleaning
        ("adios", "bye"),                        # 7 kept
        ("", ""),                                # 8 empty
    ]
    result = filter_pairs(pairs_of(*rows), max_len=50, max_ratio=3.0)
    assert [(p.line, p.src, p.tgt) for p in result.kept] == [(1, "hola mundo", "hello world"),
                                                              (7, "adios", "bye")]
    assert dict(result.dropped) == {"empty": 2, "control": 1, "too_long": 1, "ratio": 1, "duplicate": 1}
    assert result.examples["empty"] == [2, 8]


def test_control_character_in_a_side_field_drops_the_pair():
    pairs = pairs_of(("a", "b"), ("c", "d"), sides=[{"ref2": "fine"}, {"ref2": "bad\x07"}])
    result = filter_pairs(pairs, 50, 3.0)
    assert [p.line for p in result.kept] == [1] and result.dropped["control"] == 1


def test_every_surviving_pair_is_a_true_pair():
    """On the synthetic task the target is a function of the source: check each kept pair."""
    triples = generate(300, vocab_size=20, min_len=1, max_len=60, chunk=3, seed=5)
    triples += triples[:30]  # exact duplicates
    pairs = pairs_of(*[(s, t) for s, t, _ in triples], sides=[{"align": a} for *_, a in triples])
    result = filter_pairs(pairs, max_len=50, max_ratio=3.0)
    assert result.dropped["too_long"] > 0 and result.dropped["duplicate"] > 0
    for pair in result.kept:
        src, tgt = pair.src.split(" "), pair.tgt.split(" ")
        perm = reorder_permutation(len(src), 3)
        assert tgt == [src[s].upper() for s in perm]
        assert pair.sides["align"] == triples[pair.line - 1][2]


def test_alignment_outside_the_sentence_is_refused():
    pairs = pairs_of(("a b", "x y"), sides=[{"align": "0-0 2-1"}])
    with pytest.raises(DataError, match=r"gold.align:1: alignment link 2-1 is outside"):
        filter_pairs(pairs, 50, 3.0, align_source="gold.align")


def test_split_is_deterministic_disjoint_and_ordered():
    pairs = pairs_of(*[(f"s{i}", f"t{i}") for i in range(100)])
    a = split_pairs(pairs, 10, 20, seed=3)
    b = split_pairs(pairs, 10, 20, seed=3)
    c = split_pairs(pairs, 10, 20, seed=4)
    assert a == b and a != c
    assert [len(a[k]) for k in ("train", "dev", "test")] == [70, 10, 20]
    lines = [p.line for k in ("train", "dev", "test") for p in a[k]]
    assert sorted(lines) == list(range(1, 101))
    for split in a.values():
        assert [p.line for p in split] == sorted(p.line for p in split)


def test_only_training_pairs_are_length_filtered():
    """2017 paper §5.1: long pairs leave the training set only; dev and test keep every length
    up to what the model can encode (``eval_max_len``), and duplicates never cross splits."""
    long_src, ratio_tgt = " ".join(["w"] * 60), " ".join(["v"] * 10)
    rows = []
    for i in range(60):
        if i % 3 == 0:
            rows.append((f"{long_src} {i}", f"long {i}"))        # too long for training, ratio too
        elif i % 3 == 1:
            rows.append((f"a{i}", f"{ratio_tgt} {i}"))           # ratio above 3
        else:
            rows.append((f"s{i}", f"t{i}"))
    rows += [(" ".join(["z"] * 300), "huge"), ("s2", "t2")]     # beyond eval_max_len; a duplicate
    splits, result = filter_and_split(pairs_of(*rows), dev_size=10, test_size=20, seed=5,
                                      max_len=50, max_ratio=3.0, eval_max_len=256)
    assert result.dropped["duplicate"] == 1
    for pair in splits["train"]:
        n_src, n_tgt = len(pair.src.split()), len(pair.tgt.split())
        assert max(n_src, n_tgt) <= 50 and max(n_src, n_tgt) <= 3 * min(n_src, n_tgt)
    held_out = splits["dev"] + splits["test"]
    assert any(len(p.src.split()) > 50 for p in held_out)  # long pairs kept in dev/test
    assert any(len(p.tgt.split()) > 3 * len(p.src.split()) for p in held_out)
    assert all(len(p.src.split()) <= 256 for p in held_out)
    huge_in_train = any(p.tgt == "huge" for p in splits["train"])
    assert result.dropped["too_long_eval"] == (0 if huge_in_train else 1)
    assert result.dropped["too_long"] + result.dropped["ratio"] + result.dropped["too_long_eval"] \
        + len(splits["train"]) + len(held_out) == 61
    assert len(result.kept) == sum(len(v) for v in splits.values())


def test_split_too_large_is_refused():
    with pytest.raises(ValueError, match="leaves no training pairs"):
        split_pairs(pairs_of(("a", "b"), ("c", "d")), 1, 1, seed=0)


def test_synthetic_alignment_is_the_permutation():
    assert reorder_permutation(7, 3) == [2, 1, 0, 5, 4, 3, 6]
    (src, tgt, align), = generate(1, min_len=7, max_len=7, seed=2)
    links = [tuple(map(int, x.split("-"))) for x in align.split()]
    s_words, t_words = src.split(), tgt.split()
    assert all(s_words[i].upper() == t_words[j] for i, j in links) and len(links) == 7
