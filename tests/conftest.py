"""Session fixtures shared by the test modules: offline tokenizer folders (GPT-2's 50k vocabulary and a
small trained one) and Punkt data."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> str:
    """A BART-style tokenizer folder assembled from GPT-2's BPE files (no hub access)."""
    from bart.tokenization.build_tokenizer import build_tokenizer_folder

    return build_tokenizer_folder(str(tmp_path_factory.mktemp("tokenizer") / "bart_tokenizer"))


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir):
    from bart.tokenization.tokenization_bart import BartTokenizer

    return BartTokenizer.from_pretrained(tokenizer_dir)


@pytest.fixture(scope="session")
def small_tokenizer_dir(tmp_path_factory) -> str:
    """A BART tokenizer folder with SMALL_VOCAB_SIZE tokens, trained (train_tokenizer) on the words
    of the test corpora: for tests whose point is not the vocabulary, so the tiny models' output
    softmax is small."""
    from bart.tokenization.train_tokenizer import train_tokenizer
    from tests.helpers.corpus import SMALL_VOCAB_SIZE, write_tokenizer_corpus

    base = tmp_path_factory.mktemp("small_tokenizer")
    summary = train_tokenizer([write_tokenizer_corpus(str(base / "corpus"))], str(base / "tokenizer"), SMALL_VOCAB_SIZE)
    assert summary["vocab_size"] == SMALL_VOCAB_SIZE, summary
    return summary["folder"]


@pytest.fixture(scope="session")
def punkt_dir(tmp_path_factory) -> str:
    """nltk's punkt_tab data written offline; also exported through NLTK_DATA."""
    from utils.nltk_data import ensure_punkt

    return ensure_punkt(str(tmp_path_factory.mktemp("nltk_data")))
