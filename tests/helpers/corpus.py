"""Small corpora and shards for data tests."""
import bz2
import os
import random

from benchmarks.corpora import WORDS, write_shards  # noqa: F401  (one generator of LDDL shards)


def write_corpus(folder: str, documents: int = 120, seed: int = 0, files: int = 2) -> str:
    """``files`` text files, one document (several sentences) per line."""
    rng = random.Random(seed)
    os.makedirs(folder, exist_ok=True)
    for f in range(files):
        with open(os.path.join(folder, f"part{f}.txt"), "w") as out:
            for _ in range(documents // files):
                sentences = [" ".join(rng.choices(WORDS, k=rng.randint(5, 14))).capitalize() + rng.choice(".!?")
                             for _ in range(rng.randint(3, 15))]
                out.write(" ".join(sentences) + "\n")
    return folder


# Vocabulary of the small trained tokenizer used where the vocabulary is not the point of a test
# (conftest.py's small_tokenizer_dir): the 50,265-way softmax of GPT-2's would dominate every step.
SMALL_VOCAB_SIZE = 1024


def micro_config(**changes) -> dict:
    """configs/config_tiny.json cut to the smallest model the entry-script tests run (d_model 32, one layer
    per stack, 64 positions) with the small tokenizer's vocabulary; ``changes`` override keys."""
    import json

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "configs", "config_tiny.json")) as f:
        values = json.load(f)
    micro = dict(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, encoder_layers=1, decoder_layers=1,
                 max_position_embeddings=64, vocab_size=SMALL_VOCAB_SIZE)
    return dict(values, **dict(micro, **changes))


def random_weights(config_path: str, weights_path: str) -> str:
    """The seed-0 random weights of ``config_path``'s model saved at ``weights_path`` (a run's --init_checkpoint)."""
    import torch

    from bart.configuration import BartConfig
    from bart.modeling import BartForConditionalGeneration

    torch.manual_seed(0)
    torch.save(BartForConditionalGeneration(BartConfig.from_json_file(config_path)).state_dict(), weights_path)
    return weights_path


SYLLABLES = ("ka lo mi ne su ta ri vo ze pa do gu le ni so fa mu te ro bi ya ke lu "
             "ma no si ha be ju we di xo").split()
NON_ASCII = ("Café crème à l'été, naïve façade.", "中文分词很有趣。", "Emoji 🤗 and 🚀 travel as bytes.",
             "Übermäßig große Straße — “quoted”.")


def write_tokenizer_corpus(folder: str, lines: int = 1500, seed: int = 0) -> str:
    """Text for training small test tokenizers: the words of the test corpora (write_corpus,
    write_shards, tests.helpers.summaries) many times over, so each becomes one or two tokens as
    with GPT-2's vocabulary, plus pseudo-words of random syllables, which give enough distinct pairs
    for a vocabulary of a few thousand tokens, and a few non-ASCII lines."""
    from tests.helpers.summaries import WORDS as SUMMARY_WORDS

    rng = random.Random(seed)
    words = list(WORDS) + list(SUMMARY_WORDS)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "tokenizer_corpus.txt")
    with open(path, "w", encoding="utf-8") as out:
        for i in range(lines):
            sentences = []
            for _ in range(rng.randint(2, 4)):  # capitalised sentence starts, as in the test corpora
                known = [rng.choice(words) for _ in range(rng.randint(4, 9))]
                invented = ["".join(rng.choices(SYLLABLES, k=rng.randint(2, 4))) for _ in range(rng.randint(1, 3))]
                words_here = rng.sample(known + invented, len(known) + len(invented))
                sentences.append(" ".join(words_here).capitalize() + rng.choice(".!?"))
            out.write((f"Document {i}. " if i % 2 else "") + " ".join(sentences) + "\n")
        out.write("\n".join(NON_ASCII) + "\n")
    return path


def write_wikipedia_dump(path: str, pages: int = 8) -> None:
    """A MediaWiki XML export (bz2), as dumps.wikimedia.org serves it, with generated articles."""
    rng = random.Random(0)
    words = "river mountain city council budget school teacher storm harbor museum train bridge market".split()
    body = []
    for i in range(pages):
        text = "\n\n".join(" ".join(" ".join(rng.choices(words, k=8)).capitalize() + "." for _ in range(4))
                           for _ in range(3))
        body.append(f"  <page>\n    <title>Page {i}</title>\n    <ns>0</ns>\n    <id>{i + 1}</id>\n    <revision>\n"
                    f"      <id>{100 + i}</id>\n      <text xml:space=\"preserve\">{text}</text>\n    </revision>\n  </page>")
    # one tag per line, as the dumps are written (WikiExtractor reads them line by line)
    xml = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n  <siteinfo>\n'
           "    <sitename>Wikipedia</sitename>\n    <dbname>enwiki</dbname>\n"
           "    <base>https://en.wikipedia.org/wiki/Main_Page</base>\n    <generator>MediaWiki 1.41</generator>\n"
           '    <case>first-letter</case>\n    <namespaces>\n      <namespace key="0" case="first-letter" />\n'
           '      <namespace key="10" case="first-letter">Template</namespace>\n    </namespaces>\n  </siteinfo>\n'
           + "\n".join(body) + "\n</mediawiki>\n")
    with open(path, "wb") as f:
        f.write(bz2.compress(xml.encode()))
