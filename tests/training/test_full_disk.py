"""A full disk or quota while a run writes (ENOSPC/EDQUOT raised by the file object torch.save writes through,
by a real full tmpfs, or hidden by torch's zip writer), and a second Ctrl-C while the checkpoint the first
one asked for is written: one line naming the folder, its free space and the space needed (or the checkpoint
not written and the newest complete one), exit 2 / 130, nothing half-written left. Through the real entry
script (pretrain.py, tiny, in a subprocess) and at the layer that raises them."""
import errno
import io
import os
import shutil
import subprocess
import sys

import pytest
import torch

from bart.errors import EXIT_USER_ERROR
from bart.files import checkpoint_io
from bart.files.checkpoint_io import (
    StorageError,
    atomic_save,
    atomic_write_text,
    safe_load,
    storage_errno,
)
from tests.helpers import ROOT
from tests.helpers.faulty_runs import faulty, one_line, run

EXIT_INTERRUPTED = 130


@pytest.fixture(scope="module")
def setup(tmp_path_factory, inputs):
    argv = ["pretrain.py", "--config_path", inputs.config(), "--tokenizer", inputs.tokenizer,
            "--max_steps", "8", "--train_batch_size", "4", "--max_source_length", "48", "--num_workers", "0",
            "--log_freq", "1", "--learning_rate", "1e-3", "--seed", "7"]
    # the shards written as LDDL's balancer writes them
    return {"base": tmp_path_factory.mktemp("full_disk"), "argv": argv, "shards": inputs.balanced_shards((40, 40), 4)}


# -- case 4: full disk, quota, Ctrl-C inside a checkpoint write ---------------------------------------------

@pytest.mark.parametrize("kind, words", [("enospc", "no space left on device"), ("edquot", "disk quota exceeded")])
def test_full_disk_inside_torch_save_is_one_line_and_loses_nothing(setup, tmp_path, kind, words):
    """The file object torch.save writes the second checkpoint through fails after 64 KiB (torch's zip writer
    then raises RuntimeError 'unexpected pos' over the OSError): one line, exit 2, no traceback."""
    out = tmp_path / "run"
    done = run(faulty(f"{kind}:65536:2", setup["argv"] + ["--data_dir", setup["shards"], "--output_dir", str(out),
                                                            "--save_checkpoint_steps", "2"]))
    assert done.returncode == EXIT_USER_ERROR, done.stderr[-3000:]
    line = one_line(done.stderr, "pretrain.py: error:")
    assert f"could not write _step4.ckpt: {words} in {out} (" in line, line
    assert " free " in line and "needed for this file" in line and "64.0 KiB of it written" in line, line
    assert "the newest complete .ckpt there is _step2.ckpt" in line and "--resume_from_checkpoint auto" in line, line
    names = sorted(os.listdir(out))
    assert not [n for n in names if n.endswith((".partial", ".tmp"))] and "_step4.ckpt" not in names, names
    assert safe_load(str(out / "_step2.ckpt"))["global_step"] == 2  # the one before is whole


def test_full_disk_at_the_first_checkpoint_then_the_advised_command_finishes(setup, tmp_path):
    """The line advises "run the same command with --resume_from_checkpoint auto", and that command, run verbatim,
    finishes the run (a folder holding only the stopped run's log is that run starting again)."""
    out = tmp_path / "run"
    argv = setup["argv"] + ["--data_dir", setup["shards"], "--output_dir", str(out), "--save_checkpoint_steps", "2"]
    done = run(faulty("enospc:65536:1", argv))
    assert done.returncode == EXIT_USER_ERROR, done.stderr[-3000:]
    line = one_line(done.stderr, "pretrain.py: error:")
    assert "could not write _step2.ckpt" in line and "run the same command with --resume_from_checkpoint auto" in line
    assert not [n for n in os.listdir(out) if n.endswith(".ckpt")]
    done = run(argv + ["--resume_from_checkpoint", "auto"])  # the advised command, verbatim
    assert done.returncode == 0, done.stderr[-3000:]
    assert "holds the records of a run that stopped before its first checkpoint" in done.stdout, done.stdout[-3000:]
    assert safe_load(str(out / "_step8.ckpt"))["global_step"] == 8


def _mount_tmpfs_and_run(mount: str, size_kib: int, argv: list, copy_to: str):
    """argv in a mount namespace of its own with a tmpfs of size_kib at ``mount`` (unshare -rm: root, or a
    user namespace); what the run left there is copied to ``copy_to``. None where mounting is not allowed."""
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {mount}"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return None
    script = (f'mount -t tmpfs -o size={size_kib}k tmpfs {mount} || exit 99; "$@"; rc=$?; '
              f'cp -a {mount}/. {copy_to}; exit $rc')
    return subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", sys.executable, *argv], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1"),
                          capture_output=True, text=True, timeout=None)


@pytest.fixture(scope="module")
def sizes(setup):
    """The run's folder after its first checkpoint (update 2): the checkpoint's size and all its files' blocks,
    to size the tmpfs of both cases."""
    sized = setup["base"] / "sized"
    first = run(setup["argv"] + ["--data_dir", setup["shards"], "--output_dir", str(sized), "--max_steps", "2",
                                  "--save_checkpoint_steps", "2"])
    assert first.returncode == 0, first.stderr[-2000:]
    checkpoint = os.path.getsize(sized / "_step2.ckpt")
    files = sum(-(-os.path.getsize(os.path.join(d, n)) // 4096) * 4096 for d, _, ns in os.walk(sized) for n in ns)
    return checkpoint, files


@pytest.mark.parametrize("filled_by", ["checkpoint", "logs"])
def test_a_really_full_tmpfs_is_one_line_and_loses_nothing(setup, sizes, tmp_path, filled_by):
    """A real ENOSPC: the output folder on a tmpfs with room for the run's files and one checkpoint and a half
    (filled by the second checkpoint), or for the run's files and 48 KiB (filled by dllogger.json and
    TensorBoard's event file, whose writer thread meets it first): one line naming the folder and its
    free space, exit 2, no traceback of the OSError, torch's RuntimeError over it, or TensorBoard's thread."""
    checkpoint, files = sizes
    mount, copy = tmp_path / "mnt", tmp_path / "copy"
    mount.mkdir()
    copy.mkdir()
    run = setup["argv"] + ["--data_dir", setup["shards"], "--output_dir", str(mount / "run")]
    if filled_by == "checkpoint":
        size, run = (files + checkpoint // 2) // 1024 + 64, run + ["--save_checkpoint_steps", "2"]
    else:
        size, run = (files - checkpoint) // 1024 + 48, run + ["--max_steps", "100000"]
    done = _mount_tmpfs_and_run(str(mount), size, run, str(copy))
    if done is None:
        pytest.skip("mounting a tmpfs is not allowed here (no root, no user namespaces)")
    assert done.returncode == EXIT_USER_ERROR, done.stderr[-3000:]
    line = one_line(done.stderr, "pretrain.py: error:")
    names = sorted(os.listdir(copy / "run"))
    if filled_by == "logs":
        assert line.startswith(f"pretrain.py: error: no space left on device in {mount / 'run'} ("), line
        assert " free there" in line and "--resume_from_checkpoint auto" in line, line
        return
    assert f"could not write _step4.ckpt: no space left on device in {mount / 'run'} (" in line, line
    assert "the newest complete .ckpt there is _step2.ckpt" in line, line
    needed = line.split("about ")[1].split(" needed")[0]
    # the size of the last checkpoint there (its recorded paths differ in length from the sizing run's)
    assert needed == checkpoint_io.human_bytes(os.path.getsize(copy / "run" / "_step2.ckpt")), line
    assert "_step4.ckpt" not in names and not [n for n in names if n.endswith(".partial")], names
    assert safe_load(str(copy / "run" / "_step2.ckpt"))["global_step"] == 2


def test_a_second_ctrl_c_during_the_checkpoint_write_is_one_line(setup, tmp_path):
    """Ctrl-C between updates (after update 3), then Ctrl-C again while the checkpoint that first one asked
    for (_step3.ckpt) is written: that write stops, the periodic one before it (_step2.ckpt) stays whole. Old
    code: two tracebacks (KeyboardInterrupt, then torch's RuntimeError over it), exit 1."""
    out = tmp_path / "run"
    done = run(faulty("ctrlc_step:3", setup["argv"] + ["--data_dir", setup["shards"], "--output_dir", str(out),
                                                         "--save_checkpoint_steps", "2", "--max_steps", "100"]))
    assert done.returncode == EXIT_INTERRUPTED, done.stderr[-3000:]
    assert "SIGINT received" in done.stderr
    line = one_line(done.stderr, "pretrain.py: stopped:")
    assert f"interrupted (Ctrl-C) while writing {out / '_step3.ckpt'}: this write was stopped and its partial " \
           f"file removed" in line, line
    assert f"the newest complete .ckpt there is _step2.ckpt in {out}" in line, line
    names = sorted(os.listdir(out))
    assert not [n for n in names if n.endswith(".partial")] and "_step3.ckpt" not in names, names
    assert safe_load(str(out / "_step2.ckpt"))["global_step"] == 2


def test_a_ctrl_c_during_a_periodic_write_keeps_that_checkpoint(setup, tmp_path):
    """Ctrl-C while the periodic _step4.ckpt is written: that write goes on and is the checkpoint the stop
    names (not written a second time), exit 75."""
    out = tmp_path / "run"
    done = run(faulty("ctrlc:2", setup["argv"] + ["--data_dir", setup["shards"], "--output_dir", str(out),
                                                    "--save_checkpoint_steps", "2", "--max_steps", "100"]))
    assert done.returncode == 75, done.stderr[-3000:]
    assert f"stopped after update 4 and wrote {out / '_step4.ckpt'}" in done.stderr
    assert safe_load(str(out / "_step4.ckpt"))["global_step"] == 4


def test_torch_zip_writer_short_write_without_errno(tmp_path, monkeypatch):
    """torch.save given a path writes in C++ and says only 'unexpected pos': a full disk when the folder has
    less free space than the file needs, not otherwise; safetensors' Rust error carries the errno in text."""
    hidden = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 272576 vs 272468")
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(checkpoint_io.shutil, "disk_usage", lambda p: usage._replace(free=1000))
    assert storage_errno(hidden, str(tmp_path), needed=5000) == errno.ENOSPC
    assert storage_errno(hidden, str(tmp_path), needed=500) is None
    assert storage_errno(RuntimeError("unexpected pos 1 vs 2")) is None  # no folder, no size: not guessed
    rust = Exception('Error while serializing: IoError(Os { code: 122, kind: QuotaExceeded, message: "Disk quota '
                     'exceeded" })')
    assert storage_errno(rust) == errno.EDQUOT
    assert storage_errno(ValueError("no such key")) is None


def test_atomic_writes_of_text_and_checkpoints_on_a_full_disk(tmp_path, monkeypatch):
    """Every atomic write: StorageError naming the folder, the partial file removed, the old file kept."""
    (tmp_path / "best.json").write_text("old")

    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real_open = open
    monkeypatch.setattr(checkpoint_io, "open", lambda p, *a, **k: (real_open(p, *a, **k).close(), Full())[1],
                        raising=False)
    with pytest.raises(StorageError, match=rf"could not write best.json: no space left on device in {tmp_path} "):
        atomic_write_text(str(tmp_path / "best.json"), "new")
    assert sorted(os.listdir(tmp_path)) == ["best.json"] and (tmp_path / "best.json").read_text() == "old"
    monkeypatch.undo()

    def full_save(obj, f):
        f.write(b"x" * 1000)
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(checkpoint_io.torch, "save", full_save)
    with pytest.raises(StorageError, match="is on a read-only file system"):
        atomic_save(str(tmp_path / "w.ckpt"), {"w": torch.zeros(10)})
    assert sorted(os.listdir(tmp_path)) == ["best.json"]


def test_the_entry_scripts_name_the_folder_and_its_free_space_whatever_layer_fails(tmp_path, capsys, monkeypatch):
    """A full disk met outside the atomic writes (a log line, torch.save of another library): one line with
    the folder and its free space, exit 2, for an OSError and for torch's RuntimeError raised over it alike."""
    from bart.cli.exits import run_main

    def log_line():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "dllogger.json"))

    def zip_writer():
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as err:  # torch's zip writer raises its own error while the OSError is handled
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 31680 vs 31632") from err

    monkeypatch.setattr(sys, "argv", ["pretrain.py", "--output_dir", str(tmp_path)])
    for main in (log_line, zip_writer):
        with pytest.raises(SystemExit) as ended:
            run_main(main, "pretrain.py", restore_signals=True)  # this process goes on: keep its handlers
        assert ended.value.code == EXIT_USER_ERROR
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"pretrain.py: error: no space left on device in {tmp_path} ("), err
        assert " free there" in err and "--resume_from_checkpoint auto" in err, err


