"""A small learnable summarization set: the summary is the source's first sentence."""
import os
import random

WORDS = ("river mountain city council budget school teacher storm harbor museum train bridge market "
         "festival doctor hospital farmer harvest engineer station library mayor election park").split()


def write_summarization_data(folder: str, sizes=(("train", 240), ("val", 16), ("test", 16)), seed: int = 0) -> str:
    rng = random.Random(seed)
    os.makedirs(folder, exist_ok=True)
    for split, count in sizes:
        with open(os.path.join(folder, f"{split}.source"), "w") as src, open(os.path.join(folder, f"{split}.target"), "w") as tgt:
            for _ in range(count):
                sentences = [" ".join(rng.choices(WORDS, k=rng.randint(4, 7))).capitalize() + "." for _ in range(3)]
                src.write(" ".join(sentences) + "\n")
                tgt.write(sentences[0] + "\n")
    return folder
