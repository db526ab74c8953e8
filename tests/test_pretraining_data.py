"""Text files → LDDL preprocessing and balancing → streaming dataset → noise → batches."""
import json
import os
import socket
import subprocess
import sys

import pytest

from bart.data.noise import NoiseConfig
from bart.data.preprocess import output_complete, preprocess
from bart.data.pretraining_dataset import build_pretraining_loader, split_ids
from tests.helpers.corpus import write_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def shards(tmp_path_factory, punkt_dir):
    base = tmp_path_factory.mktemp("lddl")
    corpus = write_corpus(str(base / "corpus"), documents=160)
    messages = []
    folders = preprocess({"common_crawl": corpus}, str(base / "data"), [64], num_shards=4, workers=1,
                         log=messages.append)
    return folders[0], messages


def _labels(batch):
    return [row[m].tolist() for row, m in zip(batch["labels"], batch["labels"] != -100)]


def test_preprocess_writes_balanced_shards_and_skips_when_complete(shards, tmp_path):
    folder, messages = shards
    assert output_complete(folder)
    counts = json.load(open(os.path.join(folder, ".num_samples.json")))
    assert len(counts) == 4 and max(counts.values()) - min(counts.values()) <= 1
    again = []
    preprocess({"common_crawl": os.path.join(os.path.dirname(os.path.dirname(folder)), "corpus")},
               os.path.dirname(folder), [64], num_shards=4, workers=1, log=again.append)
    assert again == [f"[preprocess] {folder} is complete: nothing to do"]


def test_loader_yields_noised_batches_covering_every_row(shards, tokenizer):
    folder, _ = shards
    loader = build_pretraining_loader(folder, tokenizer, batch_size=8, max_source_length=64,
                                      noise_config=NoiseConfig(), seed=1, num_workers=0)
    loader.set_epoch(0)
    batches = list(loader)
    batch = batches[0]
    assert set(batch) == {"input_ids", "attention_mask", "labels", "decoder_input_ids"}
    assert batch["input_ids"].shape[1] <= 64 and batch["labels"].shape[1] <= 64
    assert (batch["input_ids"] == tokenizer.mask_token_id).any()
    assert (batch["decoder_input_ids"][:, 0] == 2).all()
    # every row of every shard is in the epoch, split rather than truncated
    import pyarrow.parquet as pq
    rows = [t for f in sorted(os.listdir(folder)) if f.endswith(".parquet")
            for t in pq.read_table(os.path.join(folder, f)).column("sentences").to_pylist()]
    expected = sum(len(split_ids(ids, 64)) for ids in tokenizer.encode_batch_fast(rows, add_special_tokens=False))
    assert sum(b["labels"].shape[0] for b in batches) == expected > len(rows)
    loader.set_epoch(1)
    assert [_labels(b) for b in loader][:3] != [_labels(b) for b in batches][:3]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_ranks_see_disjoint_halves_and_new_order_each_epoch(shards, tokenizer_dir, tmp_path):
    folder, _ = shards
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                    f"--master_port={_free_port()}", "-m", "tests.helpers.loader_rank", folder, tokenizer_dir,
                    str(tmp_path), "1"], cwd=ROOT, env=env, check=True, timeout=240, capture_output=True)
    os.makedirs(tmp_path / "one")
    subprocess.run([sys.executable, "-m", "tests.helpers.loader_rank", folder, tokenizer_dir, str(tmp_path / "one"), "0"],
                   cwd=ROOT, env=env, check=True, timeout=240, capture_output=True)
    r0, r1 = (json.load(open(tmp_path / f"rank{r}.json")) for r in (0, 1))
    single = json.load(open(tmp_path / "one" / "rank0.json"))
    for epoch in (0, 1):
        a, b = {tuple(x) for x in r0[epoch]}, {tuple(x) for x in r1[epoch]}
        assert not a & b
        assert sorted(map(tuple, r0[epoch] + r1[epoch])) == sorted(map(tuple, single[epoch]))
    assert r0[0] != r0[1] and r1[0] != r1[1]


def test_mpi_schedule_needs_the_preprocess_stage(tmp_path):
    """Under dask-mpi only the client rank would reach the balancer, whose MPI collectives then wait
    forever for the scheduler and worker ranks: that combination is refused with the fix named."""
    corpus = write_corpus(str(tmp_path / "corpus"), documents=10)
    for lengths, stage in (([64], "all"), ([64], "balance"), ([64, 128], "preprocess")):
        with pytest.raises(ValueError, match="--stage preprocess"):
            preprocess({"common_crawl": corpus}, str(tmp_path / "data"), lengths, 2, 1, schedule="mpi", stage=stage)
    with pytest.raises(FileNotFoundError, match="run --stage preprocess"):
        preprocess({}, str(tmp_path / "data"), [64], 2, 1, stage="balance")


@pytest.mark.skipif(subprocess.run(["which", "mpirun"], capture_output=True).returncode != 0,
                    reason="needs mpirun (the mpich package of requirements.txt provides it)")
def test_preprocess_script_on_mpi(tmp_path, punkt_dir):
    """scripts/preprocess_pretrain_data.sh with 3 MPI ranks: the dask pipeline on dask-mpi for each
    length, then balancing in one process; the shards equal a local run's row count."""
    pytest.importorskip("dask_mpi", reason="dask-mpi is in requirements.txt")
    corpus = write_corpus(str(tmp_path / "cc"), documents=60)
    env = dict(os.environ, NPROC="3", NUM_SHARDS="2", NLTK_DATA=str(punkt_dir))
    run = subprocess.run(["bash", "scripts/preprocess_pretrain_data.sh", str(tmp_path / "none"), corpus,
                          str(tmp_path / "none"), str(tmp_path / "data")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "on MPI with 3 ranks" in run.stdout
    local = preprocess({"common_crawl": corpus}, str(tmp_path / "local"), [128, 512], num_shards=2, workers=1,
                       log=lambda _: None)
    for length, local_folder in zip((128, 512), local):
        folder = tmp_path / "data" / f"pretrain_lddl_{length}"
        assert output_complete(str(folder))
        assert not (tmp_path / "data" / f"pretrain_lddl_{length}.raw.tmp").exists()
        counts = json.load(open(folder / ".num_samples.json"))
        assert len(counts) == 2 and max(counts.values()) - min(counts.values()) <= 1
        assert sum(counts.values()) == sum(json.load(open(os.path.join(local_folder, ".num_samples.json"))).values())


def test_preprocess_script_reads_the_layouts_lddl_downloaders_write(tmp_path, punkt_dir):
    """download_wikipedia writes <outdir>/source/en/*.txt, download_open_webtext <outdir>/source/*.txt:
    the script takes the downloaders' --outdir folders as the README says, and the rows equal those
    of the readers' own layout given directly."""
    write_corpus(str(tmp_path / "wikipedia" / "source" / "en"), documents=30, seed=1)
    write_corpus(str(tmp_path / "openwebtext" / "source"), documents=30, seed=2)
    env = dict(os.environ, NPROC="2", NUM_SHARDS="2", NLTK_DATA=str(punkt_dir))
    run = subprocess.run(["bash", "scripts/preprocess_pretrain_data.sh", str(tmp_path / "wikipedia"),
                          str(tmp_path / "common_crawl"), str(tmp_path / "openwebtext"), str(tmp_path / "data")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    direct = preprocess({"wikipedia": str(tmp_path / "wikipedia" / "source"),
                         "open_webtext": str(tmp_path / "openwebtext" / "source")}, str(tmp_path / "direct"), [128, 512],
                        num_shards=2, workers=1, log=lambda _: None)
    for length, folder in zip((128, 512), direct):
        counts = json.load(open(tmp_path / "data" / f"pretrain_lddl_{length}" / ".num_samples.json"))
        assert sum(counts.values()) > 0
        assert sum(counts.values()) == sum(json.load(open(os.path.join(folder, ".num_samples.json"))).values())
    (tmp_path / "empty" / "source").mkdir(parents=True)
    bad = subprocess.run([sys.executable, "-m", "bart.data.preprocess", "--wikipedia", str(tmp_path / "empty"),
                          "--out", str(tmp_path / "x")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "download_wikipedia" in bad.stderr and "Traceback" not in bad.stderr
