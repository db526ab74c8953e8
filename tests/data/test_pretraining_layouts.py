"""The pretraining loader on another layout than the one that wrote its position (one process here; the runs on
other numbers of processes are in tests/training/test_resume_other_processes.py): from any position of a layout
of 4 sequences in 2 loader workers, a loader of 2 sequences x accumulation 2 (its streams in this process) gives
every update the samples, in the order, that the first gives it, across the end of the epoch, and its own
positions resume again on a third layout; a change of the global batch is one line."""
import pytest

from bart.data.noise import NoiseConfig
from bart.data.pretraining_dataset import build_pretraining_loader
from bart.tokenization.tokenization_bart import BartTokenizer


def _loader(folder, tokenizer, batch_size, workers, accumulation=1):
    return build_pretraining_loader(folder, tokenizer, batch_size=batch_size, max_source_length=24,
                                    noise_config=NoiseConfig(), seed=5, num_workers=workers, shuffle_buffer_size=8,
                                    accumulation=accumulation)


def _rows(batch) -> list:
    """Each sample of a micro-batch: its noised source and its target, unpadded (a filler row, without labels, is
    none)."""
    return [(source[: int(mask.sum())].tolist(), labels[labels != -100].tolist())
            for source, mask, labels in zip(batch["input_ids"], batch["attention_mask"], batch["labels"])
            if (labels != -100).any()]


def _updates(loader, epoch: int, accumulation: int, count: int, seeked: bool = False):
    """``count`` updates as the training loop takes them (an epoch that runs out: the next), each the samples of
    its micro-batches in order, and the loader's position after each."""
    def endless(epoch, seeked):
        while True:
            if not seeked:
                loader.set_epoch(epoch)
            seeked = False
            yield from loader
            epoch += 1
    batches, out = endless(epoch, seeked), []
    for _ in range(count):
        out.append(([row for _ in range(accumulation) for row in _rows(next(batches))], loader.position()))
    batches.close()
    return out


@pytest.fixture(scope="module")
def layouts(inputs):
    folder = inputs.balanced_shards(rows=(16, 16), count=4)
    tokenizer = BartTokenizer.from_pretrained(inputs.tokenizer)
    reference = _updates(_loader(folder, tokenizer, 4, 2), 1, 1, 40)  # epochs 1-3 and more, of 4 x 2 workers
    return folder, tokenizer, reference


def test_another_layout_of_the_same_global_batch_takes_the_same_samples(layouts):
    folder, tokenizer, reference = layouts
    epochs = [position["epoch"] for _, position in reference]
    print("epochs of the updates:", epochs, "samples:", [len(s) for s, _ in reference])
    assert epochs[0] == 1 and epochs[-1] >= 3  # past the ends of two epochs
    rows = [len(samples) for samples, _ in reference]
    assert min(rows) < 4  # short batches where a stream ends
    for k in (0, 7, epochs.index(2) - 1, epochs.index(2), 25):
        position = reference[k][1]
        resumed = _loader(folder, tokenizer, 2, 0, accumulation=2)
        resumed.set_epoch(position["epoch"])
        resumed.seek(resumed.position_of([position], "ckpt"))
        assert resumed.resume_said() == (
            "the data position carries over in the streams of the checkpoint's layout (1 process x 2 loader "
            "worker(s) x --train_batch_size 4 x --gradient_accumulation_steps 1): every update holds the samples it "
            "held there; rank 0 reads 2 of its streams in the main process (--num_workers 0)")
        taken = _updates(resumed, position["epoch"], 2, 8, seeked=True)
        assert [samples for samples, _ in taken] == [samples for samples, _ in reference[k + 1:k + 9]], k
        # its position resumes again, on a third layout (4 x 1 loader worker: the first's streams, each its own)
        again = _loader(folder, tokenizer, 4, 1)
        again.set_epoch(taken[-1][1]["epoch"])
        again.seek(again.position_of([taken[-1][1]], "ckpt"))
        more = _updates(again, taken[-1][1]["epoch"], 1, 4, seeked=True)
        assert [samples for samples, _ in more] == [samples for samples, _ in reference[k + 9:k + 13]], k
        assert more[-1][1]["skipped_rows"] == reference[k + 12][1]["skipped_rows"]


def test_the_same_layout_resumes_as_written(layouts):
    folder, tokenizer, reference = layouts
    position = reference[5][1]
    resumed = _loader(folder, tokenizer, 4, 2)
    resumed.set_epoch(position["epoch"])
    assert resumed.position_of([position], "ckpt") is position
    resumed.seek(position)
    assert resumed.resume_said() is None


def test_another_global_batch_is_one_line(layouts):
    folder, tokenizer, reference = layouts
    other = _loader(folder, tokenizer, 2, 0)
    other.set_epoch(1)
    with pytest.raises(ValueError) as refused:
        other.position_of([reference[3][1]], "out/_step4.ckpt")
    assert str(refused.value) == (
        "the saved data position does not fit this run's updates (workers 2 → 1, batch_size 4 → 2): pretraining's "
        "streams are dealt in updates of 4 sequences (1 process x --train_batch_size 4 x "
        "--gradient_accumulation_steps 1), this run's hold 2; resume with updates of 4 (any processes x "
        "--train_batch_size x --gradient_accumulation_steps), or start a new run from its weights with "
        "--init_checkpoint out/_step4.ckpt")
