"""Reading raw corpora: only \\n ends a line, and every bad input is refused by file and line."""

from __future__ import annotations

import gzip

import pytest

from flexatt.data.corpus import parse_alignment, read_text_files, read_tsv
from flexatt.errors import DataError
from flexatt.io import read_raw_lines


def write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_only_newline_ends_a_line(tmp_path):
    """A lone CR, U+2028, U+0085, form feed and vertical tab stay inside their line."""
    inner = "a\rb\u2028c\u0085d\x0ce\x0bf".encode()
    path = write(tmp_path / "x.txt", b"\xef\xbb\xbf" + inner + b"\r\nsecond\nthird")
    assert read_raw_lines(path) == [inner, b"second", b"third"]


def test_bom_and_crlf_stripped(tmp_path):
    src = write(tmp_path / "s", "\ufeffhola\r\nmundo\r\n".encode())
    tgt = write(tmp_path / "t", b"hello\nworld\n")
    pairs = read_text_files(src, tgt).pairs
    assert [(p.line, p.src, p.tgt) for p in pairs] == [(1, "hola", "hello"), (2, "mundo", "world")]


def test_mismatched_line_counts_name_both_counts(tmp_path):
    src = write(tmp_path / "a.es", b"1\n2\n3\n")
    tgt = write(tmp_path / "a.en", b"1\n2\n")
    with pytest.raises(DataError, match=r"a\.en: has 2 lines but .*a\.es has 3"):
        read_text_files(src, tgt)


def test_mismatched_side_file_is_refused(tmp_path):
    src = write(tmp_path / "s", b"1\n2\n")
    tgt = write(tmp_path / "t", b"1\n2\n")
    ref2 = write(tmp_path / "r", b"1\n")
    with pytest.raises(DataError, match="r: has 1 lines"):
        read_text_files(src, tgt, {"ref2": ref2})


def test_invalid_utf8_names_file_and_line(tmp_path):
    src = write(tmp_path / "s", b"ok\nfine\nbad \xc3\x28 here\n")
    tgt = write(tmp_path / "t", b"1\n2\n3\n")
    with pytest.raises(DataError) as info:
        read_text_files(src, tgt)
    assert str(info.value).startswith(f"{src}:3: invalid UTF-8")


def test_skip_policy_counts_invalid_lines_and_keeps_alignment(tmp_path):
    src = write(tmp_path / "s", b"one\n\xff\nthree\n")
    tgt = write(tmp_path / "t", b"uno\ndos\ntres\n")
    result = read_text_files(src, tgt, on_invalid="skip")
    assert [(p.line, p.src, p.tgt) for p in result.pairs] == [(1, "one", "uno"), (3, "three", "tres")]
    assert len(result.invalid) == 1 and ":2:" in result.invalid[0]


@pytest.mark.parametrize("content", [None, b""])
def test_missing_or_empty_input(tmp_path, content):
    src = tmp_path / "s"
    if content is not None:
        src.write_bytes(content)
    tgt = write(tmp_path / "t", b"x\n")
    with pytest.raises(DataError, match="no such file" if content is None else "file is empty"):
        read_text_files(src, tgt)


def test_tsv_with_gzip_and_alignments(tmp_path):
    tsv = tmp_path / "c.tsv.gz"
    with gzip.open(tsv, "wb") as out:
        out.write(b"key\tes\ten\nGen 1:1\thola mundo\thello world\nGen 1:2\tadios\tbye\n")
    align = write(tmp_path / "c.align", b"0-0 1-1\n0-0\n")
    result = read_tsv(tsv, {"src": "es", "tgt": "en", "key": "key"}, align)
    assert [(p.line, p.src, p.tgt, p.sides) for p in result.pairs] == [
        (2, "hola mundo", "hello world", {"key": "Gen 1:1", "align": "0-0 1-1"}),
        (3, "adios", "bye", {"key": "Gen 1:2", "align": "0-0"}),
    ]


def test_tsv_unknown_column_lists_the_header(tmp_path):
    tsv = write(tmp_path / "c.tsv", b"es\ten\nhola\thello\n")
    with pytest.raises(DataError, match=r"column 'de' \(data.columns.tgt\) is not in the header; columns are: es, en"):
        read_tsv(tsv, {"src": "es", "tgt": "de"})


def test_tsv_wrong_field_count_names_the_line(tmp_path):
    tsv = write(tmp_path / "c.tsv", b"es\ten\nhola\thello\nsolo\n")
    with pytest.raises(DataError, match=r"c\.tsv:3: has 1 tab-separated fields, the header has 2"):
        read_tsv(tsv, {"src": "es", "tgt": "en"})
    result = read_tsv(tsv, {"src": "es", "tgt": "en"}, on_invalid="skip")
    assert len(result.pairs) == 1 and len(result.invalid) == 1


def test_tsv_alignment_line_count_must_match(tmp_path):
    tsv = write(tmp_path / "c.tsv", b"es\ten\na\tb\nc\td\n")
    align = write(tmp_path / "c.align", b"0-0\n")
    with pytest.raises(DataError, match="has 1 lines but .* has 2 data rows"):
        read_tsv(tsv, {"src": "es", "tgt": "en"}, align)


def test_tsv_header_only(tmp_path):
    tsv = write(tmp_path / "c.tsv", b"es\ten\n")
    with pytest.raises(DataError, match="no data rows"):
        read_tsv(tsv, {"src": "es", "tgt": "en"})


def test_corrupt_gzip_is_a_clear_error(tmp_path):
    path = write(tmp_path / "c.tsv.gz", b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(DataError, match=r"c\.tsv\.gz: cannot read"):
        read_raw_lines(path)


def test_parse_alignment():
    assert parse_alignment("0-1 2-0", "f:1") == [(0, 1), (2, 0)]
    assert parse_alignment("", "f:1") == []
    with pytest.raises(DataError, match="f:4: bad alignment link '1:2'"):
        parse_alignment("0-0 1:2", "f:4")
