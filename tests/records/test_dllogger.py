"""dllogger as the container installs it (NVIDIA dllogger v1.0.0, here its test double in tests/doubles):
the double is as strict as that tag, and the project's Logger works with it any number of times in one
process (the package's init raises on a second call), flushed per line, closed by close()."""
import atexit
import gc
import json
import os
import re
import sys
import weakref
from datetime import datetime

import pytest

from bart.records.dllogger_compat import Logger, read_dllogger
from tests.helpers import ROOT
from tests.helpers.corpus import SMALL_VOCAB_SIZE, write_shards
from tests.helpers.doubles import DOUBLES, use_doubles, with_doubles
from tests.helpers.forked import run_python
from tests.helpers.summaries import write_summarization_data

TIMESTAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}"


@pytest.fixture
def dllogger(monkeypatch):
    """A fresh import of the double: its global logger not initialised."""
    use_doubles(monkeypatch)
    import dllogger

    assert dllogger.__file__.startswith(DOUBLES)
    return dllogger


def _records(path) -> list[tuple]:
    """What a reader takes from a log: (type, step or metric, data or metadata) per line."""
    return [(r["type"], r["step"], r["data"]) if r["type"] == "LOG" else (r["type"], r["metric"], r["metadata"])
            for r in read_dllogger(str(path))]


def _open_paths() -> list[str]:
    return [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")]


def _retire(logger) -> None:
    """Close a package Logger's files made in a test and take back its exit hooks (at exit it would flush
    closed files)."""
    for backend in logger.backends:
        if hasattr(backend, "file"):
            backend.file.close()
            atexit.unregister(backend.file.close)
    atexit.unregister(logger.flush)


# (a) the double is the tag, unkind parts included


def test_double_names_its_tag_and_has_one_global_logger(dllogger, tmp_path):
    assert dllogger.__version__ == "1.0.0"
    assert "v1.0.0" in dllogger.__doc__ and "0540a43971f4a8a16693a9de9de73c1072020769" in dllogger.__doc__
    for use in (lambda: dllogger.log(1, {"a": 1}), lambda: dllogger.metadata("a", {}), dllogger.flush,
                lambda: dllogger.GLOBAL_LOGGER.backends):
        with pytest.raises(dllogger.DLLoggerNotInitialized, match="Initialize DLLogger with init"):
            use()
    dllogger.init(backends=[])
    dllogger.log(1, {"a": 1})  # no backends: nothing, and no error
    second = dllogger.JSONStreamBackend(dllogger.Verbosity.VERBOSE, str(tmp_path / "x.json"))
    with pytest.raises(dllogger.DLLLoggerAlreadyInitialized):
        dllogger.init(backends=[second])
    assert dllogger.GLOBAL_LOGGER.backends == []  # the first init stays
    _retire(dllogger.Logger([second]))
    with pytest.raises(TypeError):
        dllogger.Backend(dllogger.Verbosity.DEFAULT)  # abstract


def test_double_json_backend_buffers_until_flush_and_appends(dllogger, tmp_path):
    path = tmp_path / "log.json"
    path.write_text("DLLL old line\n")
    before = atexit._ncallbacks()
    logger = dllogger.Logger([dllogger.JSONStreamBackend(dllogger.Verbosity.VERBOSE, str(path))])  # "w": truncated
    assert atexit._ncallbacks() == before + 2  # the file's close and the logger's flush, at exit
    assert path.read_text() == ""
    logger.metadata("loss", {"unit": "nat"})
    logger.log(step=(1, 2), data={"loss": 2.5})
    assert path.read_text() == ""  # in the file's buffer only: a killed process loses it
    logger.flush()
    lines = path.read_text().splitlines()
    assert [list(json.loads(line[5:])) for line in lines] == [
        ["timestamp", "elapsedtime", "datetime", "type", "metric", "metadata"],
        ["timestamp", "datetime", "elapsedtime", "type", "step", "data"]]
    assert _records(path) == [("METADATA", "loss", {"unit": "nat"}), ("LOG", [1, 2], {"loss": 2.5})]
    record = json.loads(lines[1][5:])
    assert float(record["timestamp"]) == pytest.approx(datetime.fromisoformat(record["datetime"]).timestamp())
    assert 0 <= float(record["elapsedtime"]) < 60
    _retire(logger)
    logger = dllogger.Logger([dllogger.JSONStreamBackend(dllogger.Verbosity.VERBOSE, str(path), append=True)])
    logger.log(step=3, data={"loss": 2.0})
    assert len(path.read_text().splitlines()) == 2
    logger.flush()
    assert [r[1] for r in _records(path)] == ["loss", [1, 2], 3]
    _retire(logger)


def test_double_stdout_format_and_verbosity(dllogger, capsys):
    logger = dllogger.Logger([dllogger.StdOutBackend(dllogger.Verbosity.DEFAULT)])
    logger.metadata("loss", {"unit": "nat", "format": ":.2f"})
    logger.log(step=(), data={"x": 1}, verbosity=dllogger.Verbosity.VERBOSE)  # above the backend's: not shown
    logger.log(step=3, data={"loss": 2.34567, "lr": 0.001, "none": None}, verbosity=dllogger.Verbosity.DEFAULT)
    logger.log(step=(1, 2), data={}, verbosity=dllogger.Verbosity.OFF)
    _retire(logger)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(re.match(f"DLL {TIMESTAMP} - ", line) for line in lines), lines
    assert [line.split(" - ", 1)[1] for line in lines] == ["3 loss : 2.35 nat lr : 0.001  none : None ", "(1, 2) "]


# (b) the project's Logger on the package


@pytest.mark.parametrize("count", [2, 3])
def test_loggers_in_one_process_write_their_own_files(dllogger, tmp_path, count, capsys):
    paths = [tmp_path / f"run{i}.json" for i in range(count)]
    loggers = [Logger(str(path), stdout=(i == 0)) for i, path in enumerate(paths)]
    assert all(logger._dll is not None for logger in loggers)  # the package's path, not the fallback writer
    for logger, path in zip(loggers, paths):
        logger.metadata("loss", {"unit": "nat/token"})
        assert _records(path) == [("METADATA", "loss", {"unit": "nat/token"})]
    for step in range(1, 4):
        for i, (logger, path) in enumerate(zip(loggers, paths)):
            logger.log(step=step, data={"loss": 10.0 * i + step})
            # on disk as soon as logged, before any flush or close (as a reader sees it after a SIGKILL)
            assert _records(path)[-1] == ("LOG", step, {"loss": 10.0 * i + step})
    loggers[-1].log(step=(), data={"final_loss": 1.5})
    for logger in loggers:
        logger.close()
    for i, path in enumerate(paths):
        expected = [("METADATA", "loss", {"unit": "nat/token"})] + [("LOG", s, {"loss": 10.0 * i + s})
                                                                    for s in (1, 2, 3)]
        assert _records(path) == expected + ([("LOG", [], {"final_loss": 1.5})] if i == count - 1 else [])
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" - ", 1)[1] for line in out] == [f"{s} loss : {float(s)} nat/token" for s in (1, 2, 3)]


def test_the_global_logger_stays_the_users(dllogger, tmp_path):
    """Loggers never call dllogger.init: a user's init, before or after them, works and logs where they chose."""
    first = Logger(str(tmp_path / "a.json"), stdout=False)
    with pytest.raises(dllogger.DLLoggerNotInitialized):
        dllogger.log(1, {"x": 1})
    users = dllogger.JSONStreamBackend(dllogger.Verbosity.VERBOSE, str(tmp_path / "user.json"))
    dllogger.init([users])
    second = Logger(str(tmp_path / "b.json"), stdout=False)
    dllogger.log(step=1, data={"user": 1})
    dllogger.flush()
    first.log(step=1, data={"a": 1})
    second.log(step=1, data={"b": 1})
    first.close()
    second.close()
    _retire(dllogger.GLOBAL_LOGGER)
    assert [_records(tmp_path / n) for n in ("a.json", "b.json", "user.json")] == [
        [("LOG", 1, {"a": 1})], [("LOG", 1, {"b": 1})], [("LOG", 1, {"user": 1})]]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_close_closes_the_file_and_takes_back_the_exit_hooks(dllogger, tmp_path):
    path = str(tmp_path / "dllogger.json")
    logger = Logger(path, stdout=False)
    assert path in _open_paths()
    package_logger = weakref.ref(logger._dll)
    logger.log(step=1, data={"loss": 1.0})
    logger.close()
    assert path not in _open_paths()
    gc.collect()
    assert package_logger() is None  # its exit hook taken back: no flush of a closed file at exit, nothing kept
    logger.log(step=2, data={"loss": 2.0})  # after close: not in the file
    logger.close()  # twice: harmless
    assert _records(path) == [("LOG", 1, {"loss": 1.0})]


def test_both_writers_give_readers_the_same_lines(dllogger, tmp_path):
    """The package's JSON lines and the fallback writer's mean the same to read_dllogger, drop_records_after
    and utils/benchmark_table.py."""
    from bart.records.dllogger_compat import drop_records_after
    from utils.benchmark_table import training_row

    results = {}
    for use in (True, False):
        path = str(tmp_path / str(use) / "dllogger.json")  # the folder made by the Logger
        logger = Logger(path, stdout=False, use_dllogger=use)
        assert (logger._dll is not None) == use
        logger.metadata("seq/s", {"unit": "sequences/s"})
        for step in (5, 10):
            logger.log(step=step, data={"loss": 2.0 / step, "seq/s": 100.0 + step, "tokens/s": 1e4, "step_time_s": 0.1})
        logger.log(step=(), data={"final_loss": 0.2, "stopped_early": False, "note": "x"})
        logger.close()
        records = read_dllogger(path)
        for record in records:
            assert float(record["timestamp"]) == pytest.approx(datetime.fromisoformat(record["datetime"]).timestamp())
            assert 0 <= float(record["elapsedtime"]) < 60
        row = training_row(path)
        dropped = drop_records_after(path, 5)
        results[use] = ([{k: v for k, v in r.items() if k not in ("timestamp", "datetime", "elapsedtime")}
                         for r in records], row, dropped, _records(path))
    assert results[True] == results[False]
    assert len(results[True][0]) == 4 and results[True][2] == 1 and results[True][1]["seq/s"] == 110.0


def test_asking_for_the_package_without_it_fails_loudly(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "dllogger", None)  # not importable
    with pytest.raises(ImportError, match="use_dllogger=True, but no dllogger package"):
        Logger(str(tmp_path / "x.json"), use_dllogger=True)
    logger = Logger(str(tmp_path / "y.json"), stdout=False)  # the default falls back to the project's writer
    logger.log(step=1, data={"loss": 1.0})
    assert logger._dll is None and _records(tmp_path / "y.json") == [("LOG", 1, {"loss": 1.0})]
    logger.close()


# (c) the entry scripts with the package as the container installs it


def _run(script, *args):
    env = with_doubles(dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1"))
    out = run_python([sys.executable, script, *args], cwd=ROOT, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _training_records(path) -> tuple[list, list, dict]:
    records = _records(path)
    metadata = [r[1:] for r in records if r[0] == "METADATA"]
    steps = [r[1] for r in records if r[0] == "LOG" and "loss" in r[2]]
    summary = [r[2] for r in records if r[0] == "LOG" and r[1] == []]
    assert len(summary) == 1, records
    return metadata, steps, summary[0]


def test_pretrain_then_finetune_with_predict_on_the_package(tmp_path, small_tokenizer_dir):
    values = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    values.update(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, encoder_layers=1, decoder_layers=1,
                  max_position_embeddings=64, vocab_size=SMALL_VOCAB_SIZE)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(values))
    shards = os.path.dirname(write_shards(str(tmp_path / "shards"), [16])[0])
    common = ["--config_path", str(config), "--tokenizer", small_tokenizer_dir, "--max_steps", "2", "--log_freq", "1",
              "--train_batch_size", "4", "--max_source_length", "48", "--num_workers", "0", "--no_tensorboard"]
    out = _run("pretrain.py", *common, "--data_dir", shards, "--output_dir", str(tmp_path / "pre"))
    metadata, steps, summary = _training_records(tmp_path / "pre" / "dllogger.json")
    assert ("loss", {"unit": "nat/token"}) in metadata and steps == [1, 2] and summary["steps"] == 2
    # the package's stdout line (the fallback writer's has no unit)
    assert re.search(f"DLL {TIMESTAMP} - 2 .*loss : \\S+ nat/token", out.stdout), out.stdout[-2000:]

    data = write_summarization_data(str(tmp_path / "sum"), sizes=(("train", 8), ("val", 4), ("test", 4)))
    out = _run("finetune.py", *common, "--data_dir", data, "--init_checkpoint", str(tmp_path / "pre" / "_step2.ckpt"),
               "--max_target_length", "16", "--n_val", "0", "--do_predict", "--n_test", "3", "--eval_beams", "1",
               "--test_max_target_length", "8", "--output_dir", str(tmp_path / "ft"))
    metadata, steps, summary = _training_records(tmp_path / "ft" / "dllogger.json")
    assert ("loss", {"unit": "nat/token"}) in metadata and steps == [1, 2] and summary["steps"] == 2
    assert len((tmp_path / "ft" / "test_generations.txt").read_text().splitlines()) == 3
    assert "rouge1" in json.loads(out.stdout.strip().splitlines()[-1])["test"]


def test_doubles_helpers_leave_the_process_as_it_was():
    before = {n: m for n, m in sys.modules.items() if n.split(".")[0] == "dllogger"}
    path = list(sys.path)
    with pytest.MonkeyPatch.context() as mp:
        use_doubles(mp)
        import dllogger

        assert dllogger.__file__ == os.path.join(DOUBLES, "dllogger", "__init__.py")
        assert "dllogger.logger" in sys.modules
    assert {n: m for n, m in sys.modules.items() if n.split(".")[0] == "dllogger"} == before and sys.path == path
    env = {"PYTHONPATH": "/x", "A": "1"}
    assert with_doubles(env) == {"PYTHONPATH": DOUBLES + os.pathsep + "/x", "A": "1"} and env["PYTHONPATH"] == "/x"
    assert with_doubles({})["PYTHONPATH"] == DOUBLES
