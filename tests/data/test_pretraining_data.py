"""Text files → LDDL preprocessing and balancing → streaming dataset → noise → batches."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from bart.data.noise import NoiseConfig
from bart.data.preprocess import output_complete, preprocess
from bart.data.pretraining_dataset import build_pretraining_loader, is_blank, split_ids
from bart.files.checkpoint_io import CheckpointError
from bart.modeling import BartForConditionalGeneration
from bart.optim import build_optimizer, build_scheduler
from bart.records.dllogger_compat import Logger, read_dllogger
from bart.training.trainer import Trainer
from tests.helpers import ROOT, loader_rank
from tests.helpers.corpus import SMALL_VOCAB_SIZE, write_corpus
from tests.helpers.forked import fork_ranks, run_python
from tests.helpers.synthetic import one_process, run_settings, tiny_config

# documents with nothing to learn from, as web corpora hold them: LDDL's reader drops the blank
# lines, the one of a byte-order mark and zero-width spaces becomes a shard row
DEGENERATE_DOCUMENTS = ["", "   \t", "\ufeff\u200b\u200b"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory, punkt_dir):
    base = tmp_path_factory.mktemp("lddl")
    corpus = write_corpus(str(base / "corpus"), documents=160)
    with open(os.path.join(corpus, "part0.txt"), "a", encoding="utf-8") as f:
        f.write("\n".join(DEGENERATE_DOCUMENTS) + "\n")
    messages = []
    folders = preprocess({"common_crawl": corpus}, str(base / "data"), [64], num_shards=4, workers=1,
                         log=messages.append)
    return folders[0], messages, _dask_workers()


def _dask_workers() -> list[str]:
    """This process's children that are dask worker processes (multiprocessing spawns)."""
    kids = subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True, text=True).stdout.split()
    commands = []
    for pid in kids:
        try:
            commands.append(open(f"/proc/{pid}/cmdline").read().replace("\0", " "))
        except FileNotFoundError:
            pass
    return [c for c in commands if "multiprocessing.spawn" in c]


def _labels(batch):
    return [row[m].tolist() for row, m in zip(batch["labels"], batch["labels"] != -100)]


def test_preprocess_writes_balanced_shards_and_skips_when_complete(shards, tmp_path):
    folder, messages, workers_left = shards
    assert workers_left == []  # the local dask cluster LDDL started was closed, its worker processes ended
    assert output_complete(folder)
    counts = json.load(open(os.path.join(folder, ".num_samples.json")))
    assert len(counts) == 4 and max(counts.values()) - min(counts.values()) <= 1
    again = []
    preprocess({"common_crawl": os.path.join(os.path.dirname(os.path.dirname(folder)), "corpus")},
               os.path.dirname(folder), [64], num_shards=4, workers=1, log=again.append)
    assert again == [f"[preprocess] {folder} is complete: nothing to do"]


def test_loader_yields_noised_batches_covering_every_row(shards, tokenizer):
    folder = shards[0]
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
    good = [t for t in rows if not is_blank(t)]
    assert len(rows) - len(good) == loader.skipped_rows == 1  # the invisible document, skipped and counted
    expected = sum(len(split_ids(ids, 64)) for ids in tokenizer.encode_batch_fast(good, add_special_tokens=False))
    assert sum(b["labels"].shape[0] for b in batches) == expected > len(rows)
    loader.set_epoch(1)
    assert [_labels(b) for b in loader][:3] != [_labels(b) for b in batches][:3]


@pytest.fixture(scope="module")
def small_tokenizer(small_tokenizer_dir):
    from bart.tokenization.tokenization_bart import BartTokenizer

    return BartTokenizer.from_pretrained(small_tokenizer_dir)


def _tiny_trainer(out_dir, loader, max_steps, save_every=0, logger=None):
    """A tiny BART (the small tokenizer's vocabulary) trained by the real Trainer."""
    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(vocab_size=SMALL_VOCAB_SIZE, max_position_embeddings=66))
    optimizer, clips = build_optimizer(model, "adamw", lr=3e-3, weight_decay=0.01, max_grad_norm=1.0)
    scheduler = build_scheduler(optimizer, "linear", 2, max_steps)
    settings = run_settings(output_dir=str(out_dir), max_steps=max_steps, log_freq=1, save_checkpoint_steps=save_every,
                            keep_checkpoints=0)
    return Trainer(model, optimizer, scheduler, loader, settings, strategy=one_process(model), clips_internally=clips,
                   progress_bar=False,
                   logger=logger or Logger(None, stdout=False))


def test_degenerate_rows_are_skipped_and_counted(shards, small_tokenizer, tmp_path):
    """An empty and a null row (written into an LDDL shard with its own schema: LDDL's reader drops
    blank lines, other writers of the layout need not) and the invisible document that LDDL kept:
    no crash, every other row trained on, and each skipped row counted in the log, every epoch."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = str(tmp_path / "shards")
    shutil.copytree(shards[0], folder)
    shard = os.path.join(folder, "shard-0.parquet")
    table = pq.read_table(shard)
    texts = table.column("sentences").to_pylist()
    assert not any(t.strip() == "" for t in texts)  # LDDL dropped the blank documents
    texts[:2] = ["", None]
    pq.write_table(table.set_column(0, "sentences", pa.array(texts, pa.string())), shard)
    rows = [t for f in sorted(os.listdir(folder)) if f.endswith(".parquet")
            for t in pq.read_table(os.path.join(folder, f)).column("sentences").to_pylist()]
    good = [t for t in rows if not is_blank(t)]
    assert len(rows) - len(good) == 3
    samples = sum(len(split_ids(ids, 64)) for ids in small_tokenizer.encode_batch_fast(good, add_special_tokens=False))

    def loader():
        return build_pretraining_loader(folder, small_tokenizer, batch_size=32, max_source_length=64,
                                        noise_config=NoiseConfig(), seed=1, num_workers=0)
    epoch = loader()
    epoch.set_epoch(0)
    batches = list(epoch)
    assert sum(b["labels"].shape[0] for b in batches) == samples and epoch.skipped_rows == 3
    log = str(tmp_path / "dllogger.json")
    logger = Logger(log, stdout=False)
    _tiny_trainer(tmp_path / "run", loader(), max_steps=len(batches) + 1, logger=logger).fit()
    logger.close()
    counts = [r["data"]["skipped_rows"] for r in read_dllogger(log) if isinstance(r["step"], int)]
    assert counts[len(batches) - 1] == 3  # the whole first epoch: each skipped row once
    assert counts == sorted(counts) and counts[-1] >= 3


def test_resume_seeks_without_reading_or_noising_the_rows_before(shards, small_tokenizer, tmp_path):
    """A run saved after 5 updates and resumed in a fresh trainer equals the straight run update for
    update (losses, learning rates), noises exactly the straight run's batches 6-8, and decodes
    (tokenizes) rows from the saved row on: nothing before it; of the files, only the window of 16
    rows that holds the saved row is read again."""
    folder = shards[0]

    def counted_loader():
        loader = build_pretraining_loader(folder, small_tokenizer, batch_size=8, max_source_length=64,
                                          noise_config=NoiseConfig(), seed=1, num_workers=0, shuffle_buffer_size=16)
        calls = {"read": [], "decoded": [], "noised": []}
        dataset, noise = loader.dataset, loader.collator.noise
        read, decode, batch = dataset._read_rows, dataset._decode_rows, noise.batch
        dataset._read_rows = lambda files, start, *rest: calls["read"].append(start) or read(files, start, *rest)
        dataset._decode_rows = lambda texts: calls["decoded"].extend(texts) or decode(texts)
        noise.batch = lambda docs, epochs, ids: calls["noised"].append(list(ids)) or batch(docs, epochs, ids)
        return loader, calls

    loader, straight = counted_loader()
    first = _tiny_trainer(tmp_path / "straight", loader, max_steps=8, save_every=5)
    first.fit()
    checkpoint = torch.load(tmp_path / "straight" / "_step5.ckpt", weights_only=True)
    [[row, piece]] = checkpoint["data_position"][0]["rows"]
    assert row >= 16  # past the first window

    loader, resumed = counted_loader()
    second = _tiny_trainer(tmp_path / "resumed", loader, max_steps=8)
    second.resume(str(tmp_path / "straight" / "_step5.ckpt"))
    second.fit()
    assert [(h["step"], h["loss"], h["learning_rate"]) for h in second.history] == \
        [(h["step"], h["loss"], h["learning_rate"]) for h in first.history[5:]]
    assert resumed["noised"] == straight["noised"][5:8]
    assert resumed["decoded"] == straight["decoded"][row:row + len(resumed["decoded"])]
    assert resumed["read"][0] == row // 16 * 16 > 0 and straight["read"][0] == 0
    other = build_pretraining_loader(folder, small_tokenizer, batch_size=16, max_source_length=64,
                                     noise_config=NoiseConfig(), seed=1, num_workers=0, shuffle_buffer_size=16)
    with pytest.raises(CheckpointError, match=r"_step5.ckpt: the saved data position .*batch_size 8 → 16"):
        _tiny_trainer(tmp_path / "other", other, max_steps=8).resume(str(tmp_path / "straight" / "_step5.ckpt"))


def test_loader_workers_resume_at_every_position(shards, tokenizer):
    """Two loader workers (each its own files and batches, taken in turn): started at the position
    saved after any batch, including after one worker has run out, the epoch goes on exactly."""
    folder = shards[0]

    def loader():
        made = build_pretraining_loader(folder, tokenizer, batch_size=8, max_source_length=64,
                                        noise_config=NoiseConfig(), seed=2, num_workers=2, shuffle_buffer_size=32)
        made.set_epoch(1)
        return made

    def content(batch):
        return batch["input_ids"].tolist(), batch["labels"].tolist()

    straight, positions = [], []
    for batch in (first := loader()):
        straight.append(content(batch))
        positions.append(first.position())
    ends = [sum(f.num_samples for f in first.dataset.worker_files(w, 2)) for w in (0, 1)]
    one_done = [k for k, p in enumerate(positions) if sum(r[0] == e for r, e in zip(p["rows"], ends)) == 1]
    assert one_done and one_done[-1] < len(straight) - 1  # one worker ends before the other
    for k in (0, len(straight) // 2, one_done[0], one_done[-1], len(straight) - 1):
        resumed = loader()
        resumed.seek(positions[k])
        assert [content(b) for b in resumed] == straight[k + 1:], k


@pytest.mark.slow
def test_two_ranks_see_disjoint_halves_and_new_order_each_epoch_and_resume(shards, tokenizer_dir, tmp_path):
    folder = shards[0]
    code, out = fork_ranks(2, [sys.executable, "-m", "tests.helpers.loader_rank", folder, tokenizer_dir, str(tmp_path),
                               "1"], env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=ROOT)
    assert code == 0, out[-3000:]
    os.makedirs(tmp_path / "one")
    loader_rank.main([folder, tokenizer_dir, str(tmp_path / "one"), "0"])  # the reference: one process (this one)
    r0, r1 = (json.load(open(tmp_path / f"rank{r}.json")) for r in (0, 1))
    single = json.load(open(tmp_path / "one" / "rank0.json"))
    for epoch in (0, 1):
        a, b = {tuple(x) for x in r0[epoch]}, {tuple(x) for x in r1[epoch]}
        assert not a & b
        assert sorted(map(tuple, r0[epoch] + r1[epoch])) == sorted(map(tuple, single[epoch]))
    assert r0[0] != r0[1] and r1[0] != r1[1]
    # each rank resumes at its own position (its rows, not the other's) and goes on exactly
    resumed = [json.load(open(tmp_path / f"rank{r}_resume.json")) for r in (0, 1)]
    assert all(all(r["equal"].values()) and len(r["equal"]) == 3 for r in resumed)
    assert resumed[0]["rows"] != resumed[1]["rows"]


def test_mpi_schedule_needs_the_preprocess_stage(tmp_path):
    """Under dask-mpi only the client rank would reach the balancer, whose MPI collectives then wait
    forever for the scheduler and worker ranks: that combination is refused with the fix named."""
    corpus = write_corpus(str(tmp_path / "corpus"), documents=10)
    for lengths, stage in (([64], "all"), ([64], "balance"), ([64, 128], "preprocess")):
        with pytest.raises(ValueError, match="--stage preprocess"):
            preprocess({"common_crawl": corpus}, str(tmp_path / "data"), lengths, 2, 1, schedule="mpi", stage=stage)
    with pytest.raises(FileNotFoundError, match="run --stage preprocess"):
        preprocess({}, str(tmp_path / "data"), [64], 2, 1, stage="balance")


@pytest.fixture(scope="module")
def downloaded(tmp_path_factory, punkt_dir):
    """Corpora laid out as LDDL's downloaders write them (download_wikipedia: <outdir>/source/en/*.txt,
    download_open_webtext: <outdir>/source/*.txt), and the rows per length of a local preprocess (one
    dask worker) of the readers' own layout given directly: what the script's runs below must equal."""
    base = tmp_path_factory.mktemp("downloaded")
    write_corpus(str(base / "wikipedia" / "source" / "en"), documents=30, seed=1)
    write_corpus(str(base / "openwebtext" / "source"), documents=30, seed=2)
    direct = preprocess({"wikipedia": str(base / "wikipedia" / "source"),
                         "open_webtext": str(base / "openwebtext" / "source")}, str(base / "direct"), [128, 512],
                        num_shards=2, workers=1, log=lambda _: None)
    rows = {length: sum(json.load(open(os.path.join(folder, ".num_samples.json"))).values())
            for length, folder in zip((128, 512), direct)}
    assert all(rows.values()), rows
    return base, rows


@pytest.mark.skipif(subprocess.run(["which", "mpirun"], capture_output=True).returncode != 0,
                    reason="needs mpirun (the mpich package of requirements.txt provides it)")
def test_preprocess_script_on_mpi(tmp_path, punkt_dir, downloaded):
    """scripts/preprocess_pretrain_data.sh with 3 MPI ranks: the dask pipeline on dask-mpi for each
    length, then balancing in one process; the shards equal a local run's row count."""
    pytest.importorskip("dask_mpi", reason="dask-mpi is in requirements.txt")
    corpora, local_rows = downloaded
    env = dict(os.environ, NPROC="3", NUM_SHARDS="2", NLTK_DATA=str(punkt_dir))
    run = subprocess.run(["bash", "scripts/preprocess_pretrain_data.sh", str(corpora / "wikipedia"),
                          str(tmp_path / "none"), str(corpora / "openwebtext"), str(tmp_path / "data")], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "on MPI with 3 ranks" in run.stdout
    for length in (128, 512):
        folder = tmp_path / "data" / f"pretrain_lddl_{length}"
        assert output_complete(str(folder))
        assert not (tmp_path / "data" / f"pretrain_lddl_{length}.raw.tmp").exists()
        counts = json.load(open(folder / ".num_samples.json"))
        assert len(counts) == 2 and max(counts.values()) - min(counts.values()) <= 1
        assert sum(counts.values()) == local_rows[length]


def test_preprocess_script_reads_the_layouts_lddl_downloaders_write(tmp_path, punkt_dir, downloaded):
    """The script takes the downloaders' --outdir folders as the README says (on a local dask cluster
    of two workers), and the rows equal those of the readers' own layout given directly."""
    corpora, direct_rows = downloaded
    env = dict(os.environ, NPROC="2", NUM_SHARDS="2", NLTK_DATA=str(punkt_dir))
    run = subprocess.run(["bash", "scripts/preprocess_pretrain_data.sh", str(corpora / "wikipedia"),
                          str(tmp_path / "common_crawl"), str(corpora / "openwebtext"), str(tmp_path / "data")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "on a local dask cluster with 2 workers" in run.stdout
    for length in (128, 512):
        counts = json.load(open(tmp_path / "data" / f"pretrain_lddl_{length}" / ".num_samples.json"))
        assert sum(counts.values()) > 0
        assert sum(counts.values()) == direct_rows[length]
    (tmp_path / "empty" / "source").mkdir(parents=True)
    bad = run_python([sys.executable, "-m", "bart.data.preprocess", "--wikipedia", str(tmp_path / "empty"),
                      "--out", str(tmp_path / "x")], cwd=ROOT, timeout=300)  # forked: its line is the point
    assert bad.returncode != 0 and "download_wikipedia" in bad.stderr and "Traceback" not in bad.stderr
