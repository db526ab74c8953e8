"""Small corpora and shards for data tests."""
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

WORDS = ("the quick brown fox jumps over lazy dog while researchers train large language models on many "
         "thousands of documents about science history music and sports in several countries").split()


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
