"""The corpus generator of ``benchmarks/scale.py``: deterministic, line-aligned, within its bounds."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def scale():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "benchmarks" / "scale.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def _generate(scale, folder: Path, seed: int = 7, pairs: int = 5000) -> tuple[dict, bytes, bytes]:
    # chunks of 2,000 (the last one shorter): duplicates are also copied across chunk boundaries
    spec = scale.CorpusSpec(pairs=pairs, seed=seed, vocab=5000, chunk=2000)
    folder.mkdir(parents=True, exist_ok=True)
    counts = scale.generate_corpus(spec, folder / "c.src", folder / "c.tgt")
    return counts, (folder / "c.src").read_bytes(), (folder / "c.tgt").read_bytes()


def test_the_corpus_is_deterministic_from_the_seed(scale, tmp_path):
    first = _generate(scale, tmp_path / "a")
    assert _generate(scale, tmp_path / "b") == first
    other = _generate(scale, tmp_path / "c", seed=8)
    assert other[1] != first[1] and other[2] != first[2]


def test_the_corpus_is_aligned_utf8_within_bounds_with_duplicates(scale, tmp_path):
    counts, src_bytes, tgt_bytes = _generate(scale, tmp_path)
    spec = scale.CorpusSpec(pairs=5000)
    src = src_bytes.decode("utf-8").split("\n")  # strict: raises on invalid UTF-8
    tgt = tgt_bytes.decode("utf-8").split("\n")
    assert src[-1] == tgt[-1] == ""  # every line ends with a newline
    src, tgt = src[:-1], tgt[:-1]
    assert len(src) == len(tgt) == counts["pairs"] == 5000
    assert any(ord(c) > 127 for line in src[:50] for c in line)  # accented source words

    n_src = [len(line.split(" ")) for line in src]
    n_tgt = [len(line.split(" ")) for line in tgt]
    assert sum(n_src) == counts["src_words"] and sum(n_tgt) == counts["tgt_words"]
    for line in src + tgt:
        assert line == " ".join(line.split()) and line[-1] in ".?!" and line[0].isupper()
    long = [i for i, n in enumerate(n_src) if n > spec.max_len]
    assert len(long) == counts["long"] > 0
    assert all(spec.long_min <= n_src[i] <= spec.long_max for i in long)
    normal = [i for i in range(len(src)) if n_src[i] <= spec.max_len]
    assert all(spec.min_len <= n_src[i] <= spec.max_len and spec.min_len <= n_tgt[i] <= spec.max_len
               for i in normal)
    bad_ratio = sum(max(a, b) > 3 * min(a, b) for a, b in zip(n_src, n_tgt))
    assert bad_ratio >= counts["ratio"] > 0

    repeats = len(src) - len(set(zip(src, tgt)))
    assert repeats >= counts["duplicates"] > 0
    assert max(Counter(zip(src, tgt)).values()) < 10  # copies of earlier pairs, not one pair everywhere
