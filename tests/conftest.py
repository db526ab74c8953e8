"""Session fixtures shared by the test modules: offline tokenizer folders (GPT-2's 50k vocabulary and a
small trained one), the tests' inputs (one builder, tests/helpers/inputs.py), Punkt data and the container image."""
import atexit
import collections
import inspect
import os
import shutil
import sys
import tempfile
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# Inductor's compiled kernels in a folder of this test process's own (and of the processes its tests start): a
# kernel another test run or worker writes into the shared default folder (/tmp/torchinductor_USER) meanwhile was
# loaded half-built or for other settings ("SystemError: <built-in function kernel> returned a result with an
# exception set"). One per pytest process (each xdist worker: not the controller's, which they inherit); removed
# when the session ends.
_INDUCTOR_PREFIX = os.path.join(tempfile.gettempdir(), "bart-tests-inductor-")
if os.environ.get("TORCHINDUCTOR_CACHE_DIR", _INDUCTOR_PREFIX).startswith(_INDUCTOR_PREFIX):
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix=os.path.basename(_INDUCTOR_PREFIX))
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)

# A hang fails its test within about a minute of silence with every process's stacks, and a process a test leaves
# running fails its teardown, named, and is killed: tests/helpers/hang_watch.py's hooks.
pytest_plugins = ["tests.helpers.hang_watch"]

# at module level, so that --quick's rule (below) sees that plain_loss runs an entry script
from tests.helpers import signal_masks  # noqa: E402
from tests.helpers.user_inputs import one_update_first_loss, write_user_inputs  # noqa: E402


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
def inputs(tmp_path_factory, small_tokenizer_dir):
    """The tests' micro configs, weights, summarization splits and LDDL shards, each written once per session (per
    xdist worker) when first asked for (tests/helpers/inputs.py). Shared read-only: copy before changing a file."""
    from tests.helpers.inputs import Inputs

    return Inputs(tmp_path_factory.mktemp("inputs"), small_tokenizer_dir)


@pytest.fixture(scope="session")
def user_inputs(inputs, tmp_path_factory) -> dict:
    """Inputs a user gives the entry scripts, usable and not, by name (tests/helpers/user_inputs.py): shared
    read-only."""
    return write_user_inputs(inputs, tmp_path_factory.mktemp("user_inputs"))


@pytest.fixture(scope="session")
def plain_loss(user_inputs, tmp_path_factory) -> float:
    """The first loss of one fine-tuning update on ``user_inputs``' plain files (the peer of the tests that change a
    file and expect the same run)."""
    return one_update_first_loss(user_inputs, str(tmp_path_factory.mktemp("plain") / "out"))


@pytest.fixture(scope="session")
def punkt_dir(tmp_path_factory) -> str:
    """nltk's punkt_tab data written offline; also exported through NLTK_DATA."""
    from bart.scoring.nltk_data import ensure_punkt

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
SLOW_TIMEOUT_S = 900  # pytest-timeout's budget of a `slow` test
TESTS = os.path.dirname(os.path.abspath(__file__))


# --quick (scripts/run_tests.sh --quick; tests/README.md): every folder's in-process tests and one whole job. A test
# is in-process when neither it, nor a fixture it uses, nor a function or class of the tests' own code that they
# call (followed through tests/, not into bart/) starts a process (subprocess, multiprocessing, runpy) or runs an
# entry script (run_entry, run_main, an entry point's main); `slow` tests stay out. A rule on the code, not a list:
# a new test is placed by what it does.
# the whole job: pretrain.py, then finetune.py from its checkpoint with a prediction, each in its own process
QUICK_JOB = "tests/records/test_dllogger.py::test_pretrain_then_finetune_with_predict_on_the_package"
_STARTS = frozenset({"subprocess", "Popen", "multiprocessing", "runpy", "run_entry", "run_main"})


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true", default=False,
                     help="the quick tier: tests that start no process and run no entry script (not slow), and one "
                          "whole job (tests/README.md)")


def _names(code: types.CodeType) -> set:
    """The global and attribute names a function's code (its nested functions included) uses."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _tests_code(obj) -> bool:
    return getattr(getattr(obj, "__code__", None), "co_filename", "").startswith(TESTS + os.sep)


def _starts_a_process(func, seen: set) -> bool:
    """Whether ``func`` (a test, a fixture, a function of the tests' code) starts a process or runs an entry script,
    itself or through the tests' code it calls."""
    func = inspect.unwrap(func)
    code = getattr(func, "__code__", None)
    if code is None or code in seen:
        return False
    seen.add(code)
    names = _names(code)
    if names & _STARTS:
        return True
    scope = getattr(func, "__globals__", {})
    for name in names:
        obj = scope.get(name)
        module = getattr(obj, "__module__", None) or ""
        if module == "bart.cli.exits" or (module.startswith("bart.") and getattr(obj, "__name__", None) == "main"):
            return True  # an entry script in this process, under another name
        if inspect.ismodule(obj):
            ours = (getattr(obj, "__file__", None) or "").startswith(TESTS + os.sep)
            called = [getattr(obj, attr, None) for attr in names] if ours else []
        elif inspect.isclass(obj):
            called = list(vars(obj).values())
        else:
            called = [obj]
        if any(_tests_code(c) and _starts_a_process(c, seen) for c in called):
            return True
    return False


def _quick(item) -> bool:
    if item.nodeid == QUICK_JOB:
        return True
    if item.get_closest_marker("slow"):
        return False
    seen = set()
    fixtures = [d.func for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs]
    return not any(_tests_code(f) and _starts_a_process(f, seen) for f in [item.function, *fixtures])


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist >= 3.6 would reorder files by test count
        config.option.loadscopereorder = False


def _stop_signals_as_from_a_terminal() -> None:
    """A suite started in the background by a script (``bash .ci/run &``, a CI runner's job) inherits SIGINT ignored:
    a non-interactive shell starts its asynchronous commands so, and an interpreter keeps it so. The tests signal the
    processes they start and expect what a command typed at a terminal gets (Ctrl-C: KeyboardInterrupt), so this
    process takes the stop signals back; its children (xdist's workers, the tests' processes) start from that."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def pytest_collection_modifyitems(session, config, items):
    if config.getoption("quick"):
        quick = {item.nodeid: _quick(item) for item in items}
        config.hook.pytest_deselected(items=[item for item in items if not quick[item.nodeid]])
        items[:] = [item for item in items if quick[item.nodeid]]

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
    for item in items:  # pytest.ini's --timeout (600 s) is for the others
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))


@pytest.fixture(autouse=True)
def _signal_handlers_restored():
    """A test that runs an entry script in this process may leave the stop signals ignored (a process on its
    way out ignores them: ``bart.cli.exits.run_main``); children started later would inherit SIG_IGN (a SIGTERM
    sent to them would then do nothing). Each test gets the handlers back as they were. A stop signal that the
    test (or a fixture it set up) left ignored or blocked where Python's handlers do not show it (C code) fails the
    test, named: a later test's fresh child would inherit it and never take the signal."""
    import signal

    names = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGHUP")
    saved = {sig: signal.getsignal(sig) for sig in (getattr(signal, n, None) for n in names) if sig is not None}
    yield
    for sig, handler in saved.items():
        if handler is not None and signal.getsignal(sig) != handler:
            signal.signal(sig, handler)
    now = signal_masks.held()
    if now != _STOP_SIGNALS_AT_START:
        for name in set(now) - set(_STOP_SIGNALS_AT_START):  # as they were, so that the tests after this start clean
            sig = signal.Signals[name]
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            if signal.getsignal(sig) not in (None, signal.SIG_IGN):
                signal.signal(sig, signal.getsignal(sig))
        pytest.fail(f"this test (or a fixture it set up) left stop signals {now} in the test process (at its start: "
                    f"{_STOP_SIGNALS_AT_START}), not by Python's signal module: a child started later inherits them",
                    pytrace=False)


_stop_signals_as_from_a_terminal()  # at import, in the main process and in each worker, before the baseline below
_STOP_SIGNALS_AT_START = signal_masks.held()  # this process's, as it started (a pytest worker's)
