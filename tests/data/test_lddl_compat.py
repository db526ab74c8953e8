"""Each fix of lddl 0.1.0 in bart/data/lddl_compat.py, shown failing without it and working with it."""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torch.utils.data import DataLoader

from bart.data import lddl_compat
from bart.data.lddl_compat import (
    BalancedParquetDataset,
    balance_shards,
    parquet_files,
    usable_workers,
)
from tests.helpers.corpus import write_shards


class _Rows(BalancedParquetDataset):
    def _decode_rows(self, texts):
        return [[text] for text in texts]


def test_a_numpy_nan_alias(monkeypatch):
    from lddl.dask.load_balance import _calculate_mean_std_num_samples
    if hasattr(np, "NAN"):
        monkeypatch.delattr(np, "NAN")
    with pytest.raises(AttributeError):
        _calculate_mean_std_num_samples([])
    lddl_compat.ensure_numpy_nan()
    assert all(np.isnan(_calculate_mean_std_num_samples([])))


def test_b_and_f_more_shards_than_files_and_exact_division(tmp_path):
    write_shards(str(tmp_path / "raw"), [30, 10])  # 2 files, 40 rows → 4 shards of exactly 10
    os.makedirs(tmp_path / "out")
    counts = balance_shards(str(tmp_path / "raw"), str(tmp_path / "out"), num_shards=4)
    assert sorted(counts.values()) == [10, 10, 10, 10]
    texts = [t for f in parquet_files(str(tmp_path / "out")) for t in pq.read_table(f).column("sentences").to_pylist()]
    assert len(texts) == 40 and len(set(texts)) == 40


def test_f_lddl_progress_alone_never_completes():
    from lddl.dask.load_balance import Progress

    class FakeShard:
        def __init__(self, n):
            self.num_samples = n
    shards = [FakeShard(n) for n in (9, 11, 10, 10)]
    broken = Progress(shards)
    broken.report([FakeShard(n) for n in (11, 11, 10, 10)])  # a shard overshooting to base + 1
    assert min(broken._targets.values()) < 0  # shards of a size no target wants were counted as ready
    exact = lddl_compat._exact_progress_class()(shards)
    assert exact._targets == {10: 4}


def test_c_perfectly_balanced_shards_load(tmp_path):
    from lddl.torch.datasets import ParquetDataset
    files = write_shards(str(tmp_path), [5, 5, 5, 5])

    class Plain(ParquetDataset):
        def _decode_record_batch(self, batch):
            yield from batch.column("sentences").to_pylist()
    from lddl.torch.log import DatasetLogger
    with pytest.raises(AssertionError):
        Plain(files, logger=DatasetLogger())
    rows = list(_Rows(files))
    assert len(rows) == 20 and len(set(rows)) == 20  # every row, none dropped


def test_d_uneven_split_is_explained(tmp_path):
    files = write_shards(str(tmp_path), [5, 5, 5])
    with pytest.raises(ValueError, match="3 shards cannot be split evenly over 1 process.*x 2 loader"):
        _Rows(files, num_workers=2)
    assert usable_workers(num_files=6, world_size=1, requested=4) == 3
    assert usable_workers(num_files=6, world_size=1, requested=0) == 0


def test_e_each_epoch_reshuffles_with_fresh_workers(tmp_path):
    files = write_shards(str(tmp_path), [6, 6, 6, 6])
    orders = []
    for epoch in (0, 1):
        dataset = _Rows(files, num_workers=2, shuffle_buffer_size=4)
        dataset.set_epoch(epoch)
        orders.append(list(DataLoader(dataset, batch_size=None, num_workers=2)))
    assert sorted(orders[0]) == sorted(orders[1]) and orders[0] != orders[1]
    # lddl alone: a fresh worker copy starts at epoch 0 again, so epochs repeat
    from lddl.torch.datasets import ParquetDataset
    ParquetDataset.__init__  # noqa: B018 (the original, for the record)
    same = _Rows(files, num_workers=2, shuffle_buffer_size=4)
    first = list(DataLoader(same, batch_size=None, num_workers=2))
    second = list(DataLoader(same, batch_size=None, num_workers=2))  # no set_epoch: lddl's behaviour
    assert first == second


def test_bad_shards_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no pretraining data folder"):
        parquet_files(str(tmp_path / "absent"))
    os.makedirs(tmp_path / "empty_dir")
    with pytest.raises(FileNotFoundError, match="holds no .parquet shards"):
        parquet_files(str(tmp_path / "empty_dir"))
    good = write_shards(str(tmp_path / "d1"), [3, 3])
    open(good[1], "wb").write(b"PAR1 not really")
    with pytest.raises(ValueError, match="shard-1.parquet is not a readable parquet shard"):
        _Rows(good)
    empty = write_shards(str(tmp_path / "d2"), [3, 0])
    with pytest.raises(ValueError, match="shard-1.parquet holds no rows"):
        _Rows(empty)
    wrong = str(tmp_path / "d3" / "shard-0.parquet")
    os.makedirs(os.path.dirname(wrong))
    pq.write_table(pa.table({"text": ["a", "b"]}), wrong)
    with pytest.raises(ValueError, match="shard-0.parquet has columns \\['text'\\]"):
        _Rows([wrong])
