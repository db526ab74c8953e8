"""A damaged LDDL shard (cut short, garbage in its first page, bad snappy data further in): one line naming the
shard (and the row group), exit 2, also with --num_workers 2; loader workers end when the epoch fails."""
import multiprocessing
import os
import random
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bart.data import DataError
from bart.data.lddl_compat import _read_file_rows, balance_shards, check_shard
from bart.errors import EXIT_USER_ERROR
from tests.helpers.corpus import write_shards
from tests.helpers.faulty_runs import one_line, run

EXIT_INTERRUPTED = 130


@pytest.fixture(scope="module")
def setup(inputs):
    """The command line of a micro pretraining run, no --data_dir (each test gives its damaged copy)."""
    argv = ["pretrain.py", "--config_path", inputs.config(), "--tokenizer", inputs.tokenizer,
            "--max_steps", "8", "--train_batch_size", "4", "--max_source_length", "48", "--num_workers", "0",
            "--log_freq", "1", "--learning_rate", "1e-3", "--seed", "7"]
    return {"argv": argv}


# -- case 5: damaged LDDL shards ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def big_shards(tmp_path_factory):
    """Two LDDL-balanced shards large enough for several pages (a dictionary page, then data pages): a
    page further in can be damaged while the first stays readable."""
    base = tmp_path_factory.mktemp("big_shards")
    write_shards(str(base / "raw"), [3000, 3000], words=(60, 100))
    balance_shards(str(base / "raw"), str(base / "shards"), 2)
    return str(base / "shards")


def _damaged_copy(shards: str, folder, how: str) -> str:
    """A copy of the shard folder with shard-1.parquet cut short, or garbage written into its first page
    (the dictionary page) or into its last data page."""
    shutil.copytree(shards, folder)
    path = os.path.join(folder, "shard-1.parquet")
    data = bytearray(open(path, "rb").read())
    column = pq.ParquetFile(path).metadata.row_group(0).column(0)
    start = column.dictionary_page_offset or column.data_page_offset
    garbage = random.Random(1).randbytes(64)
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "first page":
        data[start + 200: start + 264] = garbage
    else:  # "further in"
        end = start + column.total_compressed_size
        data[end - 2000: end - 1936] = garbage
    open(path, "wb").write(bytes(data))
    return path


@pytest.mark.parametrize("how", ["truncated", "first page"])
def test_a_shard_damaged_from_its_start_stops_before_training_in_one_line(setup, big_shards, tmp_path, how):
    """A cut shard, or garbage in its first page (which the metadata alone does not show): one line naming the shard
    at start-up, exit 2, before the first update; no traceback, no pyarrow error mid-run."""
    bad = _damaged_copy(big_shards, tmp_path / "shards", how)
    done = run(setup["argv"] + ["--data_dir", str(tmp_path / "shards"), "--output_dir", str(tmp_path / "run")])
    assert done.returncode == EXIT_USER_ERROR, done.stderr[-3000:]
    line = one_line(done.stderr, "pretrain.py: error:")
    assert bad in line and "delete it and preprocess again" in line, line
    assert not os.path.exists(tmp_path / "run" / "dllogger.json") or "loss" not in open(
        tmp_path / "run" / "dllogger.json").read()  # stopped before the first update


@pytest.mark.parametrize("workers", [0, 2])
def test_a_shard_damaged_further_in_stops_in_one_line_naming_the_row_group(setup, big_shards, tmp_path, workers):
    """The start-up check passes (the first page is whole); the loader (in its workers with --num_workers 2)
    meets the damage and the run stops in one line naming the shard and the row group, within seconds.
    The process ends with --num_workers 2 too (its exit waits on no worker)."""
    bad = _damaged_copy(big_shards, tmp_path / "shards", "further in")
    assert check_shard(bad) == 3000  # precondition: the damage is past the first page
    with pytest.raises(OSError, match="Corrupt snappy"):
        pq.read_table(bad)
    done = run(setup["argv"] + ["--data_dir", str(tmp_path / "shards"), "--output_dir", str(tmp_path / "run"),
                                 "--num_workers", str(workers)], timeout=None)
    assert done.returncode == EXIT_USER_ERROR, done.stderr[-3000:]
    line = one_line(done.stderr, "pretrain.py: error:")
    assert f"pretraining shard {bad} is damaged: row group 0 of 1 (rows 0-2999) cannot be read (OSError: Corrupt " \
           f"snappy compressed data.)" in line, line


def test_start_up_check_reads_a_page_and_the_reader_names_the_row_group(tmp_path):
    """In-process: garbage in the first data page is caught by check_shard (it reads a page, not only the
    footer);
    damage in the second of two row groups is named as row group 1 by the reader."""
    texts = [f"Row {i} " + "words of a sentence " * (i % 7 + 3) for i in range(400)]
    path = str(tmp_path / "two_groups.parquet")
    pq.write_table(pa.table({"sentences": texts}), path, row_group_size=200)
    groups = pq.ParquetFile(path).metadata
    second = groups.row_group(1).column(0)
    data = bytearray(open(path, "rb").read())
    offset = (second.dictionary_page_offset or second.data_page_offset) + 40
    data[offset: offset + 64] = random.Random(2).randbytes(64)
    open(path, "wb").write(bytes(data))
    assert check_shard(path) == 400  # the first row group is whole
    assert _read_file_rows(path, 0, 10, {})[0] == texts[0]
    with pytest.raises(DataError, match=rf"{path} is damaged: row group 1 of 2 \(rows 200-399\) cannot be read"):
        _read_file_rows(path, 150, 250, {})
    first = groups.row_group(0).column(0)
    offset = (first.dictionary_page_offset or first.data_page_offset) + 40
    data[offset: offset + 64] = random.Random(3).randbytes(64)
    open(path, "wb").write(bytes(data))
    with pytest.raises(DataError, match=rf"pretraining shard {path} is damaged: its first page"):
        check_shard(path)


def _failing_decode(texts):
    raise RuntimeError("a bug in a loader worker")


def test_loader_workers_end_when_the_epoch_fails(tmp_path, small_tokenizer_dir):
    """Whatever a worker raises, the workers are gone when the error reaches the training loop (the interpreter's
    exit waits on none)."""
    from bart.data.noise import NoiseConfig
    from bart.data.pretraining_dataset import (
        BartPretrainingDataset,
        PretrainingLoader,
        build_pretraining_loader,
    )
    from bart.tokenization.tokenization_bart import BartTokenizer

    shards = write_shards(str(tmp_path), [8, 8])
    loader = build_pretraining_loader(str(tmp_path), BartTokenizer.from_pretrained(small_tokenizer_dir), 2, 48,
                                      NoiseConfig(), seed=1, num_workers=2)
    assert isinstance(loader, PretrainingLoader) and isinstance(loader.dataset, BartPretrainingDataset)
    loader.dataset._decode_rows = _failing_decode  # runs in the (forked) workers
    loader.set_epoch(0)
    with pytest.raises(RuntimeError, match="a bug in a loader worker") as raised:
        next(iter(loader))
    assert raised.value is not None and not multiprocessing.active_children(), multiprocessing.active_children()
    assert len(shards) == 2
