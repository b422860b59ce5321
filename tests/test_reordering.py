"""flexatt.data.reordering: crossing links and distortion, by hand."""

from __future__ import annotations

from flexatt.data.reordering import Reordering, parse_pharaoh


def test_measures_by_hand():
    measures = Reordering()
    measures.add([(0, 0), (1, 1), (2, 2)], 3, 3)  # monotone
    measures.add(parse_pharaoh("0-1 1-0 1-2"), 2, 3)  # (0,1)-(1,0) cross; (1,0)-(1,2) share a word
    summary = measures.summary()
    assert summary["crossing_link_pairs"] == round(1 / (3 + 2), 4)
    assert summary["sentences_with_crossing"] == 0.5
    distortion = 0 + 0 + 0 + abs(0 - 1 / 3) + abs(1 / 2 - 0) + abs(1 / 2 - 2 / 3)
    assert summary["mean_distortion"] == round(distortion / 6, 4)
    assert (summary["sentences"], summary["links"]) == (2, 6)


def test_a_monotone_corpus_and_an_empty_one_score_zero():
    measures = Reordering()
    measures.add([(0, 0), (0, 1), (1, 2)], 2, 4)
    assert measures.summary()["crossing_link_pairs"] == 0.0
    assert measures.summary()["sentences_with_crossing"] == 0.0
    assert Reordering().summary() == {"crossing_link_pairs": 0.0, "sentences_with_crossing": 0.0,
                                      "mean_distortion": 0.0, "sentences": 0, "links": 0}


def test_a_fully_reversed_sentence_crosses_everywhere():
    measures = Reordering()
    measures.add([(i, 3 - i) for i in range(4)], 4, 4)
    assert measures.summary()["crossing_link_pairs"] == 1.0
