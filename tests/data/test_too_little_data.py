"""Too little data for the run: a global batch larger than the training rows, a train split smaller than the
processes (one line per rank under torchrun); batches that do not divide among the ranks leave one out."""
import os
import subprocess
import sys

import pytest

from bart.errors import UserError
from tests.helpers import ROOT
from tests.helpers.entry import run_entry as _main
from tests.helpers.user_inputs import FT, PT
from tests.helpers.user_inputs import argv as _argv
from tests.helpers.user_inputs import one_line as _one_line


@pytest.mark.parametrize("script", ["pretrain.py", "finetune.py"])
def test_a_global_batch_larger_than_the_data_is_one_line(script, user_inputs, tmp_path, capsys):
    """Refused before anything is written, naming the largest batch the data allows (not a run whose banner says 1000
    sequences per update where each holds the 16 rows there are)."""
    out = str(tmp_path / "out")
    argv = _argv(PT if script == "pretrain.py" else FT + ["--init_checkpoint", "{weights}"], user_inputs, out)
    line = _one_line(capsys, _main(script, argv + ["--train_batch_size", "1000"]), script)
    assert "global batch of 1000 sequences" in line and "larger than the 16 training rows" in line, line
    assert "--train_batch_size to at most 16" in line, line
    assert not os.path.exists(os.path.join(out, "run_config.json"))  # refused before anything is written


def test_train_split_smaller_than_the_processes_is_one_line(user_inputs):
    from bart.data.summarization import SortishSampler, build_finetuning_loader
    from bart.tokenization.tokenization_bart import BartTokenizer
    tokenizer = BartTokenizer.from_pretrained(user_inputs["tok"])
    with pytest.raises(UserError, match=r"train.source has 1 usable example\(s\), fewer than the 2 processes"):
        build_finetuning_loader(user_inputs["data_one"], tokenizer, 32, 16, 4, world_size=2, rank=0)
    # batches of one example that do not divide among the ranks: not a ValueError; the update short of an example
    # fills it with a filler (index 3 + i: example i, its labels ignored), and every example is trained on each epoch
    for epoch in range(4):
        dealt = []
        for rank in range(2):
            sampler = SortishSampler([5, 6, 7], batch_size=1, num_replicas=2, rank=rank, seed=0)
            sampler.set_epoch(epoch)
            dealt += [[i for batch in sampler for i in batch]]
        assert len(dealt[0]) == len(dealt[1]) == 2
        examples, fillers = [i for i in dealt[0] + dealt[1] if i < 3], [i - 3 for i in dealt[0] + dealt[1] if i >= 3]
        assert sorted(examples) == [0, 1, 2] and len(fillers) == 1 and fillers[0] in examples
    dataset = build_finetuning_loader(user_inputs["data_one"], tokenizer, 32, 16, 4).dataset
    batch = dataset.collate([dataset[0], dataset[len(dataset)]])  # example 0, and example 0 as a filler
    assert batch["input_ids"][0].tolist() == batch["input_ids"][1].tolist()
    assert (batch["labels"][0] != -100).any() and (batch["labels"][1] == -100).all()  # no loss, no gradient


def test_one_line_train_split_under_torchrun_is_one_line_per_rank(user_inputs, tmp_path):
    """Each rank says the same one line naming --nproc_per_node, exit 2, no ValueError traceback."""
    out = str(tmp_path / "out")
    argv = _argv(FT + ["--init_checkpoint", "{weights}"], user_inputs, out, data=user_inputs["data_one"])
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "finetune.py", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=None)
    ours = [line for line in proc.stderr.splitlines() if line.startswith("finetune.py:")]
    assert proc.returncode != 0 and len(ours) == 2 and ours[0] == ours[1], proc.stderr[-3000:]
    assert "fewer than the 2 processes" in ours[0] and "--nproc_per_node" in ours[0], ours
    assert "[rank0]" not in proc.stderr and "ValueError" not in proc.stderr, proc.stderr[-3000:]
    assert "exitcode  : 2" in proc.stderr, proc.stderr[-3000:]
