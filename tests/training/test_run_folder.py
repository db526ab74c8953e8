"""Nothing started over by accident, nothing resumed with a silent change: a new run into a folder that holds
another run's checkpoints is refused in one line naming --resume_from_checkpoint auto and --overwrite_output_dir
(which removes that run's files, and only those, first); a folder whose run stopped before its first checkpoint
(its log and records only) is that run starting again, its log kept; run_eval.py into a folder with an earlier
evaluation is refused unless --overwrite; a resume that reshapes the learning-rate schedule (--max_steps,
--warmup_steps, --lr_scheduler, --lr_end) is refused unless --allow_resume_change names it, and then the start
banner says what changes."""
import json
import os

import pytest

from tests.helpers import ROOT
from tests.helpers.corpus import micro_config
from tests.helpers.entry import run_entry
from tests.helpers.user_inputs import EV
from tests.helpers.user_inputs import argv as _argv

CONFIG = micro_config(dropout=0.0)


@pytest.fixture(scope="module")
def world(tmp_path_factory, inputs):
    return dict(inputs.finetuning(32, dropout=0.0), base=tmp_path_factory.mktemp("run_folder"))


def _error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith(("note:", "["))]


def _log_steps(out) -> list:
    from bart.records.dllogger_compat import read_dllogger
    return [r["step"] for r in read_dllogger(os.path.join(str(out), "dllogger.json"))
            if r["type"] == "LOG" and isinstance(r["step"], int) and "loss" in r["data"]]


def test_a_finished_runs_command_again_is_refused_and_overwrite_starts_over_cleanly(world, capsys):
    """Rules out: exit 0, final_step.ckpt and dllogger.json replaced, the first run's checkpoints left beside the new ones."""
    out = world["base"] / "finished"
    argv = world["argv"] + ["--output_dir", str(out), "--save_checkpoint_steps", "2"]
    assert run_entry("finetune.py", argv + ["--max_steps", "4"]) == 0
    (out / "notes.txt").write_text("the user's own file\n")
    before = {name: (out / name).read_bytes() for name in ("final_step.ckpt", "dllogger.json", "_step2.ckpt")}
    capsys.readouterr()
    assert run_entry("finetune.py", argv + ["--max_steps", "3"]) == 2
    err = _error_lines(capsys)
    assert len(err) == 1 and err[0].startswith("finetune.py: error: --output_dir"), err
    assert "--resume_from_checkpoint auto" in err[0] and "(_epoch0_step4.ckpt, step 4)" in err[0], err
    assert "--overwrite_output_dir" in err[0], err
    assert {name: (out / name).read_bytes() for name in before} == before  # nothing touched
    # --overwrite_output_dir: the earlier run's files go first, the user's stay
    assert run_entry("finetune.py", argv + ["--max_steps", "3", "--overwrite_output_dir"]) == 0
    said = capsys.readouterr().out
    assert "--overwrite_output_dir: removed the earlier run's" in said and str(out) in said, said
    ckpts = sorted(n for n in os.listdir(out) if n.endswith(".ckpt"))
    assert ckpts == ["_epoch0_step3.ckpt", "_step2.ckpt", "final_step.ckpt"], ckpts  # no _epoch0_step4.ckpt
    assert _log_steps(out) == [1, 2, 3]
    assert (out / "notes.txt").read_text() == "the user's own file\n"
    assert len(json.loads((out / "git_log.json").read_text())["starts"]) == 1  # the earlier run's record went with it


def test_overwrite_output_dir_keeps_the_weights_the_run_starts_from(world, capsys):
    out = world["base"] / "starts_from"
    argv = world["argv"] + ["--output_dir", str(out)]
    assert run_entry("finetune.py", argv + ["--max_steps", "1"]) == 0
    capsys.readouterr()
    again = [a if a != world["argv"][world["argv"].index("--init_checkpoint") + 1] else str(out / "final_step.ckpt")
             for a in argv]
    assert run_entry("finetune.py", again + ["--max_steps", "1", "--overwrite_output_dir"]) == 2
    err = _error_lines(capsys)
    assert len(err) == 1 and f"would remove {out / 'final_step.ckpt'}, which this run starts from" in err[0], err
    assert (out / "final_step.ckpt").is_file()


def test_overwrite_output_dir_with_a_resume_is_refused_at_parse_time(world, capsys):
    code = run_entry("finetune.py", world["argv"] + ["--output_dir", str(world["base"] / "both"), "--max_steps", "1",
                                                     "--overwrite_output_dir", "--resume_from_checkpoint", "auto"])
    err = _error_lines(capsys)
    assert code == 2 and len(err) == 1 and "--overwrite_output_dir with --resume_from_checkpoint auto" in err[0], err
    assert not (world["base"] / "both").exists()


def test_a_stopped_pretraining_run_typed_again_is_refused(tmp_path, inputs, capsys):
    """Rules out: exit 0, a new run from update 1 over the stopped one (its log and stop record gone)."""
    out = str(tmp_path / "run")
    argv = inputs.pretraining_argv()[1:] + ["--max_steps", "4", "--save_checkpoint_steps", "2", "--output_dir", out,
                                            "--no_tensorboard"]
    assert run_entry("pretrain.py", argv) == 0
    log = open(os.path.join(out, "dllogger.json"), "rb").read()
    capsys.readouterr()
    assert run_entry("pretrain.py", argv) == 2
    err = _error_lines(capsys)
    assert len(err) == 1 and "pretrain.py: error: --output_dir" in err[0] and "_step4.ckpt" in err[0], err
    assert open(os.path.join(out, "dllogger.json"), "rb").read() == log
    assert run_entry("pretrain.py", argv + ["--resume_from_checkpoint", "auto"]) == 0  # the fix the line names


def test_auto_with_only_a_finished_runs_weights_is_refused(world, capsys):
    """auto never starts over on top of checkpoints it cannot resume (final_step.ckpt, best-k)."""
    out = world["base"] / "weights_left"
    argv = world["argv"] + ["--output_dir", str(out)]
    assert run_entry("finetune.py", argv + ["--max_steps", "1"]) == 0
    os.remove(out / "_epoch0_step1.ckpt")
    capsys.readouterr()
    assert run_entry("finetune.py", argv + ["--max_steps", "1", "--resume_from_checkpoint", "auto"]) == 2
    err = _error_lines(capsys)
    assert len(err) == 1 and "final_step.ckpt" in err[0] and "no training checkpoint to go on from" in err[0], err
    assert (out / "final_step.ckpt").is_file()


# -- a resume that reshapes the learning-rate schedule --------------------------------------------------
def test_a_resume_with_another_max_steps_is_refused_unless_allowed_and_then_said(world, capsys):
    """Rules out: exit 0 and the linear decay restarted silently (1e-07 at update 8, 2.5e-04 at update 9)."""
    out = world["base"] / "longer"
    argv = world["argv"] + ["--output_dir", str(out), "--resume_from_checkpoint", "auto"]
    assert run_entry("finetune.py", argv + ["--max_steps", "4"]) == 0
    capsys.readouterr()
    assert run_entry("finetune.py", argv + ["--max_steps", "8"]) == 2
    err = _error_lines(capsys)
    assert len(err) == 1 and "max_steps: 4 in the checkpoint, 8 now (--max_steps / --max_epochs)" in err[0], err
    assert "--allow_resume_change max_steps resumes with the change" in err[0], err
    assert _log_steps(out) == [1, 2, 3, 4]
    assert run_entry("finetune.py", argv + ["--max_steps", "8", "--allow_resume_change", "max_steps"]) == 0
    said = capsys.readouterr().out
    banner = json.loads((out / "run_config.json").read_text())["run_banner"]
    assert "max_steps 4 -> 8" in banner["resumed with changes"], banner
    assert "next learning rate 0 -> 0.0005 (the new schedule at update 5)" in banner["resumed with changes"], banner
    assert "resumed with changes: max_steps 4 -> 8" in said
    from bart.records.dllogger_compat import read_dllogger
    rates = {r["step"]: r["data"]["learning_rate"] for r in read_dllogger(str(out / "dllogger.json"))
             if r["type"] == "LOG" and isinstance(r["step"], int) and "learning_rate" in r["data"]}
    assert _log_steps(out) == list(range(1, 9))
    # the log's rate after each update: the 8-update linear decay from update 5 on, not 4 updates' end (0)
    assert rates[4] == 0 and [rates[k] for k in (5, 6, 7)] == pytest.approx([1e-3 * (8 - k) / 8 for k in (5, 6, 7)])


@pytest.mark.parametrize("flag, value, name", [("--warmup_steps", "2", "warmup_steps"),
                                               ("--lr_scheduler", "cosine", "lr_scheduler")])
def test_a_resume_with_another_schedule_is_refused_unless_allowed(world, capsys, flag, value, name):
    out = world["base"] / f"schedule_{name}"
    argv = world["argv"] + ["--output_dir", str(out), "--resume_from_checkpoint", "auto"]
    assert run_entry("finetune.py", argv + ["--max_steps", "2"]) == 0
    capsys.readouterr()
    assert run_entry("finetune.py", argv + ["--max_steps", "2", flag, value]) == 2
    err = _error_lines(capsys)
    assert len(err) == 1 and f"--allow_resume_change {name} resumes with the change" in err[0], err
    assert run_entry("finetune.py", argv + ["--max_steps", "3", flag, value, "--allow_resume_change", name,
                                            "max_steps"]) == 0
    banner = json.loads((out / "run_config.json").read_text())["run_banner"]
    assert f"{name} " in banner["resumed with changes"] and "max_steps 2 -> 3" in banner["resumed with changes"]


def test_a_constant_schedule_resumes_with_more_steps(world, capsys):
    """max_steps shapes no constant schedule: training longer needs no flag."""
    out = world["base"] / "constant"
    argv = world["argv"] + ["--output_dir", str(out), "--resume_from_checkpoint", "auto", "--lr_scheduler", "constant"]
    assert run_entry("finetune.py", argv + ["--max_steps", "2"]) == 0
    assert run_entry("finetune.py", argv + ["--max_steps", "3"]) == 0
    assert _log_steps(out) == [1, 2, 3]


# -- run_eval.py into a folder with an earlier evaluation ----------------------------------------------
def test_run_eval_over_an_earlier_evaluation_is_refused_unless_overwrite(world, capsys):
    """Rules out: test_generations.txt and test_rouge.json replaced without a word (bart.export refuses the same case)."""
    save = world["base"] / "evaluated"
    weights = world["argv"][world["argv"].index("--init_checkpoint") + 1]
    argv = [weights, world["config"], world["data"], str(save), "--tokenizer", world["tokenizer"], "--bs", "4",
            "--max_source_length", "32", "--max_length", "8", "--num_beams", "1", "--n_obs", "2"]
    assert run_entry("run_eval.py", argv) == 0
    (save / "test_generations.txt").write_text("the first evaluation\n")
    capsys.readouterr()
    assert run_entry("run_eval.py", argv) == 2
    err = _error_lines(capsys)
    assert len(err) == 1 and err[0].startswith(f"run_eval.py: error: SAVE_PATH {save} holds an earlier evaluation "
                                               f"(test_generations.txt, test_rouge.json); pass --overwrite"), err
    assert (save / "test_generations.txt").read_text() == "the first evaluation\n"
    assert run_entry("run_eval.py", argv + ["--type_path", "val"]) == 0  # another split: nothing to replace
    assert run_entry("run_eval.py", argv + ["--overwrite"]) == 0
    assert (save / "test_generations.txt").read_text() != "the first evaluation\n"


def test_run_eval_into_a_training_folder_keeps_its_log(user_inputs, tmp_path, capsys):
    """run_eval.py without --json-summary into a fine-tuning folder appends its record to the training run's
    dllogger.json (and says so once), the training log kept; twice, two records."""
    from bart.records.dllogger_compat import read_dllogger
    out = tmp_path / "out"
    out.mkdir()
    training = 'DLLL {"timestamp": "1", "datetime": "x", "elapsedtime": 1.0, "type": "LOG", "step": 3, "data": {"loss": 2.5}}\n'
    (out / "dllogger.json").write_text(training)
    for again in ([], ["--overwrite"]):  # the second replaces the first's generations (refused without --overwrite)
        code = run_entry("run_eval.py", _argv(EV, user_inputs, str(out), model=user_inputs["weights"], data=user_inputs["data"]) + again)
        assert code == 0, capsys.readouterr().err[-3000:]
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[run_eval]") and "appended" in line]
    assert len(said) == 2 and str(out / "dllogger.json") in said[0], said
    records = [r for r in read_dllogger(str(out / "dllogger.json")) if r["type"] == "LOG"]
    assert records[0]["step"] == 3 and records[0]["data"] == {"loss": 2.5}  # the training log, kept
    assert len([r for r in records if r["step"] == [] and "rouge1" in r["data"]]) == 2


# -- inputs a run cannot use as given: each one clear line ------------------------------------------------
def test_finetuning_refuses_an_empty_line_as_run_eval_does(world, tmp_path, capsys):
    """Rules out: exit 0, the pair dropped (data_rows 31 for 32 lines)."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(world["data"], data)
    lines = (data / "train.target").read_text().splitlines()
    lines[6] = ""
    (data / "train.target").write_text("\n".join(lines) + "\n")
    argv = world["argv"] + ["--output_dir", str(tmp_path / "out"), "--max_steps", "1"]
    argv[argv.index("--data_dir") + 1] = str(data)
    assert run_entry("finetune.py", argv) == 2
    err = _error_lines(capsys)
    assert err == [f"finetune.py: error: {data / 'train.target'}:7 is empty; every line must hold one example (remove "
                   f"the line in both .source and .target)"], err
    assert not os.path.exists(tmp_path / "out" / "dllogger.json")


def test_a_huge_pad_vocab_multiple_is_refused_in_one_line(world, tmp_path, capsys):
    """Rules out: accepted silently, the vocabulary padded to 1,000,000 rows and the run 145x slower."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(dict(CONFIG, pad_vocab_to_multiple_of=1000000)))
    argv = world["argv"] + ["--output_dir", str(tmp_path / "out"), "--max_steps", "1"]
    argv[argv.index("--config_path") + 1] = str(config)
    assert run_entry("finetune.py", argv) == 2
    err = _error_lines(capsys)
    assert len(err) == 1 and "'pad_vocab_to_multiple_of' must be a power of two from 1 (no padding) to 1024, got " \
                              "1000000" in err[0], err


def test_a_tokenizer_json_file_names_its_folder(world, tmp_path, capsys):
    """Rules out: a tokenizer.json file failed, and the fix suggested building a folder named tokenizer.json."""
    argv = world["argv"] + ["--output_dir", str(tmp_path / "out"), "--max_steps", "1"]
    at = argv.index("--tokenizer") + 1
    argv[at] = os.path.join(world["tokenizer"], "tokenizer.json")
    assert run_entry("finetune.py", argv) == 0
    assert f"is a file of the tokenizer folder {world['tokenizer']}: using that folder" in capsys.readouterr().err
    missing = tmp_path / "tok"
    argv[at] = str(missing / "tokenizer.json")
    argv[argv.index("--output_dir") + 1] = str(tmp_path / "out2")
    assert run_entry("finetune.py", argv) == 2
    err = _error_lines(capsys)
    assert len(err) == 1 and f"build_tokenizer {missing}` and pass --tokenizer {missing}," in err[0], err


def test_a_shard_whose_sentences_are_int64_names_the_type(tmp_path, small_tokenizer_dir, capsys):
    """Rules out: the line named the columns, not the type that is wrong."""
    import glob

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.helpers.inputs import Inputs

    # its own inputs (in tmp_path): it rewrites a shard
    argv = Inputs(tmp_path, small_tokenizer_dir).pretraining_argv()[1:] + ["--max_steps", "1", "--output_dir",
                                                                          str(tmp_path / "out"), "--no_tensorboard"]
    shard = sorted(glob.glob(os.path.join(argv[argv.index("--data_dir") + 1], "**", "*.parquet"), recursive=True))[0]
    rows = pq.read_table(shard).num_rows
    pq.write_table(pa.table({"sentences": pa.array(range(rows), pa.int64())}), shard)
    assert run_entry("pretrain.py", argv) == 2
    err = _error_lines(capsys)
    assert len(err) == 1 and f"{shard}: its column 'sentences' is int64, not string" in err[0], err


def test_preprocessing_an_empty_corpus_folder_is_one_line_exit_2_and_leaves_nothing(tmp_path):
    """Rules out: exit 1 (2 is documented) and an empty data folder left behind."""
    import subprocess
    import sys

    root = ROOT
    corpus, data = tmp_path / "common_crawl", tmp_path / "data"
    corpus.mkdir()
    env = dict(os.environ, PYTHON=sys.executable, NPROC="1")
    run = subprocess.run(["bash", os.path.join(root, "scripts", "preprocess_pretrain_data.sh"), str(tmp_path / "no_wiki"),
                          str(corpus), str(tmp_path / "no_owt"), str(data)], env=env, capture_output=True, text=True,
                         timeout=None)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [f"preprocess: --common_crawl {corpus}: no *.txt in {corpus / 'source'} "
                                               f"(what LDDL's downloader writes) nor in {corpus}; did the download "
                                               f"finish?"], run.stderr
    assert not data.exists()


def test_the_launchers_closing_line_gives_the_command_that_resumes(world):
    """Rules out: "run the same command again to resume", which a new run into the folder would now be refused for."""
    import shlex
    import signal

    from bart.cli.parsing import parse_command_line
    from utils.launch import _said, resume_command

    folder = world["base"] / "out dir"
    argv = ["--nproc_per_node", "2", "finetune.py", *world["argv"], "--output_dir", str(folder), "--max_steps", "4",
            "--overwrite_output_dir", "--resume_from_checkpoint", "old.ckpt"]
    head = "launch: SIGTERM received: the processes stopped (exit codes 75, 75): "
    assert _said(signal.SIGTERM, [75, 75], 75, argv, since=0.0) == (
        f"{head}no checkpoint was written (it stopped before the first): to start the run again, run "
        f"{resume_command(argv)}")  # not: "a checkpoint was written", where none was
    folder.mkdir()
    (folder / "_step2.ckpt").write_bytes(b"")
    (folder / "_step10.ckpt").write_bytes(b"")
    assert _said(signal.SIGTERM, [75, 75], 75, argv, since=0.0) == \
        f"{head}a checkpoint was written (_step10.ckpt): to resume, run {resume_command(argv)}"
    line = _said(signal.SIGTERM, [75, 75], 75, argv, since=os.path.getmtime(folder / "_step10.ckpt") + 1)
    assert line == (f"{head}no new checkpoint was written (the newest is _step10.ckpt, from before): to resume from "
                    f"it, run {resume_command(argv)}"), line
    words = shlex.split(resume_command(argv))
    assert words[1:3] == ["-m", "utils.launch"] and words[-2:] == ["--resume_from_checkpoint", "auto"]
    assert "--overwrite_output_dir" not in words and "old.ckpt" not in words and str(folder) in words
    settings = parse_command_line("finetune.py", words[words.index("finetune.py") + 1:])  # accepted as it is
    assert settings.checkpoints.resume_from_checkpoint == "auto" and settings.checkpoints.output_dir == str(folder)


# -- a run that stopped before its first checkpoint starts again --------------------------------------------
def _attempt_marks(out) -> list:
    from bart.records.dllogger_compat import read_dllogger
    return [r["data"]["attempt"] for r in read_dllogger(os.path.join(str(out), "dllogger.json"))
            if r["type"] == "LOG" and "attempt" in r["data"]]


def test_the_advised_command_after_a_failure_before_the_first_checkpoint_starts_the_run_again(world, capsys):
    """Rules out: the line advised leaving --wandb_project out, and that command was refused ("holds another run's files
    (dllogger.json)"): a log with no checkpoint made the folder another run's."""
    out = world["base"] / "no_wandb"
    argv = world["argv"] + ["--output_dir", str(out), "--max_steps", "2"]
    assert run_entry("finetune.py", argv + ["--wandb_project", "p"]) == 2
    err = _error_lines(capsys)
    assert len(err) == 1 and "wandb" in err[0] and "leave the flag out" in err[0], err
    assert run_entry("finetune.py", argv) == 0  # the advised command, verbatim
    said = capsys.readouterr().out
    assert f"[checkpoint] {out} holds the records of a run that stopped before its first checkpoint" in said, said
    assert _log_steps(out) == [1, 2] and _attempt_marks(out) == [2]


@pytest.mark.parametrize("resume", [[], ["--resume_from_checkpoint", "auto"]])
def test_a_run_killed_before_its_first_checkpoint_starts_again_and_keeps_its_log(world, capsys, resume):
    """A folder with the log, run records, tokenizer and a checkpoint write cut off, but no checkpoint: the same
    command (with auto or without a resume flag) starts it again from update 1, the log appended with the new
    attempt marked, and it ends as the uninterrupted run (same losses)."""
    plain = world["base"] / "uninterrupted_before_ckpt"
    argv = world["argv"] + ["--max_steps", "3"]
    if not plain.exists():
        assert run_entry("finetune.py", argv + ["--output_dir", str(plain)]) == 0
    out = world["base"] / f"killed_before_ckpt{len(resume)}"
    assert run_entry("finetune.py", argv + ["--output_dir", str(out)]) == 0
    # what a kill at update 2 leaves: no checkpoint, a cut-off write, the log up to update 2 and a cut line
    for name in os.listdir(out):
        if name.endswith(".ckpt") or name.startswith("best_"):
            os.remove(out / name)
    (out / ".tmp-x1y2z3.partial").write_bytes(b"cut off")  # atomic_save's temporary file
    lines = (out / "dllogger.json").read_text().splitlines(keepends=True)
    kept = [line for line in lines if '"step": 3' not in line]
    (out / "dllogger.json").write_text("".join(kept) + 'DLLL {"step": 3, "da')
    capsys.readouterr()
    assert run_entry("finetune.py", argv + ["--output_dir", str(out)] + resume) == 0
    assert _log_steps(out) == [1, 2, 1, 2, 3] and _attempt_marks(out) == [2]
    assert not [n for n in os.listdir(out) if ".partial" in n]

    def losses(folder):
        from bart.records.dllogger_compat import read_dllogger
        records = [r for r in read_dllogger(str(folder / "dllogger.json")) if r["type"] == "LOG"]
        start = max(i for i, r in enumerate(records) if "attempt" in r["data"]) if folder == out else 0
        return [r["data"]["loss"] for r in records[start:] if "loss" in r["data"]]
    assert losses(out) == losses(plain)
    if not resume:  # now it has checkpoints: the same command without a resume flag is refused again
        assert run_entry("finetune.py", argv + ["--output_dir", str(out)]) == 2


def test_a_run_config_replayed_never_removes_its_run(tmp_path, inputs, capsys):
    """--config_file RUN/run_config.json of a run started with --overwrite_output_dir does not replay it (the file's
    one-shot actions are not replayed): RUN's files (its checkpoints, log and the very file given) are not removed
    for a new run, and adding --resume_from_checkpoint auto resumes it."""

    out = tmp_path / "run"
    argv = inputs.pretraining_argv()[1:] + ["--max_steps", "2", "--save_checkpoint_steps", "2",
                                            "--output_dir", str(out), "--no_tensorboard"]
    assert run_entry("pretrain.py", argv + ["--overwrite_output_dir"]) == 0
    assert json.loads((out / "run_config.json").read_text())["overwrite_output_dir"] is True  # what that start did
    files = {name: (out / name).read_bytes() for name in os.listdir(out)}
    capsys.readouterr()
    config = str(out / "run_config.json")
    assert run_entry("pretrain.py", ["--config_file", config]) == 2
    said = capsys.readouterr()
    assert f"--config_file {config}: overwrite_output_dir true is what that run's start did; not replayed" in said.out
    err = [line for line in said.err.strip().splitlines() if not line.startswith(("note:", "["))]
    assert len(err) == 1 and "add --resume_from_checkpoint auto to go on" in err[0], err
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == files  # nothing removed or rewritten
    assert run_entry("pretrain.py", ["--config_file", config, "--max_steps", "3", "--resume_from_checkpoint",
                                     "auto", "--allow_resume_change", "max_steps"]) == 0  # the line's fix
    assert set(files) <= set(os.listdir(out)) and _log_steps(out) == [1, 2, 3]


def test_a_folder_this_process_may_not_write_names_what_to_check(world, tmp_path, capsys):
    """An immutable (chattr +i) or foreign --output_dir: one line naming the path and what to check. Rules out: only
    "[Errno 1] Operation not permitted: '.../run.lock'"."""
    import shutil
    import subprocess

    out = tmp_path / "immutable"
    out.mkdir()
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(out)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here (not root, or the file system has no such attribute)")
    try:
        code = run_entry("finetune.py", world["argv"] + ["--output_dir", str(out), "--max_steps", "1"])
    finally:
        subprocess.run(["chattr", "-i", str(out)], check=True)
    err = _error_lines(capsys)
    assert code == 2 and len(err) == 1, err
    assert f"this process may not use {out / 'run.lock'}: check the owner, mode and attributes of it and its " \
           f"folder (ls -ld, lsattr -d), or choose another path" in err[0], err


def test_overwrite_output_dir_removes_the_runs_best_model_folder_and_nothing_of_the_users(tmp_path):
    """finetune.py's best_tfmr/ is the run's (not: left behind by --overwrite_output_dir, looking current after a new
    run that does not validate); a folder of the user's stays."""
    from bart.training.checkpoint import remove_earlier_run

    (tmp_path / "best_tfmr").mkdir()
    (tmp_path / "best_tfmr" / "config.json").write_text("{}")
    (tmp_path / "dllogger.json").write_text('DLLL {"step": 1}\n')
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's")
    removed = remove_earlier_run(str(tmp_path))
    assert sorted(os.path.basename(p) for p in removed) == ["best_tfmr", "dllogger.json"]
    assert sorted(os.listdir(tmp_path)) == ["mine"]
