"""The one decoder of (model, split, τ) points: records kept, loaded instead of decoded, written
for a later stage and read back."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flexatt.decoding.translate import DecodeOptions, Translation
from flexatt.errors import ConfigError, DataError
from flexatt.points import (Decoder, decode_record, load_decodes, read_decodes, summary_point, timed_point,
                            translation_of, write_decodes)


class _Data:
    references = ["a b c", "d e"]


def _record(tau: float) -> dict:
    out = Translation(["a b c", "d"], np.array([30.0, 7.5]), np.array([3, 5]), np.array([12, 6]), 0.25, {},
                      {"backend": "eager"})
    return decode_record("test", tau, out, _Data())


def test_a_stored_record_gives_back_its_translation_and_summaries():
    record = _record(1.5)
    out = translation_of(record)
    assert out.hypotheses == ["a b c", "d"] and out.mean_window == pytest.approx((10.0 + 1.5) / 2)
    assert record["window"] == round(out.mean_window, 3) and record["bleu_stats"][0][0] == 3
    assert summary_point(record) == {"tau": 1.5, "window": 5.75, "bleu": record["bleu"]}
    assert timed_point(record)["ms_per_sentence"] == 125.0


def test_a_loaded_record_is_read_not_decoded_and_a_missing_one_needs_a_model():
    decoder = Decoder(None, {"test": _Data()}, options=DecodeOptions(), summary=summary_point)
    decoder.load("m", [_record(math.inf), _record(1.5)])
    assert decoder.point("m", "test", math.inf)["window"] == 5.75  # no model: nothing could decode it
    assert decoder.hypotheses("m", "test", 1.5) == ["a b c", "d"]
    assert [p["tau"] for p in decoder.points("m", "test")] == [1.5, math.inf]
    with pytest.raises(ConfigError, match="no model 'm' to decode"):
        decoder.point("m", "test", 0.5)


def test_written_decodes_read_back_and_other_beam_settings_are_refused(tmp_path, capsys):
    decoder = Decoder(None, {"test": _Data()}, options=DecodeOptions(beam_size=5, alpha=0.6))
    decoder.load("m", [_record(math.inf)])
    path = write_decodes(tmp_path / "d" / "decodes.json.xz", decoder, ["m", "absent"], ["test"])
    again = path.read_bytes()
    write_decodes(path, decoder, ["m", "absent"], ["test"])
    assert path.read_bytes() == again  # the same records, the same bytes
    assert read_decodes(path, decoder.options) == {"m": [_record(math.inf)]}
    with pytest.raises(DataError, match=r"decodes.json.xz: decoded with beam 5, alpha 0.6, not beam 4, alpha 0.6"):
        read_decodes(path, DecodeOptions(beam_size=4, alpha=0.6))
    other = Decoder(None, {"test": _Data()}, options=decoder.options)
    assert load_decodes(other, path, "stage") == 1 and load_decodes(other, tmp_path / "none.xz", "stage") == 0
    assert "stage: no stored decodes at" in capsys.readouterr().out


def test_a_transformers_record_keeps_each_layers_window():
    """Per cross-attention layer: the mean window (per sentence, then over sentences) and the
    per-sentence sums, given back by :func:`translation_of`; an RNN's record has neither key."""
    out = Translation(["a b c", "d"], np.array([30.0, 7.5]), np.array([3, 5]), np.array([12, 6]), 0.25, {},
                      {"backend": "eager"}, np.array([[24.0, 36.0], [5.0, 10.0]]))
    record = decode_record("test", 1.0, out, _Data())
    assert record["layer_windows"] == [(8.0 + 1.0) / 2, (12.0 + 2.0) / 2]
    assert translation_of(record).layer_window_sum.tolist() == [[24.0, 36.0], [5.0, 10.0]]
    assert "layer_windows" not in _record(1.0) and translation_of(_record(1.0)).layer_window_sum is None
