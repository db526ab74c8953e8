"""Generated corpora: LDDL-layout Parquet shards of short English-like documents (a ``sentences`` column),
for the benchmarks that time the pretraining loader and runs (and the tests' corpora, tests/helpers/corpus.py),
and a small learnable summarization set (the configuration matrix's jobs, the tests')."""
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

WORDS = ("the quick brown fox jumps over lazy dog while researchers train large language models on many "
         "thousands of documents about science history music and sports in several countries").split()


def write_shards(folder: str, rows_per_shard, seed: int = 0, words=(8, 30)) -> list[str]:
    """Shards with the ``sentences`` column; ``rows_per_shard`` a list of row counts."""
    rng = random.Random(seed)
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i, rows in enumerate(rows_per_shard):
        texts = [f"Document {i}-{r}. " + ". ".join(" ".join(rng.choices(WORDS, k=12)).capitalize()
                                                   for _ in range(rng.randint(*words) // 12 + 1)) + "."
                 for r in range(rows)]
        path = os.path.join(folder, f"shard-{i}.parquet")
        pq.write_table(pa.table({"sentences": texts}), path)
        paths.append(path)
    return paths


SUMMARY_WORDS = ("river mountain city council budget school teacher storm harbor museum train bridge market "
                 "festival doctor hospital farmer harvest engineer station library mayor election park").split()


def write_summarization_data(folder: str, sizes=(("train", 240), ("val", 16), ("test", 16)), seed: int = 0) -> str:
    """``<split>.source`` / ``<split>.target`` files of ``sizes``: three short sentences, the summary the first."""
    rng = random.Random(seed)
    os.makedirs(folder, exist_ok=True)
    for split, count in sizes:
        with open(os.path.join(folder, f"{split}.source"), "w") as src, open(os.path.join(folder, f"{split}.target"), "w") as tgt:
            for _ in range(count):
                sentences = [" ".join(rng.choices(SUMMARY_WORDS, k=rng.randint(4, 7))).capitalize() + "."
                             for _ in range(3)]
                src.write(" ".join(sentences) + "\n")
                tgt.write(sentences[0] + "\n")
    return folder
