"""What the project writes (tokenizer folders, weight files, checkpoints, Punkt data) gets the permissions the
umask gives, not those of a private temporary file."""
import os

import pytest
import torch

from tests.helpers.user_inputs import model as _model


@pytest.fixture
def umask():
    def set_mask(mask):
        os.umask(mask)
    old = os.umask(0o022)
    yield set_mask
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o077], ids=["umask022", "umask077"])
def test_what_the_project_writes_gets_the_umasks_permissions(mask, umask, tmp_path):
    """Tokenizer folders, model.safetensors, checkpoints and Punkt data get the umask's modes (not 0700 / 0600)."""
    from bart.files.checkpoint_io import atomic_save
    from bart.modeling.weights import save_pretrained
    from bart.scoring.nltk_data import ensure_punkt
    from bart.tokenization.train_tokenizer import train_tokenizer
    from tests.helpers.corpus import write_tokenizer_corpus
    umask(mask)
    folder_mode, file_mode = 0o777 & ~mask, 0o666 & ~mask
    corpus = write_tokenizer_corpus(str(tmp_path / "corpus"), lines=200)
    tokenizer = train_tokenizer([corpus], str(tmp_path / "tok"), 400)["folder"]
    save_pretrained(_model(), str(tmp_path / "hf"))
    atomic_save(str(tmp_path / "w.ckpt"), {"x": torch.zeros(2)})
    punkt = os.path.join(ensure_punkt(str(tmp_path / "nltk")), "tokenizers", "punkt_tab", "english")
    mode = lambda p: os.stat(p).st_mode & 0o777  # noqa: E731
    assert {p: oct(mode(p)) for p in (tokenizer, punkt)} == {p: oct(folder_mode) for p in (tokenizer, punkt)}
    files = [os.path.join(tokenizer, "vocab.json"), str(tmp_path / "hf" / "model.safetensors"), str(tmp_path / "w.ckpt")]
    assert {p: oct(mode(p)) for p in files} == {p: oct(file_mode) for p in files}
