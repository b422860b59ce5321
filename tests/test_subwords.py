"""The vocabularies (flexatt.data.subwords.Vocab): the special tokens' ids are the ones the
searches and the batches use, or the vocabulary is refused naming its file."""

from __future__ import annotations

import pytest

from flexatt.data.subwords import BOS_ID, EOS_ID, PAD_ID, Vocab, train_sentencepiece
from flexatt.errors import DataError

TEXT = "\n".join(f"the cat {i} sat on the mat and the dog {i} ran" for i in range(40)) + "\n"


def test_a_vocabulary_made_here_has_the_ids_the_searches_use(tmp_path):
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    train_sentencepiece([tmp_path / "text.txt"], tmp_path / "v.model", "char", 60)
    sp = Vocab(tmp_path / "v.model").sp
    assert (sp.pad_id(), sp.bos_id(), sp.eos_id()) == (PAD_ID, BOS_ID, EOS_ID)


def test_a_vocabulary_with_other_special_ids_is_refused(tmp_path):
    import sentencepiece as spm

    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(tmp_path / "text.txt"), model_prefix=str(tmp_path / "other"),
                                   vocab_size=60, model_type="char", hard_vocab_limit=False,
                                   minloglevel=2)  # sentencepiece's defaults: unk 0, bos 1, eos 2
    with pytest.raises(DataError, match=r"other.model: special token ids \(pad, unk, bos, eos\) are"):
        Vocab(tmp_path / "other.model")
