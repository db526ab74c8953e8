"""Show what the model is asked to do: a few noised samples next to their originals.

    python -m bart.data.show_noise --data_dir data/pretrain_lddl_128 --tokenizer data/tokenizer -n 3 \
        [--max_source_length 128] [--seed 0] [noise flags: --mlm_probability 0.3 ...]
"""
import argparse
import sys

from bart.data.noise import add_noise_args, noise_config_from_args
from bart.data.pretraining_dataset import build_pretraining_loader
from bart.tokenization.tokenization_bart import BartTokenizer


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", required=True, help="a folder of LDDL shards (pretrain_lddl_128)")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("-n", type=int, default=3, help="samples to show")
    parser.add_argument("--max_source_length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    add_noise_args(parser)
    args = parser.parse_args(argv)
    tokenizer = BartTokenizer.from_pretrained(args.tokenizer)
    try:
        loader = build_pretraining_loader(args.data_dir, tokenizer, args.n, args.max_source_length,
                                          noise_config_from_args(args), seed=args.seed, num_workers=0)
    except (FileNotFoundError, ValueError) as err:
        sys.exit(f"show_noise: {err}")
    batch = next(iter(loader))
    for i in range(batch["input_ids"].shape[0]):
        source = batch["input_ids"][i][batch["attention_mask"][i].bool()]
        target = batch["labels"][i][batch["labels"][i] != -100]
        print(f"--- sample {i + 1}")
        print("original:", tokenizer.decode(target, skip_special_tokens=False))
        print("noised:  ", tokenizer.decode(source, skip_special_tokens=False))


if __name__ == "__main__":
    main()
