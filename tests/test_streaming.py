"""Issue 20: the filter and tokenize stages stream a corpus of millions of pairs.

The filter reads line by line and deduplicates by a fixed-size hash (two passes over the corpus,
no copy of it in memory), with exactly the list-based filter's results; bad input anywhere in a
large file is still refused by file and line; tokenize trains SentencePiece on a seeded sample
beyond ``SP_MAX_PAIRS`` pairs and encodes in chunks into the same ``.npz`` bytes.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import tracemalloc
import unicodedata

import numpy as np
import pytest

from flexatt import config as C
from flexatt.data import filtering
from flexatt.data.corpus import (InvalidLines, RawPair, count_lines, iter_raw_lines, iter_text_files,
                                 read_text_files)
from flexatt.data.filtering import (SPLITS, apply_split, clean_text, filter_and_split, plan_split,
                                    split_indices, stream_filter_and_split)
from flexatt.data.subwords import EncodedSplit, Vocab
from flexatt.errors import DataError
from flexatt.io import read_raw_lines
from flexatt.stages import filter as filter_stage
from flexatt.stages import tokenize as tokenize_stage

# ----------------------------------------------------------------------------- helpers


def random_corpus(n: int, seed: int, align: bool = True) -> list[RawPair]:
    """Pairs that exercise every rule: controls, empty sides, long and unbalanced pairs,
    duplicates (also after whitespace cleaning), gold alignments and a side field."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30)] + ["ñandú", "Ωmega"]
    pairs: list[RawPair] = []
    for line in range(1, n + 1):
        kind = rng.random()
        if pairs and kind < 0.1:  # a copy of an earlier pair, with different spacing
            old = rng.choice(pairs)
            src, tgt = f"  {old.src.replace(' ', chr(9))} ", old.tgt
        else:
            n_src = rng.choice([1, 2, 5, 12, 55, 70]) if kind < 0.3 else rng.randint(1, 12)
            n_tgt = n_src if rng.random() < 0.7 else rng.randint(1, 60)
            src = " ".join(rng.choice(words) for _ in range(n_src))
            tgt = " ".join(rng.choice(words).upper() for _ in range(n_tgt))
            if kind > 0.97:
                src = "bad\x00" + src
            elif kind > 0.95:
                tgt = " \u2028 "
        sides = {"key": f"k{line}\x0b"}
        if align:
            m = min(len(src.split()), len(tgt.split()))
            sides["align"] = " ".join(f"{i}-{i}" for i in reversed(range(m)))
        pairs.append(RawPair(line, src, tgt, sides))
    return pairs


def streamed(pairs, dev, test, seed, max_len=50, max_ratio=3.0, eval_max_len=60):
    out = {name: [] for name in SPLITS}
    result = stream_filter_and_split(lambda: iter(pairs), lambda split, pair: out[split].append(pair),
                                     dev, test, seed, max_len, max_ratio, eval_max_len)
    return out, result


# ----------------------------------------------------------------------------- filtering


def test_clean_text_refuses_exactly_the_non_space_controls():
    """The regular expression of clean_text is the per-character rule it replaced."""
    unsafe = [c for c in range(0x110000) if unicodedata.category(chr(c)) == "Cc" and not chr(c).isspace()]
    assert [c for c in range(0x110000) if clean_text(f"a{chr(c)}b") is None] == unsafe


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_streaming_filter_gives_exactly_the_list_filter_results(seed):
    pairs = random_corpus(600, seed)
    expected, total = filter_and_split(pairs, 40, 60, seed, 50, 3.0, 60)
    got, result = streamed(pairs, 40, 60, seed)
    assert got == expected
    assert result.dropped == total.dropped and result.examples == total.examples
    assert list(result.examples) == list(total.examples)  # the report's key order too
    assert all(total.dropped[r] for r in ("control", "empty", "too_long", "ratio", "duplicate", "too_long_eval"))
    for name in SPLITS:
        assert result.pairs[name] == len(expected[name])
        assert result.words[name] == [sum(len(p.src.split(" ")) for p in expected[name]),
                                      sum(len(p.tgt.split(" ")) for p in expected[name])]
    assert result.side_names == ["align", "key"] and result.read == len(pairs)


def test_split_indices_are_the_shuffle_of_a_list():
    """The split of every earlier release: random.Random(seed).shuffle of list(range(n))."""
    for n, dev, test, seed in [(100, 10, 20, 3), (30108, 1000, 2000, 1234), (7, 1, 1, 0)]:
        order = list(range(n))
        random.Random(seed).shuffle(order)
        assert split_indices(n, dev, test, seed) == (set(order[:dev]), set(order[dev:dev + test]))
    with pytest.raises(ValueError, match="leaves no training pairs out of 3"):
        split_indices(3, 2, 1, 0)


def test_a_corpus_that_changes_between_the_passes_is_refused():
    pairs = random_corpus(200, 5)
    plan = plan_split(iter(pairs), 10, 10, 1)
    changed = list(pairs)
    changed[150] = RawPair(151, "a different", "pair", changed[150].sides)
    for second in (changed, pairs[:-1], pairs + pairs[:1]):
        with pytest.raises(DataError, match="corpus.txt: changed while the filter read it"):
            apply_split(plan, iter(second), lambda *_: None, 50, 3.0, None, corpus="corpus.txt")
    apply_split(plan, iter(pairs), lambda *_: None, 50, 3.0, None)  # the same pairs: fine


def test_the_filter_holds_no_copy_of_the_corpus(tmp_path, monkeypatch):
    """The filter stage on 12k pairs of 30-80 words a side (14 MB of text): its peak Python
    memory stays far below the corpus (the old filter held several copies of it)."""
    rng = random.Random(0)
    vocab = [f"palabra{i}" for i in range(500)]
    lines = [" ".join(rng.choices(vocab, k=rng.randint(30, 80))) for _ in range(12_000)]
    (tmp_path / "c.src").write_text("".join(f"{line}\n" for line in lines))
    (tmp_path / "c.tgt").write_text("".join(f"{line.upper()}\n" for line in reversed(lines)))
    text_bytes = sum((tmp_path / f"c.{s}").stat().st_size for s in ("src", "tgt"))
    from conftest import compose_params

    compose_params(tmp_path, "profile=smoke")
    monkeypatch.chdir(tmp_path)
    cfg = C.load_params(tmp_path / "params.yaml", ["data.src=c.src", "data.tgt=c.tgt", "filter.max_len=80",
                                                   "filter.dev_size=100", "filter.test_size=100"])
    tracemalloc.start()
    try:
        filter_stage.run(cfg)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    report = json.loads((tmp_path / "artifacts/filter/report.json").read_text())
    assert report["read"] == 12_000 and report["splits"]["dev"]["pairs"] == 100
    assert peak < text_bytes / 4, (peak, text_bytes)


# ----------------------------------------------------------------------------- reading


@pytest.mark.parametrize("data", [b"a\nb\n", b"a\nb", b"\xef\xbb\xbf", b"\xef\xbb\xbf\n", b"\n", b"\n\n",
                                  b"\xef\xbb\xbfx\r\ny\r", b"a\rb\x0bc\xe2\x80\xa8d\n\r\n\n", b"x\r\r\n"])
@pytest.mark.parametrize("gz", [False, True])
def test_streamed_lines_are_the_lines_read_whole(tmp_path, data, gz):
    path = tmp_path / ("f.gz" if gz else "f")
    path.write_bytes(gzip.compress(data) if gz else data)
    try:
        whole = read_raw_lines(path)
    except DataError as exc:
        assert str(exc).endswith("file is empty")
        with pytest.raises(DataError, match="file is empty"):
            count_lines(path)
        with pytest.raises(DataError, match="file is empty"):
            list(iter_raw_lines(path))
        return
    assert list(iter_raw_lines(path)) == whole
    assert count_lines(path) == len(whole)


def test_a_corrupt_gzip_stream_is_refused_while_streaming(tmp_path):
    data = gzip.compress(b"".join(b"line %d\n" % i for i in range(50_000)))
    path = tmp_path / "c.gz"
    path.write_bytes(data[:len(data) // 2])  # truncated
    with pytest.raises(DataError, match=r"c\.gz: cannot read"):
        count_lines(path)
    with pytest.raises(DataError, match=r"c\.gz: cannot read"):
        list(iter_raw_lines(path))


LARGE = 200_000


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """Two aligned files of 200k short lines."""
    folder = tmp_path_factory.mktemp("large")
    src = b"".join(b"frase numero %d aqui\n" % i for i in range(1, LARGE + 1))
    tgt = b"".join(b"SENTENCE NUMBER %d HERE\n" % i for i in range(1, LARGE + 1))
    (folder / "c.src").write_bytes(src)
    (folder / "c.tgt").write_bytes(tgt)
    return folder


def _with_line(path, out, line_no: int, raw: bytes | None):
    """``path`` copied to ``out`` with line ``line_no`` replaced by ``raw`` (None: removed)."""
    lines = path.read_bytes().split(b"\n")
    lines[line_no - 1:line_no] = [] if raw is None else [raw]
    out.write_bytes(b"\n".join(lines))
    return out


def test_a_mismatched_line_count_in_a_large_file_is_refused_before_any_pair(large, tmp_path):
    tgt = _with_line(large / "c.tgt", tmp_path / "short.tgt", LARGE - 3, None)
    pairs = iter_text_files(large / "c.src", tgt)
    with pytest.raises(DataError, match=rf"short\.tgt: has {LARGE - 1} lines but .*c\.src has {LARGE}"):
        next(pairs)


@pytest.fixture
def large_dir(large, smoke_dir):
    for name in ("c.src", "c.tgt"):
        (smoke_dir / name).write_bytes((large / name).read_bytes())
    return smoke_dir


def _filter(folder, monkeypatch, capsys, *overrides):
    monkeypatch.chdir(folder)
    code = 0
    try:
        C.run_stage(filter_stage.run, ["data.src=c.src", "data.tgt=c.tgt", *overrides])
    except SystemExit as exc:
        code = exc.code
    return code, [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]


def test_invalid_utf8_near_the_end_of_a_large_file_is_refused_by_file_and_line(large_dir, monkeypatch, capsys):
    _with_line(large_dir / "c.tgt", large_dir / "c.tgt", LARGE - 5, b"SENTENCE \xc3\x28 BROKEN")
    code, errors = _filter(large_dir, monkeypatch, capsys)
    assert code == 2
    assert len(errors) == 1 and re.fullmatch(rf"error: c\.tgt:{LARGE - 5}: invalid UTF-8 at byte 9 .*", errors[0]), errors
    assert not (large_dir / "artifacts").exists(), "nothing may be written for a refused corpus"


def test_skipped_and_empty_lines_near_the_end_keep_every_pair_aligned(large_dir, monkeypatch, capsys):
    _with_line(large_dir / "c.src", large_dir / "c.src", LARGE - 7, b"frase \xff rota")
    _with_line(large_dir / "c.tgt", large_dir / "c.tgt", LARGE - 2, b"   ")
    code, errors = _filter(large_dir, monkeypatch, capsys, "filter.on_invalid=skip")
    assert (code, errors) == (0, [])
    out = large_dir / "artifacts/filter"
    report = json.loads((out / "report.json").read_text())
    assert report["read"] == LARGE and report["invalid"] == 1
    assert len(report["invalid_lines"]) == 1
    assert re.fullmatch(rf"c\.src:{LARGE - 7}: invalid UTF-8 at byte 6 .*", report["invalid_lines"][0])
    assert report["dropped"]["empty"] == 1 and report["dropped_lines"]["empty"] == [LARGE - 2]
    assert report["kept"] == LARGE - 2
    kept = 0
    for split in SPLITS:
        src = (out / f"{split}.src").read_text().splitlines()
        tgt = (out / f"{split}.tgt").read_text().splitlines()
        assert len(src) == len(tgt)
        for s, t in zip(src, tgt):
            assert s.split()[2] == t.split()[2] and s.split()[2] not in (str(LARGE - 7), str(LARGE - 2))
        kept += len(src)
    assert kept == LARGE - 2


def test_invalid_lines_keep_only_their_first_messages():
    invalid = InvalidLines(keep=2)
    for i in range(5):
        invalid.append(f"m{i}")
    assert len(invalid) == 5 and invalid.first == ["m0", "m1"]


def test_text_file_reader_still_returns_every_pair(tmp_path):
    (tmp_path / "s").write_bytes(b"uno\n\xff\ntres\n")
    (tmp_path / "t").write_bytes(b"one\ntwo\nthree\n")
    result = read_text_files(tmp_path / "s", tmp_path / "t", on_invalid="skip")
    assert [(p.line, p.src) for p in result.pairs] == [(1, "uno"), (3, "tres")] and len(result.invalid) == 1


# ----------------------------------------------------------------------------- tokenize


@pytest.fixture
def filtered_smoke(smoke_dir, monkeypatch):
    monkeypatch.chdir(smoke_dir)
    C.run_stage(filter_stage.run, [])
    return smoke_dir


def test_encoding_in_chunks_writes_the_bytes_of_encoded_split_save(filtered_smoke, monkeypatch):
    C.run_stage(tokenize_stage.run, ["tokenize.out_dir=whole"])
    vocab = Vocab(filtered_smoke / "whole/src.model")
    path = filtered_smoke / "lines.txt"
    lines = (filtered_smoke / "artifacts/filter/train.src").read_text().splitlines()
    path.write_text("".join(f"{line}\n" for line in [*lines[:50], "", *lines[50:103]]))
    monkeypatch.setattr(tokenize_stage, "ENCODE_CHUNK", 7)
    monkeypatch.setattr(tokenize_stage, "COPY_BLOCK", 64)
    offsets, unk = tokenize_stage.encode_side(vocab, path, filtered_smoke / "ids")
    tokenize_stage.save_encoded(filtered_smoke / "chunked.npz", {"src": (filtered_smoke / "ids", offsets),
                                                                 "tgt": (filtered_smoke / "ids", offsets)})
    ids = vocab.encode(path.read_text().split("\n")[:-1])
    EncodedSplit.from_lists(ids, ids).save(filtered_smoke / "whole.npz")
    assert (filtered_smoke / "chunked.npz").read_bytes() == (filtered_smoke / "whole.npz").read_bytes()
    assert unk == sum(s.count(1) for s in ids) and len(offsets) == 105


def test_tokenize_encodes_in_bounded_chunks_with_the_same_outputs(filtered_smoke, monkeypatch):
    C.run_stage(tokenize_stage.run, ["tokenize.out_dir=tok_a", "tokenize.metrics_file=a.json"])
    sizes = []
    encode = Vocab.encode
    monkeypatch.setattr(Vocab, "encode", lambda self, lines: sizes.append(len(lines)) or encode(self, lines))
    monkeypatch.setattr(tokenize_stage, "ENCODE_CHUNK", 25)
    C.run_stage(tokenize_stage.run, ["tokenize.out_dir=tok_b", "tokenize.metrics_file=b.json"])
    assert sizes and max(sizes) <= 25
    a, b = filtered_smoke / "tok_a", filtered_smoke / "tok_b"
    assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
    for path in a.iterdir():
        assert path.read_bytes() == (b / path.name).read_bytes(), path.name
    assert not [p for p in b.iterdir() if p.name.startswith(".")]


def test_sentencepiece_trains_on_a_seeded_sample_beyond_the_limit(filtered_smoke, monkeypatch):
    train = filtered_smoke / "artifacts/filter"
    n = count_lines(train / "train.src")
    files, total = tokenize_stage.sample_training_pairs(train / "train.src", train / "train.tgt",
                                                       filtered_smoke / "s0", n, seed=1)
    assert files == [train / "train.src", train / "train.tgt"] and total == n  # all of them: no sample

    def sample(folder, seed):
        files, _ = tokenize_stage.sample_training_pairs(train / "train.src", train / "train.tgt",
                                                        filtered_smoke / folder, 100, seed)
        assert [f.name for f in files] == ["train.src", "train.tgt"]
        return [f.read_text().splitlines() for f in files]

    src, tgt = sample("s1", 1)
    assert len(src) == len(tgt) == 100 and sample("s2", 1) == [src, tgt] and sample("s3", 2) != [src, tgt]
    corpus = list(zip(*(f.read_text().splitlines() for f in (train / "train.src", train / "train.tgt"))))
    positions = [corpus.index(pair) for pair in zip(src, tgt)]  # true pairs, in corpus order
    assert positions == sorted(positions)

    monkeypatch.setattr(tokenize_stage, "SP_MAX_PAIRS", 100)
    for out in ("tok_s1", "tok_s2"):
        C.run_stage(tokenize_stage.run, [f"tokenize.out_dir={out}", "tokenize.metrics_file=m.json"])
    first = (filtered_smoke / "tok_s1/src.model").read_bytes()
    assert first == (filtered_smoke / "tok_s2/src.model").read_bytes()  # deterministic from the seed
    assert not (filtered_smoke / "tok_s1/.spm_sample").exists()
    stats = json.loads((filtered_smoke / "tok_s1/stats.json").read_text())
    assert stats["sentencepiece_sample"] == {"pairs": 100, "of": n, "seed": 1234}
    monkeypatch.setattr(tokenize_stage, "SP_MAX_PAIRS", n)
    C.run_stage(tokenize_stage.run, ["tokenize.out_dir=tok_all", "tokenize.metrics_file=m.json"])
    assert (filtered_smoke / "tok_all/src.model").read_bytes() != first  # the sample was used
    assert "sentencepiece_sample" not in json.loads((filtered_smoke / "tok_all/stats.json").read_text())
    assert isinstance(np.load(filtered_smoke / "tok_s1/train.npz")["src_ids"], np.ndarray)


def test_the_split_positions_are_sets_of_positions_among_the_kept():
    plan = plan_split(iter(random_corpus(300, 9)), 20, 30, 4)
    assert len(plan.dev) == 20 and len(plan.test) == 30 and not plan.dev & plan.test
    assert max(plan.dev | plan.test) < plan.n_kept == sum(plan.kept) and plan.read == 300
    assert filtering.pair_digest("a", "b c") != filtering.pair_digest("a b", "c")
