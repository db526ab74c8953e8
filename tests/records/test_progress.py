"""bart.records.progress: plain lines (step/total, rate, elapsed, ETA, no control characters) when the stream
is not a terminal, a tqdm bar when it is; generation reports its progress."""
import io

import torch

from bart.records.progress import Progress, format_duration, track


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_lines_when_not_a_terminal():
    stream = io.StringIO()
    with Progress(20, "train", unit="step", stream=stream, interval_s=3600) as progress:
        for i in range(20):
            progress.update(1, loss=1.0 / (i + 1))
    text = stream.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and "\x1b" not in text
    assert lines[0] == "[train] 0/20 steps (0%) | starting"
    # every tenth of the total, and the end
    assert [line.split(" ")[1] for line in lines[1:]] == [f"{n}/20" for n in range(2, 21, 2)]
    assert all("steps/s" in line and "elapsed 0:00:0" in line and "ETA " in line for line in lines[1:])
    assert lines[-1].startswith("[train] 20/20 steps (100%)") and lines[-1].endswith("loss=0.05")


def test_time_interval_and_unknown_total():
    stream = io.StringIO()
    progress = Progress(None, "read", unit="file", stream=stream, interval_s=0)
    progress.update(3)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert lines[1].startswith("[read] 3 files | ") and "ETA" not in lines[1]


def test_bar_in_a_terminal_and_off():
    terminal = _Terminal()
    with Progress(5, "train", stream=terminal) as progress:
        progress.update(5)
    assert progress.mode == "bar" and "\r" in terminal.getvalue() and "5/5" in terminal.getvalue()
    silent = io.StringIO()
    with Progress(5, "train", stream=silent, enabled=False) as progress:
        progress.update(5)
    assert silent.getvalue() == ""


def test_environment_override(monkeypatch):
    monkeypatch.setenv("PROGRESS", "lines")
    terminal = _Terminal()
    with Progress(2, "x", stream=terminal) as progress:
        progress.update(2)
    assert progress.mode == "lines" and "\r" not in terminal.getvalue()


def test_format_duration_and_track():
    assert format_duration(3725) == "1:02:05" and format_duration(90000) == "1d 1:00:00"
    assert format_duration(float("nan")) == "?"
    stream = io.StringIO()
    assert list(track(range(4), "items", stream=stream, interval_s=3600)) == [0, 1, 2, 3]
    assert stream.getvalue().splitlines()[-1].startswith("[items] 4/4 items (100%)")


def test_generation_reports_progress(capsys, small_tokenizer_dir):
    from bart.evaluation import generate_texts
    from bart.modeling import BartForConditionalGeneration
    from bart.tokenization.tokenization_bart import BartTokenizer
    from tests.helpers.synthetic import tiny_config

    tokenizer = BartTokenizer.from_pretrained(small_tokenizer_dir)
    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))
    texts, _ = generate_texts(model, tokenizer, ["a river", "the city council", "a storm"], 2, 16, {"max_length": 6})
    assert len(texts) == 3
    err = capsys.readouterr().err
    assert "[generate] 3/3 examples (100%)" in err and "ETA" in err and "\r" not in err
