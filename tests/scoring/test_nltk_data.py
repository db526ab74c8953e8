import os
import subprocess
import sys

from bart.scoring.nltk_data import ensure_punkt, sent_tokenize


def test_punkt_offline_splits_abbreviations(punkt_dir):
    assert os.path.isfile(os.path.join(punkt_dir, "tokenizers", "punkt_tab", "english", "ortho_context.tab"))
    text = "Dr. Smith went to Washington. He arrived in the U.S. on Monday. It rained!"
    assert sent_tokenize(text) == ["Dr. Smith went to Washington.", "He arrived in the U.S. on Monday.", "It rained!"]


def test_idempotent_and_exported_to_subprocesses(punkt_dir):
    mtime = os.path.getmtime(os.path.join(punkt_dir, "tokenizers", "punkt_tab", "english", "abbrev_types.txt"))
    assert ensure_punkt(punkt_dir) == punkt_dir
    assert os.path.getmtime(os.path.join(punkt_dir, "tokenizers", "punkt_tab", "english", "abbrev_types.txt")) == mtime
    assert punkt_dir in os.environ["NLTK_DATA"].split(os.pathsep)
    # a plain nltk in a child process (as LDDL's workers use it) finds the data through NLTK_DATA
    out = subprocess.run([sys.executable, "-c", "import nltk; print(len(nltk.sent_tokenize('A b. C d.')))"],
                         capture_output=True, text=True, env=dict(os.environ), check=True)
    assert out.stdout.strip() == "2"
