"""Session fixtures shared by the test modules: offline tokenizer folders (GPT-2's 50k vocabulary and a
small trained one) and Punkt data."""
import collections
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
    from bart.utils.nltk_data import ensure_punkt

    return ensure_punkt(str(tmp_path_factory.mktemp("nltk_data")))


@pytest.fixture(scope="session")
def container_image(tmp_path_factory):
    """The NGC image's configuration built on this machine for the checkout itself (tests/helpers/container.py):
    ``container_image.env(extra)`` is the environment of a command typed inside the container."""
    from tests.helpers.container import build_image

    return build_image(str(tmp_path_factory.mktemp("image")))


# The order files start in, heaviest first: run_tests.sh gives each of its workers whole files (--dist loadfile), so
# starting the long files first keeps one worker from running the last long file alone while the other has finished
# (longest-first scheduling). A rule on what is collected, not a list of names: the whole journeys (e2e/) and the
# scripts' tests (scripts/) first, then the other folders, the one holding the most `slow` tests first (then the
# larger); in a folder, the file holding the most `slow` tests first, then the larger file. A new file or folder
# needs no entry here.
FIRST_FOLDERS = ("e2e", "scripts")
TESTS = os.path.dirname(os.path.abspath(__file__))


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist >= 3.6 would reorder files by test count
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
    def folder(item) -> str:
        return os.path.relpath(os.path.dirname(str(item.path)), TESTS)

    slow, size = collections.Counter(), collections.Counter()  # slow tests and bytes of test files, per file and folder
    for path in {str(item.path) for item in items}:
        size[path] = os.path.getsize(path)
        size[os.path.relpath(os.path.dirname(path), TESTS)] += size[path]
    for item in items:
        if item.get_closest_marker("slow"):
            slow[str(item.path)] += 1
            slow[folder(item)] += 1

    def order(item):
        path, where = str(item.path), folder(item)
        first = FIRST_FOLDERS.index(where) if where in FIRST_FOLDERS else len(FIRST_FOLDERS)
        return first, -slow[where], -size[where], where, -slow[path], -size[path], path

    items.sort(key=order)  # stable: a file's tests keep their order


@pytest.fixture(autouse=True)
def _signal_handlers_restored():
    """A test that runs an entry script in this process may leave the stop signals ignored (a process on its
    way out ignores them: ``bart.cli.exits.run_main``); children started later would inherit SIG_IGN (a SIGTERM
    sent to them would then do nothing). Each test gets the handlers back as they were."""
    import signal

    names = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGHUP")
    saved = {sig: signal.getsignal(sig) for sig in (getattr(signal, n, None) for n in names) if sig is not None}
    yield
    for sig, handler in saved.items():
        if handler is not None and signal.getsignal(sig) != handler:
            signal.signal(sig, handler)
