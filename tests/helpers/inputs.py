"""The one builder of the tests' inputs: micro model configs, their seed-0 weights, summarization splits and LDDL
shards, each written once per test session (once per xdist worker) the first time a test asks for it, then shared.

``tests/conftest.py`` gives it to the tests as the session fixture ``inputs``. What it returns is shared
read-only: a test that changes a file copies it first (``shutil.copytree``), and runs write their outputs into
folders of their own, never beside these files. The same request gives the same path, so equal inputs are
written once however many modules ask for them.
"""
import json
import os
import pathlib
import re

from tests.helpers.corpus import micro_config, random_weights, write_shards
from tests.helpers.summaries import write_summarization_data


class Inputs:
    def __init__(self, base: pathlib.Path, tokenizer_dir: str):
        self.base, self.tokenizer = pathlib.Path(base), tokenizer_dir
        self._made: dict = {}

    def _once(self, key: tuple, make):
        if key not in self._made:
            name = "_".join(f"{part[0]}={part[1]}" if isinstance(part, tuple) else str(part) for part in key)
            folder = self.base / re.sub(r"[^A-Za-z0-9_.=-]", "-", name)
            self._made[key] = make(str(folder))
        return self._made[key]

    def config(self, **changes) -> str:
        """A config.json of :func:`~tests.helpers.corpus.micro_config` with ``changes``."""
        def make(folder):
            os.makedirs(folder)
            path = os.path.join(folder, "config.json")
            with open(path, "w") as f:
                json.dump(micro_config(**changes), f)
            return path
        return self._once(("config", *sorted(changes.items())), make)

    def weights(self, **changes) -> str:
        """The seed-0 random weights of :meth:`config` with ``changes`` (a run's --init_checkpoint)."""
        config = self.config(**changes)
        return self._once(("weights", *sorted(changes.items())),
                          lambda folder: random_weights(config, os.path.join(os.path.dirname(config), "weights.ckpt")))

    def summaries(self, train: int = 16, val: int = 4, test: int = 4) -> str:
        """A summarization folder (tests.helpers.summaries) of ``train``/``val``/``test`` rows."""
        return self._once(("summaries", train, val, test), lambda folder: write_summarization_data(
            folder, sizes=(("train", train), ("val", val), ("test", test))))

    def shards(self, rows=(24, 24)) -> str:
        """A folder of LDDL shards, one of each size in ``rows``."""
        return self._once(("shards", *rows), lambda folder: os.path.dirname(write_shards(folder, list(rows))[0]))

    def balanced_shards(self, rows=(40, 40), count: int = 4) -> str:
        """:meth:`shards` of ``rows`` balanced into ``count`` shards as LDDL's balancer writes them."""
        from bart.data.lddl_compat import balance_shards

        def make(folder):
            write_shards(os.path.join(folder, "raw"), list(rows))
            balance_shards(os.path.join(folder, "raw"), os.path.join(folder, "shards"), count)
            return os.path.join(folder, "shards")
        return self._once(("balanced", *rows, count), make)

    def pretraining_argv(self, rows=(24, 24), **changes) -> list:
        """A micro pretraining run's command line (``pretrain.py`` first, no --output_dir): :meth:`config` with
        ``changes`` and :meth:`shards` of ``rows``."""
        return ["pretrain.py", "--config_path", self.config(**changes), "--data_dir", self.shards(rows), "--tokenizer",
                self.tokenizer, "--train_batch_size", "4", "--max_source_length", "48", "--num_workers", "0",
                "--log_freq", "1", "--learning_rate", "1e-3", "--seed", "7"]

    def finetuning(self, train_rows: int, **changes) -> dict:
        """A micro fine-tuning job's inputs: :meth:`config` with ``changes``, its :meth:`weights`, :meth:`summaries`
        of ``train_rows``/4/4 rows; ``argv``: the flags of a short CPU run from those weights (no --output_dir, no
        --max_steps)."""
        path, weights, data = self.config(**changes), self.weights(**changes), self.summaries(train_rows, 4, 4)
        argv = ["--config_path", path, "--data_dir", data, "--tokenizer", self.tokenizer,
                "--init_checkpoint", weights, "--train_batch_size", "4", "--n_val", "0", "--num_workers", "0",
                "--max_source_length", "32", "--max_target_length", "16", "--learning_rate", "1e-3",
                "--log_freq", "1", "--keep_checkpoints", "0", "--no_tensorboard"]
        return {"argv": argv, "config": path, "data": data, "tokenizer": self.tokenizer}
