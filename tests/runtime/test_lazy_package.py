"""Start-up cost: packages whose __init__ imports far more than the recipe uses are not initialised
(bart.runtime.lazy_package), and BART's standard tokenizer folders run without transformers."""
import importlib
import os
import subprocess
import sys

import pytest

from bart.runtime.lazy_package import defer_package_init
from tests.helpers import ROOT


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A package on disk whose __init__ records that it ran and defines attributes of its own."""
    name = f"heavy_{os.getpid()}_{abs(hash(str(tmp_path))) % 10**8}"
    folder = tmp_path / name
    (folder / "sub").mkdir(parents=True)
    (folder / "__init__.py").write_text("import sys\nsys.INIT_RAN = getattr(sys, 'INIT_RAN', 0) + 1\n"
                                        "__version__ = '1.2'\nfrom .light import VALUE as EXPORTED\n")
    (folder / "light.py").write_text("VALUE = 42\n")
    (folder / "other.py").write_text("from . import light\nOTHER = light.VALUE + 1\n")
    (folder / "sub" / "__init__.py").write_text("import sys\nsys.SUB_INIT_RAN = True\n")
    (folder / "sub" / "leaf.py").write_text("LEAF = 'leaf'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "INIT_RAN", 0, raising=False)
    monkeypatch.setattr(sys, "SUB_INIT_RAN", False, raising=False)
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def test_submodules_load_without_the_package_init_until_the_package_itself_is_used(fake_package):
    defer_package_init(fake_package, f"{fake_package}.sub")
    light = importlib.import_module(f"{fake_package}.light")
    other = importlib.import_module(f"{fake_package}.other")  # `from . import light` inside: no init
    leaf = importlib.import_module(f"{fake_package}.sub.leaf")
    assert (light.VALUE, other.OTHER, leaf.LEAF) == (42, 43, "leaf")
    assert sys.INIT_RAN == 0 and sys.SUB_INIT_RAN is False
    package = sys.modules[fake_package]
    assert package.__version__ == "1.2" and package.EXPORTED == 42  # the package's own attributes: init runs now
    assert sys.INIT_RAN == 1
    assert package.light is light and package.EXPORTED == 42 and sys.INIT_RAN == 1  # and only once
    with pytest.raises(AttributeError):
        package.missing  # noqa: B018 (the attribute access is what is tested)


def test_an_imported_package_is_left_alone(fake_package):
    package = importlib.import_module(fake_package)
    defer_package_init(fake_package)
    assert sys.modules[fake_package] is package and sys.INIT_RAN == 1


def test_a_training_process_imports_neither_transformers_nor_scipy(small_tokenizer_dir, tmp_path):
    """transformers costs a process ~3 s of start-up and nltk's scipy ~1.4 s; the recipe's tokenizer
    calls, LDDL's dataset classes and ROUGE need neither. The packages, once asked for, are whole."""
    code = f"""
import sys
from bart.data.pretraining_dataset import build_pretraining_loader
from bart.data.summarization import Seq2SeqDataset
from bart.evaluation import generate_texts
from bart.tokenization.tokenization_bart import BartTokenizer
from bart.scoring.metrics import calculate_rouge
tok = BartTokenizer.from_pretrained({small_tokenizer_dir!r})
tok.word_start_mask(); tok.sentence_end_mask()
ids = tok.encode_for_model(["a river city", "b"], 8)["input_ids"]
text = tok.batch_decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
tok.save_pretrained({str(tmp_path / 'saved')!r})
scores = calculate_rouge(["The cat sat. It was happy"], ["The cat sat on the mat. It was happy."])
assert "transformers" not in sys.modules and "scipy" not in sys.modules, "a heavy package was imported"
import lddl.torch, nltk
assert callable(lddl.torch.get_bert_pretrain_data_loader) and callable(nltk.sent_tokenize)
from rouge_score import rouge_scorer
assert calculate_rouge(["The cat sat. It was happy"], ["The cat sat on the mat. It was happy."]) == scores
print(text, {{k: float(v) for k, v in scores.items()}})
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=None,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("['a river city', 'b'] {'rouge1': 80.0, 'rouge2': 61.5385, 'rougeL': 80.0")
