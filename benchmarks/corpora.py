"""Generated corpora: LDDL-layout Parquet shards of short English-like documents (a ``sentences`` column),
for the benchmarks that time the pretraining loader and runs (and the tests' corpora, tests/helpers/corpus.py)."""
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
