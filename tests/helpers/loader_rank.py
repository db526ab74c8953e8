"""Run under torchrun: each rank iterates two epochs of the pretraining loader and writes the
sample indices it saw (per epoch, in order) to OUT/rank{r}.json; then, as resumed runs would, fresh
loaders start epoch 1 at positions saved after some batches, and OUT/rank{r}_resume.json says
whether each went on exactly as the straight epoch. One process (no torchrun): ``main(argv)`` in the
caller's process gives the reference (rank0.json of the whole data)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bart.data.noise import NoiseConfig  # noqa: E402
from bart.data.pretraining_dataset import build_pretraining_loader  # noqa: E402
from bart.runtime import distributed as dist_utils  # noqa: E402
from bart.tokenization.tokenization_bart import BartTokenizer  # noqa: E402


def main(argv=None) -> None:
    data_dir, tokenizer_dir, out, workers = (sys.argv[1:] if argv is None else argv)[:4]
    env = dist_utils.init_distributed()
    tokenizer = BartTokenizer.from_pretrained(tokenizer_dir)
    loader = build_pretraining_loader(data_dir, tokenizer, batch_size=4, max_source_length=64,
                                      noise_config=NoiseConfig(), seed=3, num_workers=int(workers))
    seen = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        seen.append([row[: int(mask.sum())].tolist() for batch in loader
                     for row, mask in zip(batch["labels"].clamp(min=0), batch["labels"] != -100)])
    with open(os.path.join(out, f"rank{env.rank}.json"), "w") as f:
        json.dump(seen, f)
    straight, positions = [], []
    for batch in loader:  # epoch 1 again
        straight.append(batch["labels"].tolist())
        positions.append(loader.position())
    resumed = {}
    for k in (0, len(straight) // 2, len(straight) - 2):  # the same number of loaders on every rank
        fresh = build_pretraining_loader(data_dir, tokenizer, batch_size=4, max_source_length=64,
                                         noise_config=NoiseConfig(), seed=3, num_workers=int(workers))
        fresh.set_epoch(1)
        fresh.seek(positions[k])
        resumed[k] = [batch["labels"].tolist() for batch in fresh] == straight[k + 1:]
    with open(os.path.join(out, f"rank{env.rank}_resume.json"), "w") as f:
        json.dump({"equal": resumed, "rows": positions[len(straight) // 2]["rows"]}, f)
    dist_utils.cleanup()


if __name__ == "__main__":
    main()
