"""The filter and tokenize stages run as a user runs them: `python -m flexatt.stages.<name>`;
the refusals of bad input run in-process through the same :func:`flexatt.config.run_stage`
(conftest's ``run_inprocess``), without the interpreter start-up."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import copy_of, run_inprocess, run_module
from flexatt.data.subwords import EncodedSplit, Vocab
from flexatt.data.synthetic import main as write_synthetic
from flexatt.errors import DataError


@pytest.fixture
def two_file_corpus(smoke_dir):
    """A synthetic corpus written as my.src / my.tgt / my.align, plus a second reference."""
    write_synthetic([str(smoke_dir / "my"), "--n-pairs", "300", "--seed", "9"])
    tgt = (smoke_dir / "my.tgt").read_text().splitlines()
    (smoke_dir / "my.ref2").write_text("".join(f"{t.lower()}\n" for t in tgt))
    return smoke_dir


def test_filter_on_a_users_two_file_corpus(two_file_corpus):
    """The example of the issue: two keys point the stage at your own corpus."""
    out = two_file_corpus / "f"
    result = run_module("flexatt.stages.filter", "data.src=my.src", "data.tgt=my.tgt",
                        f"filter.out_dir={out}", "filter.dev_size=20", "filter.test_size=20",
                        cwd=two_file_corpus)
    assert result.returncode == 0, result.stderr
    assert "filter: read 300 pairs" in result.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["source"]["kind"] == "text" and "reordering" not in report  # no gold alignments
    assert report["splits"]["dev"]["pairs"] == 20 and report["splits"]["test"]["pairs"] == 20
    assert report["kept"] + sum(report["dropped"].values()) == report["read"] == 300
    counts = [len((out / f"{s}.src").read_text().splitlines()) for s in ("train", "dev", "test")]
    assert sum(counts) == report["kept"]


def test_side_files_travel_with_their_pairs(two_file_corpus):
    out = two_file_corpus / "f"
    result = run_module("flexatt.stages.filter", "data.src=my.src", "data.tgt=my.tgt",
                        "data.ref2=my.ref2", "data.align=my.align", f"filter.out_dir={out}",
                        "filter.dev_size=30", "filter.test_size=30", cwd=two_file_corpus)
    assert result.returncode == 0, result.stderr
    # the synthetic task reverses chunks of words: its gold links cross
    report = json.loads((out / "report.json").read_text())
    reordering = report["reordering"]
    assert reordering["sentences"] == 300 - sum(report["dropped"].values())
    assert 0 < reordering["crossing_link_pairs"] < 1 and reordering["mean_distortion"] > 0
    for split in ("train", "dev", "test"):
        src, tgt, ref2, align = ((out / f"{split}.{ext}").read_text().splitlines()
                                 for ext in ("src", "tgt", "ref2", "align"))
        assert len(src) == len(tgt) == len(ref2) == len(align)
        for s, t, r, a in zip(src, tgt, ref2, align):
            assert r == t.lower()
            s_words, t_words = s.split(" "), t.split(" ")
            assert all(s_words[int(i)].upper() == t_words[int(j)]
                       for i, j in (link.split("-") for link in a.split()))


@pytest.mark.parametrize(
    "src_bytes, tgt_bytes, message",
    [
        (b"a\nb\nc\n", b"x\ny\n", "my.tgt: has 2 lines but my.src has 3"),
        (b"a\nb\xfe\n", b"x\ny\n", "my.src:2: invalid UTF-8"),
        (b"", b"x\n", "my.src: file is empty"),
    ],
)
def test_filter_refuses_bad_input_by_file_and_line(smoke_dir, capsys, src_bytes, tgt_bytes, message):
    (smoke_dir / "my.src").write_bytes(src_bytes)
    (smoke_dir / "my.tgt").write_bytes(tgt_bytes)
    code, err = run_inprocess("filter", ["data.src=my.src", "data.tgt=my.tgt"], capsys, cwd=smoke_dir)
    assert code == 2
    assert f"error: {message}" in err
    assert not (smoke_dir / "artifacts").exists(), "nothing may be written for a refused corpus"


def test_filter_missing_input_names_the_key(smoke_dir):
    """As a user sees it: the stage's own process, exit status 2, the key in the message."""
    result = run_module("flexatt.stages.filter", "data.src=nope.src", "data.tgt=nope.tgt", cwd=smoke_dir)
    assert result.returncode == 2 and "data.src: file not found: nope.src" in result.stderr


def test_filter_failure_keeps_previous_output(smoke_tokenized, smoke_dir):
    copy_of(smoke_tokenized / "artifacts/filter", smoke_dir / "artifacts/filter")  # the filter stage's output
    before = (smoke_dir / "artifacts/filter/train.src").read_bytes()
    result = run_module("flexatt.stages.filter", "filter.dev_size=2000", cwd=smoke_dir)
    assert result.returncode == 2 and "leaves no training pairs" in result.stderr
    assert (smoke_dir / "artifacts/filter/train.src").read_bytes() == before


def test_filter_multirun_sweeps_a_key(smoke_dir):
    result = run_module("flexatt.stages.filter", "-m", "filter.dev_size=10,20",
                        "filter.out_dir=sweep/dev${filter.dev_size}", cwd=smoke_dir)
    assert result.returncode == 0, result.stderr
    for n in (10, 20):
        assert len((smoke_dir / f"sweep/dev{n}/dev.src").read_text().splitlines()) == n


@pytest.mark.parametrize("model_type, joint", [
    ("unigram", True),  # the profiles' subword model; the others are slow tests (a stage start-up each)
    pytest.param("char", False, marks=pytest.mark.slow),
    pytest.param("bpe", False, marks=pytest.mark.slow)])
def test_tokenize_round_trip(smoke_tokenized, smoke_dir, model_type, joint):
    copy_of(smoke_tokenized / "artifacts/filter", smoke_dir / "artifacts/filter")  # the filter stage's output
    result = run_module("flexatt.stages.tokenize", f"tokenize.model_type={model_type}",
                        f"tokenize.joint={str(joint).lower()}", "tokenize.vocab_size=60", cwd=smoke_dir)
    assert result.returncode == 0, result.stderr
    tok = smoke_dir / "artifacts/tok"
    stats = json.loads((tok / "stats.json").read_text())
    assert stats["model_type"] == model_type and stats["dev_tgt_roundtrip"] == 1.0
    src_vocab, tgt_vocab = Vocab(tok / "src.model"), Vocab(tok / "tgt.model")
    for split in ("train", "dev", "test"):
        encoded = EncodedSplit.load(tok / f"{split}.npz")
        src = (smoke_dir / f"artifacts/filter/{split}.src").read_text().splitlines()
        tgt = (smoke_dir / f"artifacts/filter/{split}.tgt").read_text().splitlines()
        assert len(encoded) == len(src)
        assert src_vocab.decode([encoded.src(i) for i in range(len(src))]) == src
        assert tgt_vocab.decode([encoded.tgt(i) for i in range(len(tgt))]) == tgt
    assert (tok / "dev.ref").read_text() == (smoke_dir / "artifacts/filter/dev.tgt").read_text()
    if model_type == "char":
        assert all(len(p) <= 2 for p in (src_vocab.sp.id_to_piece(i) for i in range(4, len(src_vocab))))


def test_tokenize_without_filter_output_says_what_to_run(smoke_dir, capsys):
    code, err = run_inprocess("tokenize", [], capsys, cwd=smoke_dir)
    assert code == 2 and "run the filter stage first" in err


def test_encoded_split_round_trip_and_corruption(tmp_path):
    split = EncodedSplit.from_lists([[5, 6], [], [7]], [[8], [9, 10, 11], [12]])
    split.save(tmp_path / "x.npz")
    loaded = EncodedSplit.load(tmp_path / "x.npz")
    assert len(loaded) == 3 and loaded.src(1).tolist() == [] and loaded.tgt(1).tolist() == [9, 10, 11]
    assert np.array_equal(loaded.tgt_lengths, [1, 3, 1])
    (tmp_path / "bad.npz").write_bytes((tmp_path / "x.npz").read_bytes()[:50])
    with pytest.raises(DataError, match="bad.npz: not a valid encoded split"):
        EncodedSplit.load(tmp_path / "bad.npz")


def test_encoded_split_is_memory_mapped_with_the_values_np_load_reads(tmp_path):
    rng = np.random.default_rng(0)
    seqs = [rng.integers(4, 9000, rng.integers(0, 30)).tolist() for _ in range(500)]
    EncodedSplit.from_lists(seqs, seqs[::-1]).save(tmp_path / "x.npz")
    mapped, read = EncodedSplit.load(tmp_path / "x.npz"), EncodedSplit.load(tmp_path / "x.npz", mmap=False)
    for key in ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets"):
        a, b = getattr(mapped, key), getattr(read, key)
        assert isinstance(a, np.memmap) and not isinstance(b, np.memmap)
        assert a.dtype == b.dtype and np.array_equal(a, b) and not a.flags.writeable
    assert [mapped.src(i).tolist() for i in range(500)] == seqs


def test_encoded_split_compressed_or_truncated(tmp_path):
    split = EncodedSplit.from_lists([[5, 6], [7]], [[8], [9, 10]])
    np.savez_compressed(tmp_path / "z.npz", src_ids=split.src_ids, src_offsets=split.src_offsets,
                        tgt_ids=split.tgt_ids, tgt_offsets=split.tgt_offsets)
    loaded = EncodedSplit.load(tmp_path / "z.npz")  # compressed members cannot be mapped: read
    assert loaded.tgt(1).tolist() == [9, 10] and not isinstance(loaded.src_ids, np.memmap)
    split.save(tmp_path / "x.npz")
    data = bytearray((tmp_path / "x.npz").read_bytes())
    at = data.index(b"\x93NUMPY")  # the first member's .npy magic
    data[at:at + 6] = b"XXXXXX"
    (tmp_path / "bad.npz").write_bytes(bytes(data))
    with pytest.raises(DataError, match="bad.npz: not a valid encoded split"):
        EncodedSplit.load(tmp_path / "bad.npz")
