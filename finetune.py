#!/usr/bin/env python3
"""Fine-tune BART for summarization (or translation) on {train,val,test}.source/.target files."""
import argparse
import glob
import json
import os

import torch

from bart.data.summarization import Seq2SeqDataset, SortishSampler, read_split
from bart.evaluation import generate_texts, score
from bart.tokenization.tokenization_bart import BartTokenizer
from bart.tokenization.vocab_check import require_vocab_size
from bart.training import builder
from bart.training.args import add_shared_args, write_run_config
from bart.training.checkpoint import save_checkpoint
from utils import distributed as dist_utils


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    add_shared_args(parser)
    parser.add_argument("--model_name_or_path", dest="init_checkpoint_alias", default=None,
                        help="starting weights: a .ckpt, a folder holding one, or a Hugging Face folder "
                             "(same as --init_checkpoint)")
    parser.add_argument("--from_scratch", action="store_true", help="start from random weights (no checkpoint)")
    parser.set_defaults(max_target_length=56, lr_scheduler="linear")
    args = parser.parse_args(argv)
    args.init_checkpoint = args.init_checkpoint or args.init_checkpoint_alias
    if not args.init_checkpoint and not args.from_scratch and not args.resume_from_checkpoint:
        parser.error("give the starting weights (--init_checkpoint / --model_name_or_path), or --from_scratch")
    args.val_metric = args.val_metric or ("bleu" if args.task == "translation" else "rouge2")
    return args


def resolve_init(path: str) -> str:
    """A checkpoint file, a Hugging Face folder, or a folder holding checkpoints (newest step)."""
    if os.path.isfile(path) or os.path.isfile(os.path.join(path, "config.json")):
        return path
    if os.path.isdir(path):
        found = sorted(glob.glob(os.path.join(path, "*.ckpt")) + glob.glob(os.path.join(path, "*.pt")),
                       key=os.path.getmtime)
        if found:
            print(f"[finetune] starting from {found[-1]}")
            return found[-1]
        raise FileNotFoundError(f"{path} holds no checkpoint (*.ckpt, *.pt) and no Hugging Face config.json")
    raise FileNotFoundError(f"no checkpoint at {path}")


def freeze(model, args) -> None:
    if args.freeze_embeds:
        for module in (model.model.shared, model.model.encoder.embed_positions, model.model.decoder.embed_positions):
            for p in module.parameters():
                p.requires_grad = False
    if args.freeze_encoder:
        for p in model.model.encoder.parameters():
            p.requires_grad = False


class EpochLoader:
    """DataLoader over a batch sampler whose epoch follows the training loop."""

    def __init__(self, dataset, sampler):
        self.dataset, self.sampler = dataset, sampler

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __iter__(self):
        loader = torch.utils.data.DataLoader(self.dataset, batch_sampler=self.sampler, collate_fn=self.dataset.collate)
        for batch in loader:
            batch.pop("index")
            yield batch


class Validation:
    """Generation + metric on the first n_val validation examples; keeps the best save_top_k."""

    def __init__(self, args, tokenizer, gen_kwargs, precision_dtype):
        self.args, self.tokenizer, self.gen_kwargs, self.dtype = args, tokenizer, gen_kwargs, precision_dtype
        self.sources, self.targets = read_split(args.data_dir, "val", args.n_val)
        self.best: list[tuple[float, str]] = []
        self.history: list[dict] = []

    def metric(self, trainer) -> dict:
        model = trainer.model
        if self.args.val_metric == "loss":
            return {"loss": self._loss(trainer)}
        predictions, _ = generate_texts(model, self.tokenizer, self.sources, self.args.eval_batch_size or 8,
                                        self.args.max_source_length, self.gen_kwargs, self.dtype)
        model.train()
        return score(self.args.task, predictions, self.targets)

    def _loss(self, trainer) -> float:
        dataset = Seq2SeqDataset(self.args.data_dir, "val", self.tokenizer, self.args.max_source_length,
                                 self.args.max_target_length, n_obs=self.args.n_val)
        total, tokens = 0.0, 0
        trainer.model.eval()
        with torch.no_grad():
            for start in range(0, len(dataset), 8):
                batch = dataset.collate([dataset[i] for i in range(start, min(start + 8, len(dataset)))])
                batch.pop("index")
                batch = {k: v.to(trainer.device) for k, v in batch.items()}
                total += float(trainer.model(**batch, reduction="sum").loss)
                tokens += int((batch["labels"] != -100).sum())
        trainer.model.train()
        return total / max(tokens, 1)

    def __call__(self, trainer) -> dict:
        metrics = self.metric(trainer)
        value = metrics[self.args.val_metric]
        self.history.append({"step": trainer.global_step, **metrics})
        if dist_utils.is_main_process() and self.args.save_top_k > 0:
            better = (lambda a, b: a < b) if self.args.val_metric == "loss" else (lambda a, b: a > b)
            if len(self.best) < self.args.save_top_k or better(value, self.best[-1][0]):
                path = os.path.join(self.args.output_dir, f"best_{self.args.val_metric}_step{trainer.global_step}.ckpt")
                save_checkpoint(path, {"model": trainer.model.state_dict(), "config": trainer.model.config.to_dict(),
                                       "step": trainer.global_step, "metrics": metrics})
                self.best.append((value, path))
                self.best.sort(key=lambda item: item[0], reverse=self.args.val_metric != "loss")
                for _, stale in self.best[self.args.save_top_k:]:
                    os.remove(stale)
                self.best = self.best[: self.args.save_top_k]
        return metrics


def main(argv=None) -> dict:
    args = parse_args(argv)
    env = builder.setup_distributed(args)
    builder.seed_everything(args.seed, env.rank)
    init = None if args.from_scratch or args.resume_from_checkpoint else resolve_init(args.init_checkpoint)
    tokenizer = BartTokenizer.from_pretrained(args.tokenizer)
    config = builder.model_config(args)
    require_vocab_size(tokenizer, config, args.tokenizer, args.config_path)
    model = builder.build_model(args, config, init_from=init)
    freeze(model, args)
    torch.manual_seed(args.seed + env.rank)
    train = Seq2SeqDataset(args.data_dir, "train", tokenizer, args.max_source_length, args.max_target_length,
                           n_obs=args.n_train)
    lengths = train.source_lengths
    if args.max_tokens_per_batch:
        lengths = [min(len(ids), args.max_source_length) for ids in tokenizer.encode_batch_fast(train.sources)]
    sampler = SortishSampler(lengths, args.train_batch_size, env.world_size, env.rank, args.seed,
                             shuffle=True, max_tokens=args.max_tokens_per_batch)
    if not args.sortish_sampler and not args.max_tokens_per_batch:
        sampler.lengths = [0] * len(lengths)  # plain shuffled batches: no length grouping
    gen_kwargs = {k: v for k, v in {"num_beams": args.eval_beams,
                                    "max_length": args.eval_max_gen_length or args.val_max_target_length}.items()
                  if v is not None}
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get("bf16" if args.bf16 else "fp16" if args.fp16 else "")
    validation = Validation(args, tokenizer, gen_kwargs, dtype) if args.n_val != 0 else None
    if env.is_main:
        write_run_config(args, args.output_dir, {"world_size": env.world_size, "model_config": config.to_dict()})
    trainer = builder.build_trainer(args, model, EpochLoader(train, sampler), env, total_steps=args.max_steps,
                                    eval_hook=validation, final_checkpoint_name="_epoch{epoch}_step{step}.ckpt",
                                    label_smoothing=args.label_smoothing)
    if validation is not None and args.val_check_interval and trainer.step == 0:
        trainer.logger.log(step=trainer.global_step, data={f"val_{k}": v for k, v in validation(trainer).items()})
    summary = trainer.fit() if args.do_train else {}
    if args.do_predict:
        summary["test"] = predict(args, trainer.model, tokenizer, gen_kwargs, dtype)
    if validation is not None:
        summary["validation"] = validation.history
    if env.is_main:
        print(json.dumps({k: v for k, v in summary.items() if k != "validation"}, default=str))
    dist_utils.cleanup()
    return summary


def predict(args, model, tokenizer, gen_kwargs, dtype) -> dict:
    test = Seq2SeqDataset(args.data_dir, "test", tokenizer, args.max_source_length, args.max_target_length,
                          n_obs=args.n_test)
    kwargs = dict(gen_kwargs, max_length=args.test_max_target_length or gen_kwargs.get("max_length") or
                  model.config.max_length)
    predictions, _ = generate_texts(model, tokenizer, test.sources, args.eval_batch_size or 8,
                                    args.max_source_length, kwargs, dtype)
    metrics = score(args.task, predictions, test.targets)
    if dist_utils.is_main_process():
        with open(os.path.join(args.output_dir, "test_generations.txt"), "w", encoding="utf-8") as f:
            f.writelines(p + "\n" for p in predictions)
        with open(os.path.join(args.output_dir, f"test_{'bleu' if args.task == 'translation' else 'rouge'}.json"), "w") as f:
            json.dump(metrics, f, indent=2)
    return metrics


if __name__ == "__main__":
    main()
