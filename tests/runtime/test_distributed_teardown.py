"""A run's distributed state ends in an order that cannot deadlock: runs one after another in one pair of processes
(notebooks, the configuration matrix and the tests run scripts so, through ``bart.cli.exits.run_entry``) never hang
between two runs.

The order held: the group is destroyed by its Python object, with the GIL released (``bart.runtime.distributed``'s
``cleanup`` and ``outlive_reducer``). A DDP run's process group that outlives ``destroy_process_group`` in its
Reducer, freed with the trainer after the run, has the Reducer destroy the gloo group with the GIL held, joining a
gloo worker that waits for that GIL to release the tensors of its last collective: the rank sits at 0% CPU, its peer
in the next rendezvous, until the test's timeout (on 2 cores within the first few runs of
:func:`test_runs_one_after_another_end`'s launch).

The launch is watched (``tests.helpers.processes.run_ranks``): a hang anywhere fails within a minute of the last line
printed, with every process's Python stacks, and no process is left behind."""
import json
import re
import sys

import pytest

from tests.helpers.corpus import micro_config
from tests.helpers.ports import free_port
from tests.helpers.processes import run_ranks
from tests.helpers.repeated_runs import STRATEGIES
from tests.helpers.summaries import write_summarization_data

ROUNDS = 4  # rounds of one DDP and one FSDP fine-tuning run: 8 runs, each ending its process group
SHORT = 20  # short DDP runs (tests/helpers/repeated_runs.py): the deadlock above shows within the first few


@pytest.fixture(scope="module")
def argv(tmp_path_factory, small_tokenizer_dir):
    base = tmp_path_factory.mktemp("teardown")
    (base / "config.json").write_text(json.dumps(micro_config()))
    data = write_summarization_data(str(base / "data"), sizes=(("train", 8), ("val", 4), ("test", 2)))
    # 2 updates, a checkpoint after each (its all_gather_object and barrier) and a validation at the end (its
    # generations gathered): the collectives a run ends with
    return base, ["--config_path", str(base / "config.json"), "--data_dir", data, "--tokenizer", small_tokenizer_dir,
                  "--from_scratch", "--max_steps", "2", "--save_checkpoint_steps", "1", "--keep_checkpoints", "1",
                  "--train_batch_size", "2", "--max_source_length", "16", "--max_target_length", "8",
                  "--n_val", "4", "--eval_batch_size", "2", "--eval_beams", "1", "--eval_max_gen_length", "4",
                  "--task", "translation", "--num_sanity_val_steps", "0", "--num_workers", "0", "--no_tensorboard",
                  "--log_freq", "1"]


def test_runs_one_after_another_end(argv):
    base, flags = argv
    code, out = run_ranks([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={free_port()}", "-m", "tests.helpers.repeated_runs", str(base / "runs"),
                           str(ROUNDS), str(SHORT), *flags])
    assert code == 0, out[-4000:]
    runs = ROUNDS * len(STRATEGIES) + SHORT
    for rank in (0, 1):  # another process's line may share a line of the output: found anywhere
        ended = re.findall(rf"repeated_runs: rank {rank}: run (\d+) \((.+?)\) ended, exit (\d+)", out)
        assert [int(n) for n, _, _ in ended] == list(range(1, runs + 1)), out[-4000:]
        assert {code for _, _, code in ended} == {"0"}, out[-4000:]
        assert f"repeated_runs: rank {rank}: all {runs} runs ended" in out, out[-4000:]
