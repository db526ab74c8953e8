"""Every script checks every value it is given before it starts anything, and honours RESULTS_DIR.

Each script runs in a sandbox: a folder holding links to the checkout's scripts/ and configs/, small data
folders, and a bin/ first on PATH whose python3 (PYTHON), curl, mpirun, srun, LDDL downloaders and
nvidia-smi (no GPU) are stubs that record each call. A refused value must give exit code 2, exactly one
line on stderr naming the value (and its place), and no recorded call: nothing was launched. The accepted
runs (RESULTS_DIR, OUTPUT_DIR) read the folders the scripts passed to the stub Python.
"""
import os
import re
import subprocess

import pytest

from tests.helpers import ROOT

# the stub Python: records its call; a pretrain.py/finetune.py run leaves its last checkpoint as the real ones do
PYTHON_STUB = r'''#!/bin/bash
printf '%s\n' "python $*" >> "$STUB_LOG"
# run_summarization.sh's EVAL_CHECKPOINT=best asks for the run's best checkpoint
if [ "$1 $2 $3" = "-m bart.training.checkpoint best" ]; then echo "$4/best_rouge2_step7.ckpt"; exit 0; fi
out=""; steps=""
while [ $# -gt 0 ]; do case "$1" in --output_dir) out=$2; shift ;; --max_steps) steps=$2; shift ;; esac; shift; done
if [ -n "$out" ] && [ -n "$steps" ]; then mkdir -p "$out"; touch "$out/_step$steps.ckpt"; fi
exit 0
'''
RECORDER = '''#!/bin/bash
printf '%s\\n' "$(basename "$0") $*" >> "$STUB_LOG"
exit 0
'''
# srun runs its command (the SLURM scripts' checks run in a task), after its own options
SRUN = r'''#!/bin/bash
printf '%s\n' "srun $*" >> "$STUB_LOG"
while [[ "${1:-}" == --* ]]; do case "$1" in *=*) shift ;; *) shift 2 ;; esac; done
exec "$@"
'''
SCONTROL = '''#!/bin/bash
[ "$1 $2" = "show hostnames" ] && echo node1
exit 0
'''
SUMMARIZATION = ["data/cnn_dm/", "data/nvidia_pretrained/bart_large/", "configs/config.json", "1", "1.25e-4", "40", "1",
                 "bf16", "2000", "50", "1024", "142", "4", "128", "128", "true"]
EVALUATION = ["m.ckpt", "8", "1", "bf16", "4", "1024", "142", "data/cnn_dm", "configs/config.json", "true"]
PRETRAINING = ["2", "2", "5e-3", "4e-3", "fp32", "true", "1", "1", "1", "2", "2", "1", "1", "1", "configs/config.json"]
INFERENCE = ["2", "2", "48", "12", "m.ckpt", "data/cnn_dm", "configs/config.json"]
TRAINING = ["8", "48", "16", "data/cnn_dm"]
SLURM = {"SLURM_JOB_NODELIST": "node1", "SLURM_NNODES": "1", "SLURM_JOB_ID": "77"}


class Sandbox:
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.root = tmp_path / "repo"
        self.root.mkdir()
        for name in ("scripts", "configs"):
            os.symlink(os.path.join(ROOT, name), self.root / name)
        data = self.root / "data"
        (data / "cnn_dm").mkdir(parents=True)
        for split in ("train", "val", "test"):
            (data / "cnn_dm" / f"{split}.source").write_text("A source.\n")
            (data / "cnn_dm" / f"{split}.target").write_text("A target.\n")
        for folder in ("nvidia_pretrained/bart_large", "pretrain_lddl_128", "pretrain_lddl_512", "wikipedia"):
            (data / folder).mkdir(parents=True)
        (self.root / "m.ckpt").write_bytes(b"")
        (self.root / "a_file").write_text("not a folder\n")
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        tools = {"python3": PYTHON_STUB, "srun": SRUN, "scontrol": SCONTROL, "nvidia-smi": "#!/bin/bash\nexit 0\n"}
        tools.update({name: RECORDER for name in ("curl", "mpirun", "download_wikipedia", "download_common_crawl",
                                                  "download_open_webtext")})
        for name, text in tools.items():
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        self.log = tmp_path / "calls.log"

    def run(self, args, env=None, command=None):
        base = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.tmp), "LANG": "C.UTF-8",
                "PYTHON": str(self.bin / "python3"), "STUB_LOG": str(self.log)}
        base.update(env or {})
        base = {k: v for k, v in base.items() if v is not None}
        if self.log.exists():
            self.log.unlink()
        argv = ["bash", "-c", command] if command else ["bash", *args]
        return subprocess.run(argv, cwd=self.root, env=base, capture_output=True, text=True, timeout=None)

    def calls(self):
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def sandbox(tmp_path):
    return Sandbox(tmp_path)


def _at(values, position, value):
    values = list(values)
    values[position - 1] = value
    return values


def _refusals(sandbox, script, cases):
    """(args, env, expected text) cases that must each be refused; the problems found, one line each."""
    problems = []
    for args, env, expected in cases:
        run = sandbox.run([f"scripts/{script}", *args], env)
        lines = run.stderr.strip().splitlines()
        if run.returncode != 2 or len(lines) != 1 or expected not in run.stderr or sandbox.calls():
            problems.append(f"{script} {' '.join(args)} {env}: exit {run.returncode}, stderr {run.stderr.strip()!r}, "
                            f"wanted {expected!r}, launched {sandbox.calls()}")
    return problems


def _accepted(sandbox, script, args, env=None):
    """The valid values pass the checks (CHECK_ONLY=1: nothing started): the refusals are the value's."""
    run = sandbox.run([f"scripts/{script}", *args], dict(env or {}, CHECK_ONLY="1"))
    assert run.returncode == 0 and not sandbox.calls(), (script, run.stderr)


def test_the_seeds_15_value_fine_tuning_command_is_refused_before_training(sandbox):
    """The printed command with 15 values (EVAL_BS 128, PRED_BS 'true'): one line naming PRED_BS, its place and
    the likely cause, exit 2, and finetune.py never started (before: the whole fine-tune, then run_eval.py failed)."""
    run = sandbox.run(["scripts/run_summarization.sh", "data/cnn_dm/", "data/nvidia_pretrained/bart_large/",
                       "configs/config.json", "8", "1.25e-4", "40", "1", "bf16", "2000", "50", "1024", "142", "4",
                       "128", "true"])
    assert run.returncode == 2 and not sandbox.calls()
    assert run.stderr == ("run_summarization.sh: PRED_BS (15th) 'true' is not a whole number >= 1; the 16th value is "
                          "PRELN: did you leave out PRED_BS (or a value before it)?\n")


def test_run_summarization_checks_every_value(sandbox):
    _accepted(sandbox, "run_summarization.sh", SUMMARIZATION)
    positional = [(1, "nodata", "DATA_DIR (1st): nodata not found"),
                  (2, "./no_ckpt", "CKPT_PATH (2nd): ./no_ckpt does not exist"),
                  (3, "no.json", "CONFIG_PATH (3rd): no.json not found"),
                  (4, "0", "NUM_GPU (4th) '0' is not a whole number >= 1"),
                  (5, "-1e-4", "LR (5th) '-1e-4' is not a positive number"),
                  (6, "4.5", "BS (6th) '4.5' is not a whole number >= 1"),
                  (7, "x", "ACCUM (7th) 'x' is not a whole number >= 1"),
                  (8, "fp4", "PREC (8th) 'fp4' is not a precision: fp8, fp16, bf16, tf32 or fp32"),
                  (9, "2k", "TRAIN_STEPS (9th) '2k'"),
                  (10, "-1", "WARMUP_STEPS (10th) '-1' is not a whole number >= 0"),
                  (11, "0", "MAX_SOURCE_LEN (11th) '0'"),
                  (12, "1e2", "MAX_TARGET_LEN (12th) '1e2'"),
                  (13, "four", "EVAL_BEAMS (13th) 'four'"),
                  (14, "1.5", "EVAL_BS (14th) '1.5'"),
                  (15, "many", "PRED_BS (15th) 'many'"),
                  (16, "yes", "PRELN (16th) 'yes' is not true or false")]
    cases = [(_at(SUMMARIZATION, pos, value), {}, text) for pos, value, text in positional]
    cases += [(SUMMARIZATION + ["stray"], {}, "'stray' is a value beyond the 16"),
              (SUMMARIZATION, {"SEED": "-1"}, "SEED (environment) '-1' is not a whole number >= 0"),
              (SUMMARIZATION, {"N_VAL": "some"}, "N_VAL (environment) 'some'"),
              (SUMMARIZATION, {"VAL_CHECK_INTERVAL": "-2"}, "VAL_CHECK_INTERVAL (environment) '-2'"),
              (SUMMARIZATION, {"TOKENIZER": "./no_tokenizer"}, "TOKENIZER (environment): ./no_tokenizer does not exist"),
              (SUMMARIZATION, {"OUTPUT_DIR": "a_file"}, "OUTPUT_DIR (environment): a_file is a file"),
              (SUMMARIZATION, {"RESULTS_DIR": "a_file"}, "RESULTS_DIR (environment): a_file is a file"),
              (SUMMARIZATION, {"NNODES": "0"}, "NNODES (environment) '0'"),
              (SUMMARIZATION, {"NNODES": "2", "NODE_RANK": "2"}, "NODE_RANK (environment) '2' is not below NNODES"),
              (SUMMARIZATION, {"MASTER_PORT": "70000"}, "MASTER_PORT (environment) '70000' is not a TCP port"),
              (SUMMARIZATION, {"CPU_PROCESSES": "two"}, "CPU_PROCESSES (environment) 'two'"),
              (SUMMARIZATION, {"CHECK_ONLY": "yes"}, "CHECK_ONLY (environment) 'yes' is not 0 or 1"),
              (SUMMARIZATION, {"PYTHON": "/nonexistent/python"}, "PYTHON (environment, default python3) '/nonexistent/python'")]
    problems = _refusals(sandbox, "run_summarization.sh", cases)
    (sandbox.root / "data" / "cnn_dm" / "val.target").unlink()
    problems += _refusals(sandbox, "run_summarization.sh",
                          [(SUMMARIZATION, {}, "DATA_DIR: data/cnn_dm//val.target not found")])
    assert not problems, "\n".join(problems)


def test_run_eval_summarization_checks_every_value(sandbox):
    _accepted(sandbox, "run_eval_summarization.sh", EVALUATION)
    positional = [(1, "no.ckpt", "INIT_CKPT (1st): no.ckpt does not exist"),
                  (2, "true", "PRED_BS (2nd) 'true' is not a whole number >= 1"),
                  (3, "0", "NUM_GPU (3rd) '0'"),
                  (4, "half", "PRECISION (4th) 'half' is not a precision"),
                  (5, "0", "EVAL_BEAMS (5th) '0'"),
                  (6, "big", "MAX_SOURCE_LEN (6th) 'big'"),
                  (7, "-3", "MAX_TARGET_LEN (7th) '-3'"),
                  (8, "nodata", "DATA_DIR (8th): nodata not found"),
                  (9, "no.json", "CONFIG_PATH (9th): no.json not found"),
                  (10, "yes", "PRELN (10th) 'yes' is not true, false or auto")]
    cases = [(_at(EVALUATION, pos, value), {}, text) for pos, value, text in positional]
    cases += [(EVALUATION + ["stray"], {}, "'stray' is a value beyond the 10"),
              (["m.ckpt", "8", "fp32", "4", "1024", "142", "data/cnn_dm", "configs/config.json", "true", "true"], {},
               "'fp32' in the NUM_GPU place (3rd) is a precision, but with 10 values"),
              (EVALUATION, {"TYPE_PATH": "dev"}, "DATA_DIR: data/cnn_dm/dev.source not found"),
              (EVALUATION, {"N_OBS": "0"}, "N_OBS (environment) '0' is not a whole number >= 1"),
              (EVALUATION, {"RESULTS_DIR": "a_file"}, "RESULTS_DIR (environment): a_file is a file"),
              (EVALUATION, {"MASTER_ADDR": "two words"}, "MASTER_ADDR (environment) 'two words' is not one word")]
    problems = _refusals(sandbox, "run_eval_summarization.sh", cases)
    problems += _refusals(sandbox, "run_summarization_eval.sh", [(_at(EVALUATION, 2, "x"), {}, "PRED_BS (2nd) 'x'")])
    assert not problems, "\n".join(problems)


def test_presets_refuse_what_the_scripts_could_not_read(sandbox):
    """A preset's values are split at spaces by the shell: a CKPT_PATH with a space would shift every value after
    it; an empty output would run the script on its defaults. The preset says what is wrong (one line) and the
    script stops on its marker."""
    problems = []
    for preset_file, preset, script, env, expected in (
            ("cnn_dm_params.sh", "dgxa100_8gpu_bf16", "run_summarization.sh", "CKPT_PATH='my ckpt'",
             "dgxa100_8gpu_bf16: CKPT_PATH (environment) 'my ckpt' holds spaces"),
            ("cnn_dm_params.sh", "dgxa100_8gpu_bf16_eval", "run_eval_summarization.sh m.ckpt", "PRELN=maybe",
             "dgxa100_8gpu_bf16_eval: PRELN (environment) 'maybe' is not true or false"),
            ("xsum_params.sh", "dgxa100_8gpu_bf16", "run_summarization.sh", "CONFIG_PATH='configs/my config.json'",
             "dgxa100_8gpu_bf16: CONFIG_PATH (environment) 'configs/my config.json' holds spaces"),
            ("xsum_params.sh", "dgxa100_8gpu_bf16_eval", "run_eval_summarization.sh m.ckpt", "PRELN=1",
             "dgxa100_8gpu_bf16_eval: PRELN (environment) '1' is not true or false")):
        command = f"export {env}; bash scripts/{script} $(source scripts/params/{preset_file} && {preset})"
        run = sandbox.run(None, command=command)
        if run.returncode != 2 or len(run.stderr.strip().splitlines()) != 1 or expected not in run.stderr or \
                sandbox.calls():
            problems.append(f"{command}: exit {run.returncode}, stderr {run.stderr!r}, launched {sandbox.calls()}")
    assert not problems, "\n".join(problems)
    # the presets' own values pass (the eval presets leave PRELN to the checkpoint: auto)
    run = sandbox.run(None, command="bash scripts/run_eval_summarization.sh m.ckpt "
                                    "$(source scripts/params/cnn_dm_params.sh && dgxa100_8gpu_bf16_eval)")
    assert run.returncode == 0 and "--pre_ln" not in "\n".join(sandbox.calls()), run.stderr


def test_run_pretraining_checks_every_value(sandbox):
    _accepted(sandbox, "run_pretraining.sh", PRETRAINING)
    positional = [(1, "0", "train_batch_size_phase1 (1st) '0'"), (3, "5e-3x", "learning_rate_phase1 (3rd) '5e-3x'"),
                  (4, "0.0", "learning_rate_phase2 (4th) '0.0' is not a positive number"),
                  (5, "fp4", "precision (5th) 'fp4'"), (6, "yes", "use_preln (6th) 'yes'"),
                  (7, "eight", "num_gpus (7th) 'eight'"), (8, "-1", "warmup_steps_phase1 (8th) '-1'"),
                  (12, "often", "save_checkpoint_steps (12th) 'often'"),
                  (14, "1.5", "num_accumulation_steps_phase2 (14th) '1.5'"),
                  (15, "no.json", "config_path (15th): no.json not found")]
    cases = [(_at(PRETRAINING, pos, value), {}, text) for pos, value, text in positional]
    cases += [(PRETRAINING, {"PHASES": "1 3"}, "PHASES (environment) entry '3' is not a phase: 1 or 2"),
              (PRETRAINING, {"PHASES": "2"}, "starts at phase 2, but results/bart_pyt_pretraining/phase_1 holds no checkpoint"),
              (PRETRAINING, {"SEED": "x"}, "SEED (environment) 'x'"),
              (PRETRAINING, {"NUM_WORKERS": "-1"}, "NUM_WORKERS (environment) '-1'"),
              (PRETRAINING, {"LOG_FREQ": "0"}, "LOG_FREQ (environment) '0'"),
              (PRETRAINING, {"DATA_DIR": "nodata"}, "DATA_DIR (environment, default data): nodata not found"),
              (PRETRAINING, {"TOKENIZER": "./none"}, "TOKENIZER (environment): ./none does not exist"),
              (PRETRAINING, {"RESULTS_DIR": "a_file"}, "RESULTS_DIR (environment): a_file is a file"),
              (PRETRAINING, {"NNODES": "x"}, "NNODES (environment) 'x'")]
    problems = _refusals(sandbox, "run_pretraining.sh", cases)
    (sandbox.root / "data" / "pretrain_lddl_512").rmdir()
    problems += _refusals(sandbox, "run_pretraining.sh", [(PRETRAINING, {}, "data/pretrain_lddl_512 not found")])
    assert not problems, "\n".join(problems)


def test_benchmark_scripts_check_every_value(sandbox):
    _accepted(sandbox, "run_inference_benchmark.sh", INFERENCE)
    _accepted(sandbox, "run_training_benchmark.sh", TRAINING)
    inference = [(1, "true", "predict batch size(s) (1st) 'true'"), (1, "1 0 8", "predict batch size(s) (1st) '1 0 8'"), (2, "x", "eval beams (2nd) 'x'"),
                 (3, "0", "max source length (3rd) '0'"), (4, "1.5", "max target length (4th) '1.5'"),
                 (5, "no.ckpt", "model (5th): no.ckpt does not exist"), (6, "nodata", "data dir (6th): nodata not found"),
                 (7, "no.json", "config path (7th): no.json not found")]
    cases = [(_at(INFERENCE, pos, value), {}, text) for pos, value, text in inference]
    cases += [(INFERENCE, {"N_OBS": "0"}, "N_OBS (environment) '0'"),
              (INFERENCE, {"TYPE_PATH": "dev"}, "data/cnn_dm/dev.source not found"),
              (INFERENCE, {"NUM_GPUS": "1 x"}, "NUM_GPUS (environment) entry 'x'"),
              (INFERENCE, {"NUM_GPUS": "2"}, "NUM_GPUS (environment) '2' but this machine has no GPU"),
              (INFERENCE, {"PRECISIONS": "fp32 fp8"}, "PRECISIONS (environment) entry 'fp8' is not a precision"),
              (INFERENCE, {"PRECISIONS": " "}, "PRECISIONS (environment) is empty"),
              (INFERENCE, {"RESULTS_DIR": "a_file"}, "RESULTS_DIR (environment): a_file is a file"),
              (INFERENCE, {"MASTER_PORT": "0"}, "MASTER_PORT (environment) '0'")]
    problems = _refusals(sandbox, "run_inference_benchmark.sh", cases)
    training = [(1, "big", "batch size (1st) 'big'"), (2, "0", "max source length (2nd) '0'"),
                (3, "-16", "max target length (3rd) '-16'"), (4, "nodata", "data dir (4th): nodata not found")]
    cases = [(_at(TRAINING, pos, value), {}, text) for pos, value, text in training]
    cases += [(TRAINING, {"CONFIG_PATH": "no.json"}, "CONFIG_PATH (environment, default configs/config.json): no.json"),
              (TRAINING, {"TRAIN_STEPS": "0"}, "TRAIN_STEPS (environment) '0'"),
              (TRAINING, {"LOG_FREQ": "x"}, "LOG_FREQ (environment) 'x'"),
              (TRAINING, {"PRECISIONS": "bf16 half"}, "PRECISIONS (environment) entry 'half'"),
              (TRAINING, {"OUTPUT_DIR": "a_file"}, "OUTPUT_DIR (environment): a_file is a file")]
    problems += _refusals(sandbox, "run_training_benchmark.sh", cases)
    assert not problems, "\n".join(problems)


def test_data_and_setup_scripts_check_every_value_before_downloading(sandbox):
    _accepted(sandbox, "get_data.sh", ["data"])
    _accepted(sandbox, "get_pretraining_data.sh", ["data"])
    _accepted(sandbox, "preprocess_pretrain_data.sh", ["data/wikipedia", "data/cc", "data/owt", "data"])
    _accepted(sandbox, "run_demo.sh", [])
    _accepted(sandbox, "run_tests.sh", [])
    _accepted(sandbox, "install.sh", [])
    problems = _refusals(sandbox, "get_data.sh", [
        (["data"], {"XSUM_URL": "s3.amazonaws.com/xsum.tar.gz"}, "XSUM_URL (environment) 's3.amazonaws.com/xsum.tar.gz' is not a URL"),
        (["data"], {"CNN_DM_MIRROR": "mirror"}, "CNN_DM_MIRROR (environment) 'mirror' is not a URL"),
        (["data"], {"CNN_STORIES": "cnn.tgz"}, "CNN_STORIES (environment): cnn.tgz not found"),
        (["data"], {"DM_STORIES": "dm.tgz"}, "DM_STORIES (environment): dm.tgz not found"),
        (["data"], {"CNN_DM_EXPORT": "export"}, "CNN_DM_EXPORT (environment): export not found"),
        (["a_file"], {}, "data folder (1st): a_file is a file"),
        (["data", "more"], {}, "expected at most 1 argument (the data folder), got 2")])
    problems += _refusals(sandbox, "get_pretraining_data.sh", [
        (["data"], {"CORPORA": "wikipedia books"}, "CORPORA (environment) entry 'books' is not a corpus"),
        (["data"], {"CC_START": "2016-13-01"}, "CC_START (environment) '2016-13-01' is not a date"),
        (["data"], {"CC_END": "2015-01-01"}, "CC_END (environment) '2015-01-01' is before CC_START '2016-09-01'"),
        (["data"], {"NPROC": "0"}, "NPROC (environment) '0'"),
        (["data"], {"WIKIPEDIA_DUMP": "enwiki.xml.bz2"}, "WIKIPEDIA_DUMP (environment): enwiki.xml.bz2 not found")])
    corpora = ["data/wikipedia", "data/cc", "data/owt", "data"]
    problems += _refusals(sandbox, "preprocess_pretrain_data.sh", [
        (corpora, {"NPROC": "0"}, "NPROC (environment) '0'"),
        (corpora, {"NUM_SHARDS": "many"}, "NUM_SHARDS (environment) 'many'"),
        (["data/w", "data/cc", "data/owt", "data"], {}, "none of the three corpora exists"),
        (corpora[:3] + ["a_file"], {}, "data folder (4th): a_file is a file"),
        (corpora + ["x"], {}, "expected at most 4 arguments, got 5")])
    # no values: the reference's defaults (data; the corpora where get_pretraining_data.sh puts them)
    _accepted(sandbox, "get_data.sh", [])
    _accepted(sandbox, "get_pretraining_data.sh", [])
    _accepted(sandbox, "preprocess_pretrain_data.sh", ["data/wikipedia"])
    problems += _refusals(sandbox, "run_demo.sh", [
        ([], {"DEMO_VOCAB_SIZE": "4k"}, "DEMO_VOCAB_SIZE (environment) '4k'"),
        ([], {"DEMO_PHASE1_STEPS": "0"}, "DEMO_PHASE1_STEPS (environment) '0'"),
        ([], {"DEMO_FINETUNE_STEPS": "-5"}, "DEMO_FINETUNE_STEPS (environment) '-5'"),
        ([], {"OMP_NUM_THREADS": "all"}, "OMP_NUM_THREADS (environment) 'all'"),
        ([], {"RESULTS_DIR": "a_file"}, "output folder (RESULTS_DIR, else results/demo): a_file is a file")])
    problems += _refusals(sandbox, "run_tests.sh", [([], {"TEST_WORKERS": "0"}, "TEST_WORKERS (environment) '0'"),
                                                    ([], {"OMP_NUM_THREADS": "x"}, "OMP_NUM_THREADS (environment) 'x'")])
    problems += _refusals(sandbox, "install.sh", [
        ([], {"BART_USE_SYSTEM_MPI": "yes"}, "BART_USE_SYSTEM_MPI (environment) 'yes' is not 0 or 1"),
        ([], {"TORCH_INDEX_URL": "download.pytorch.org/whl/cpu"}, "TORCH_INDEX_URL (environment) 'download.pytorch.org/whl/cpu'"),
        ([], {"PYTHON": "/nonexistent/python"}, "PYTHON (environment) '/nonexistent/python' is not a command")])
    assert not problems, "\n".join(problems)
    assert not (sandbox.root / "a_file").is_dir() and not (sandbox.root / "data" / "xsum").exists()


def test_slurm_scripts_check_every_value_before_the_nodes_start(sandbox):
    """The job's values are checked in one task (the script under CHECK_ONLY=1); a bad one ends the job, exit 2,
    before the srun of all nodes."""
    problems = []
    for script, args, env, expected in (
            ("slurm_summarization.sbatch", SUMMARIZATION[:14] + ["true"], SLURM, "PRED_BS (15th) 'true'"),
            ("slurm_summarization.sbatch", SUMMARIZATION, dict(SLURM, SCRIPT="scripts/run_demo.sh"),
             "SCRIPT (environment) 'scripts/run_demo.sh' is not"),
            ("slurm_summarization.sbatch", EVALUATION, dict(SLURM, SCRIPT="scripts/run_eval_summarization.sh",
                                                            N_OBS="none"), "N_OBS (environment) 'none'"),
            ("slurm_pretrain.sbatch", PRETRAINING, dict(SLURM, SEED="x"), "SEED (environment) 'x'"),
            ("slurm_pretrain.sbatch", PRETRAINING, dict(SLURM, MASTER_PORT="port"), "MASTER_PORT (environment) 'port'"),
            ("slurm_pretrain.sbatch", PRETRAINING, {}, "not inside a SLURM job: submit it with sbatch")):
        run = sandbox.run([f"scripts/{script}", *args], env)
        calls = sandbox.calls()
        if run.returncode != 2 or len(run.stderr.strip().splitlines()) != 1 or expected not in run.stderr or \
                any(not (c.startswith("srun ") and "CHECK_ONLY=1" in c) for c in calls):
            problems.append(f"{script} {env}: exit {run.returncode}, stderr {run.stderr!r}, calls {calls}")
    assert not problems, "\n".join(problems)


def _arg(call, flag):
    words = call.split()
    return words[words.index(flag) + 1]


def _python_calls(sandbox):
    return [c for c in sandbox.calls() if c.startswith("python ")]


def test_results_dir_is_where_every_script_writes_and_output_dir_wins(sandbox):
    """RESULTS_DIR as the reference's scripts use it: the run's own folder (phase_1/phase_2 inside for
    pretraining); an explicit OUTPUT_DIR wins; neither: the reference's default under results/."""
    res = str(sandbox.tmp / "elsewhere")
    run = sandbox.run(["scripts/run_summarization.sh", *SUMMARIZATION], {"RESULTS_DIR": res})
    assert run.returncode == 0, run.stderr
    finetune, evaluate = _python_calls(sandbox)
    assert _arg(finetune, "--output_dir") == res and evaluate.split()[5] == res  # run_eval.py CKPT CONFIG DATA SAVE
    assert evaluate.split()[2] == f"{res}/final_step.ckpt"

    out = str(sandbox.tmp / "explicit")
    run = sandbox.run(["scripts/run_summarization.sh", *SUMMARIZATION], {"RESULTS_DIR": res, "OUTPUT_DIR": out})
    assert run.returncode == 0 and _arg(_python_calls(sandbox)[0], "--output_dir") == out

    run = sandbox.run(["scripts/run_summarization.sh", *SUMMARIZATION])
    assert run.returncode == 0 and _arg(_python_calls(sandbox)[0], "--output_dir").startswith("results/bart_pyt_")

    run = sandbox.run(["scripts/run_eval_summarization.sh", *EVALUATION], {"RESULTS_DIR": res})
    assert run.returncode == 0 and _python_calls(sandbox)[0].split()[5] == res
    run = sandbox.run(["scripts/run_eval_summarization.sh", *EVALUATION])
    assert run.returncode == 0 and _python_calls(sandbox)[0].split()[5].startswith("results/bart_pyt_inference_")

    run = sandbox.run(["scripts/run_pretraining.sh", *PRETRAINING], {"RESULTS_DIR": res})
    assert run.returncode == 0, run.stderr
    phase1, phase2 = _python_calls(sandbox)
    assert _arg(phase1, "--output_dir") == f"{res}/phase_1" and _arg(phase2, "--output_dir") == f"{res}/phase_2"
    assert _arg(phase2, "--init_checkpoint") == f"{res}/phase_1/_step2.ckpt"

    run = sandbox.run(["scripts/run_inference_benchmark.sh", *INFERENCE], {"RESULTS_DIR": res + "_inference"})
    assert run.returncode == 0, run.stderr
    evaluate, table = _python_calls(sandbox)
    # a folder per batch size (INFERENCE's 2, capped at the split's one example)
    assert evaluate.split()[5] == f"{res}_inference/1cpu_fp32_bs1" and table.split()[-1] == f"{res}_inference"
    run = sandbox.run(["scripts/run_training_benchmark.sh", *TRAINING], {"RESULTS_DIR": res + "_training"})
    assert run.returncode == 0, run.stderr
    finetune, table = _python_calls(sandbox)
    assert _arg(finetune, "--output_dir") == f"{res}_training/1cpu_fp32" and table.split()[-1] == f"{res}_training"
    run = sandbox.run(["scripts/run_training_benchmark.sh", *TRAINING])
    assert run.returncode == 0 and _python_calls(sandbox)[-1].split()[-1].startswith("results/bart_pyt_training_benchmark_")

    run = sandbox.run(["scripts/slurm_summarization.sbatch", *SUMMARIZATION], dict(SLURM, RESULTS_DIR=res + "_slurm"))
    assert run.returncode == 0 and _arg(_python_calls(sandbox)[0], "--output_dir") == res + "_slurm", run.stderr
    run = sandbox.run(["scripts/slurm_summarization.sbatch", *SUMMARIZATION], SLURM)
    assert run.returncode == 0 and _arg(_python_calls(sandbox)[0], "--output_dir") == "results/bart_pyt_77"


def _precision(call: str):
    """The Precision a recorded python call computes in, read by the project's own precision flags."""
    import argparse

    from bart.cli.args import add_flags
    from bart.cli.settings import PrecisionSettings
    from bart.runtime.precision import Precision

    parser = argparse.ArgumentParser()
    add_flags(parser, [PrecisionSettings], "finetune.py")  # the precision flags, as the scripts' parsers have them
    flags, _ = parser.parse_known_args(call.split()[2:])
    return Precision.from_args(flags)


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32", "fp32"])
def test_evaluation_computes_in_the_precision_it_is_given(sandbox, precision):
    """PRECISION reaches run_eval.py as it reaches finetune.py: fp32 evaluation is fp32 (TF32 off), not TF32
    products as with run_eval.py's default."""
    run = sandbox.run(["scripts/run_summarization.sh", *_at(SUMMARIZATION, 8, precision)])
    assert run.returncode == 0, run.stderr
    finetune, evaluate = _python_calls(sandbox)
    assert _precision(evaluate) == _precision(finetune) and _precision(evaluate).name == precision
    run = sandbox.run(["scripts/run_eval_summarization.sh", *_at(EVALUATION, 4, precision)])
    assert run.returncode == 0, run.stderr
    assert _precision(_python_calls(sandbox)[0]).name == precision
    run = sandbox.run(["scripts/run_inference_benchmark.sh", *INFERENCE], {"PRECISIONS": precision})
    assert run.returncode == 0, run.stderr
    assert _precision(_python_calls(sandbox)[0]).name == precision


def _launch(env_extra: dict, processes: int = 2) -> subprocess.CompletedProcess:
    """scripts/params/common.sh's launch_command N under the given environment: the LAUNCH words, one a line."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAX_RESTARTS", "NNODES", "MASTER_PORT", "RDZV_ID",
                                                            "SLURM_JOB_ID", "NODE_RANK", "MASTER_ADDR")}
    env.update(env_extra)
    script = f'source scripts/params/common.sh; launch_command {processes}; printf "%s\\n" "${{LAUNCH[@]}}"'
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=None)


def test_max_restarts_reaches_torchrun_with_c10d_rendezvous_across_nodes():
    """MAX_RESTARTS=N (the training scripts resume by themselves: --resume_from_checkpoint auto) becomes torchrun's
    --max_restarts; across nodes with c10d rendezvous on MASTER_ADDR:MASTER_PORT (a node's restart brings every
    node's processes back); one process on one node still goes through torchrun, which does the restarting."""
    plain = _launch({}).stdout.split()
    assert "--max_restarts=2" not in plain and not any(w.startswith("--max_restarts") for w in plain)
    one_node = _launch({"MAX_RESTARTS": "2"}).stdout.split()
    assert "--max_restarts=2" in one_node and "--rdzv_backend=c10d" not in one_node, one_node
    alone = _launch({"MAX_RESTARTS": "1"}, processes=1).stdout.split()
    assert alone[1:3] == ["-m", "utils.launch"] and "--max_restarts=1" in alone, alone  # torchrun's flags
    nodes = _launch({"MAX_RESTARTS": "3", "NNODES": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29600",
                     "SLURM_JOB_ID": "77"}).stdout.split()
    assert {"--max_restarts=3", "--rdzv_backend=c10d", "--rdzv_endpoint=10.0.0.1:29600", "--rdzv_id=77",
            "--nnodes=2"} <= set(nodes), nodes
    bad = _launch({"MAX_RESTARTS": "twice"})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "MAX_RESTARTS (environment) 'twice'" in bad.stderr, \
        bad.stderr



PRESET_FILES = ("cnn_dm_params.sh", "xsum_params.sh")


def _with_xsum(sandbox):
    """data/xsum beside data/cnn_dm (the XSum presets' and the benchmarks' default data)."""
    import shutil
    shutil.copytree(sandbox.root / "data" / "cnn_dm", sandbox.root / "data" / "xsum")
    return sandbox


def _presets(file):
    text = open(os.path.join(ROOT, "scripts", "params", file)).read()
    return re.findall(r"^([a-z][a-z0-9_]*)\(\) \{", text, flags=re.M)  # not the _helpers


def test_the_seeds_and_the_references_presets_exist_and_pass_the_scripts_checks(sandbox):
    """Rules out: xsum_params.sh had no dgxa100_8gpu_tf32_eval (the seed's Quick Start: "command not found"), no
    1-GPU presets (the seed's XSum table: 1 GPU, batch 24/40), no DGX-1 V100 presets for either dataset."""
    wanted = {"xsum_params.sh": {"dgxa100_8gpu_tf32_eval", "dgxa100_1gpu_bf16", "dgxa100_1gpu_tf32",
                                 "dgxa100_1gpu_bf16_eval", "dgxa100_1gpu_tf32_eval", "dgx1_8gpu_fp16", "dgx1_8gpu_fp32",
                                 "dgx1_8gpu_fp16_eval", "dgx1_8gpu_fp32_eval"},
              "cnn_dm_params.sh": {"dgx1_8gpu_fp16", "dgx1_8gpu_fp32", "dgx1_8gpu_fp16_eval", "dgx1_8gpu_fp32_eval",
                                   "dgxa100_1gpu_tf32"}}
    _with_xsum(sandbox)
    problems = []
    for file in PRESET_FILES:
        presets = _presets(file)
        problems += [f"{file}: no {name}" for name in sorted(wanted[file] - set(presets))]
        for name in presets:  # every preset prints values its script accepts
            script = "run_eval_summarization.sh m.ckpt" if name.endswith("_eval") else "run_summarization.sh"
            run = sandbox.run(None, command=f"CHECK_ONLY=1 bash scripts/{script} $(source scripts/params/{file} && {name})")
            if run.returncode != 0:
                problems.append(f"{file} {name}: exit {run.returncode} {run.stderr.strip()}")
    assert not problems, "\n".join(problems)

    def printed(file, name):
        return subprocess.run(["bash", "-c", f"source scripts/params/{file} && {name}"], cwd=ROOT, capture_output=True,
                              text=True, env={"PATH": os.environ["PATH"]}).stdout.split()
    # the seed's XSum table (1 GPU: batch 24 TF32, 40 BF16) and the reference's values
    assert printed("xsum_params.sh", "dgxa100_1gpu_bf16")[3:8] == ["1", "1.25e-4", "40", "8", "bf16"]
    assert printed("xsum_params.sh", "dgxa100_1gpu_tf32")[3:9] == ["1", "1.25e-4", "24", "8", "tf32", "3333"]
    assert printed("xsum_params.sh", "dgxa100_8gpu_tf32_eval") == ["64", "8", "tf32", "6", "1024", "60", "data/xsum/",
                                                                  "configs/config_xsum.json", "auto"]
    assert printed("xsum_params.sh", "dgx1_8gpu_fp16")[3:15] == ["8", "7e-5", "14", "1", "fp16", "7000", "200", "1024",
                                                                "60", "6", "128", "64"]
    assert printed("xsum_params.sh", "dgx1_8gpu_fp32_eval")[:3] == ["32", "8", "fp32"]
    assert printed("cnn_dm_params.sh", "dgx1_8gpu_fp32")[3:15] == ["8", "7e-5", "8", "1", "fp32", "12250", "200", "1024",
                                                                  "142", "4", "96", "32"]


def test_scripts_take_a_leading_part_of_their_values_and_the_references_defaults(sandbox):
    """Rules out: `run_pretraining.sh 200 32` was refused (15 or nothing), the benchmark scripts wanted all their
    values, and the inference benchmark stopped at 1,000 examples and refused N_OBS=-1."""
    _with_xsum(sandbox)
    run = sandbox.run(["scripts/run_pretraining.sh", "200", "32"])
    assert run.returncode == 0, run.stderr
    phase1, phase2 = [c for c in _python_calls(sandbox) if "pretrain.py" in c]  # (8 processes: a free port asked first)
    assert _arg(phase1, "--train_batch_size") == "200" and _arg(phase1, "--learning_rate") == "5e-3"
    assert _arg(phase1, "--gradient_accumulation_steps") == "40" and _arg(phase1, "--max_steps") == "95040"
    assert "--nproc_per_node=8" in phase1 and _arg(phase2, "--train_batch_size") == "32"
    assert _arg(phase2, "--gradient_accumulation_steps") == "120" and "--bf16" in phase1.split()
    # the reference passes --attention_dropout 0.1 (the configs keep bart-large's 0.0)
    assert _arg(phase1, "--attention_dropout") == "0.1" and _arg(phase2, "--attention_dropout") == "0.1"

    run = sandbox.run(["scripts/run_training_benchmark.sh"])
    assert run.returncode == 0, run.stderr
    finetune = _python_calls(sandbox)[0]
    assert [_arg(finetune, f) for f in ("--train_batch_size", "--max_source_length", "--max_target_length",
                                        "--data_dir", "--attention_dropout")] == ["24", "1024", "60", "data/xsum", "0.1"]
    run = sandbox.run(["scripts/run_training_benchmark.sh", "8"])
    assert run.returncode == 0 and _arg(_python_calls(sandbox)[0], "--train_batch_size") == "8"

    # the inference benchmark's default: the NGC seed's batch sizes 1 4 8 16 32 64 128 (a split of 200 examples)
    for side in ("source", "target"):
        (sandbox.root / "data" / "xsum" / f"test.{side}").write_text(f"A {side}.\n" * 200)
    run = sandbox.run(["scripts/run_inference_benchmark.sh"])
    assert run.returncode == 0, run.stderr
    runs = [call for call in _python_calls(sandbox) if "run_eval.py" in call]
    assert [_arg(call, "--bs") for call in runs] == ["1", "4", "8", "16", "32", "64", "128"]
    evaluate = runs[-1].split()
    assert evaluate[2:5] == ["facebook/bart-large", "configs/config_xsum.json", "data/xsum"]
    assert [_arg(" ".join(evaluate), f) for f in ("--bs", "--eval_beams", "--max_source_length", "--max_target_length")] \
        == ["128", "6", "1024", "60"]
    assert "--n_obs" not in evaluate  # the whole split, as the reference
    # capped at the split's size (N_OBS): sizes above it run once, as N_OBS, and a note says so
    run = sandbox.run(["scripts/run_inference_benchmark.sh", "1,4,8,16 32"], {"N_OBS": "10"})
    assert run.returncode == 0, run.stderr
    assert [_arg(call, "--bs") for call in _python_calls(sandbox) if "run_eval.py" in call] == ["1", "4", "8", "10"]
    assert "note: batch size(s) 16 32 above the split's 10 examples run as 10" in run.stderr, run.stderr
    run = sandbox.run(["scripts/run_inference_benchmark.sh", *INFERENCE], {"N_OBS": "-1"})
    assert run.returncode == 0 and "--n_obs" not in _python_calls(sandbox)[0], run.stderr
    run = sandbox.run(["scripts/run_inference_benchmark.sh", *INFERENCE], {"N_OBS": "5000"})
    assert run.returncode == 0 and _arg(_python_calls(sandbox)[0], "--n_obs") == "5000"
    run = sandbox.run(["scripts/run_eval_summarization.sh", *EVALUATION], {"N_OBS": "-1"})
    assert run.returncode == 0 and "--n_obs" not in _python_calls(sandbox)[0]
    assert _refusals(sandbox, "run_inference_benchmark.sh", [(INFERENCE + ["x"], {}, "expected at most 7 arguments"),
                                                             (INFERENCE, {"N_OBS": "-2"}, "N_OBS (environment) '-2'")]) == []

    # run_eval_summarization.sh INIT_CKPT alone: the reference's 96 8 fp16 (8 capped at the GPUs present: 1 here)
    run = sandbox.run(["scripts/run_eval_summarization.sh", "m.ckpt"])
    assert run.returncode == 0, run.stderr
    [evaluate] = _python_calls(sandbox)
    assert _arg(evaluate, "--bs") == "96" and "--fp16" in evaluate.split() and "torch.distributed.run" not in evaluate
    # run_summarization.sh: PRED_BS defaults to the reference script's 64; fine-tuning gets --attention_dropout 0.1
    run = sandbox.run(["scripts/run_summarization.sh", *SUMMARIZATION[:14]])
    assert run.returncode == 0, run.stderr
    finetune, evaluate = _python_calls(sandbox)
    assert _arg(evaluate, "--bs") == "64" and _arg(finetune, "--attention_dropout") == "0.1"


def test_fp32_evaluation_is_fp32(sandbox):
    """Rules out: PREC/PRECISION fp32 passed no precision flag to run_eval.py, which then ran TF32 products."""
    for script, args in (("run_summarization.sh", _at(SUMMARIZATION, 8, "fp32")),
                         ("run_eval_summarization.sh", _at(EVALUATION, 4, "fp32"))):
        run = sandbox.run([f"scripts/{script}", *args])
        assert run.returncode == 0, run.stderr
        evaluate = [c for c in _python_calls(sandbox) if "run_eval.py" in c][0].split()
        assert "--no-tf32" in evaluate and not {"--tf32", "--bf16", "--fp16"} & set(evaluate), (script, evaluate)
    run = sandbox.run(["scripts/run_eval_summarization.sh", *_at(EVALUATION, 4, "tf32")])
    assert run.returncode == 0 and "--tf32" in _python_calls(sandbox)[0].split()


def test_fp8_is_a_training_precision_of_the_scripts(sandbox):
    """PREC/precision fp8: the training processes get --fp8 (pretraining also the half-precision gradient
    all-reduce of its mixed-precision runs), the evaluation after fine-tuning bf16 (run_eval.py has no fp8);
    the evaluation script refuses fp8 in one line, before anything starts."""
    run = sandbox.run(["scripts/run_summarization.sh", *_at(SUMMARIZATION, 8, "fp8")])
    assert run.returncode == 0, run.stderr
    finetune, evaluate = _python_calls(sandbox)
    assert "--fp8" in finetune.split() and not {"--fp16", "--fp8"} & set(evaluate.split())
    assert "--bf16" in evaluate.split() and _precision(evaluate).name == "bf16"
    run = sandbox.run(["scripts/run_pretraining.sh", *_at(PRETRAINING, 5, "fp8")])
    assert run.returncode == 0, run.stderr
    phases = [c.split() for c in _python_calls(sandbox) if "pretrain.py" in c]
    assert len(phases) == 2 and all("--fp8" in c and "--allreduce_post_accumulation_half_precision" in c
                                    for c in phases), phases
    problems = _refusals(sandbox, "run_eval_summarization.sh", [
        (_at(EVALUATION, 4, "fp8"), {}, "PRECISION (4th) 'fp8' is not a precision: fp16, bf16, tf32 or fp32")])
    assert not problems, "\n".join(problems)


def test_run_summarization_can_evaluate_the_best_checkpoint(sandbox):
    """EVAL_CHECKPOINT=best: the best validation checkpoint (load_best_model_at_end); the default stays final_step.ckpt."""
    out = str(sandbox.tmp / "run")
    run = sandbox.run(["scripts/run_summarization.sh", *SUMMARIZATION], {"OUTPUT_DIR": out, "EVAL_CHECKPOINT": "best"})
    assert run.returncode == 0, run.stderr
    calls = _python_calls(sandbox)
    assert f"python -m bart.training.checkpoint best {out}" in calls
    assert calls[-1].split()[1:3] == ["run_eval.py", f"{out}/best_rouge2_step7.ckpt"]
    run = sandbox.run(["scripts/run_summarization.sh", *SUMMARIZATION], {"OUTPUT_DIR": out})
    assert _python_calls(sandbox)[-1].split()[2] == f"{out}/final_step.ckpt"
    assert _refusals(sandbox, "run_summarization.sh", [
        (SUMMARIZATION, {"EVAL_CHECKPOINT": "last"}, "EVAL_CHECKPOINT (environment) 'last' is not final or best"),
        (SUMMARIZATION, {"EVAL_CHECKPOINT": "best", "N_VAL": "0"}, "'best' needs validation during training")]) == []


def test_new_benchmark_scripts_check_every_value_before_starting(sandbox):
    """run_pretraining_benchmark.sh and run_stability_test.sh: one line and exit 2 for a bad value, nothing run."""
    (sandbox.root / "data" / "pretrain_lddl_128").mkdir(exist_ok=True)
    _accepted(sandbox, "run_pretraining_benchmark.sh", [], {"SEQ_LENGTHS": "128"})
    _accepted(sandbox, "run_stability_test.sh", ["3", *SUMMARIZATION])
    problems = _refusals(sandbox, "run_pretraining_benchmark.sh", [
        (["big"], {}, "batch size at 128 (1st) 'big'"),
        (["8", "8", "no.json"], {}, "config path (3rd): no.json not found"),
        (["8", "8", "configs/config.json", "x"], {}, "expected at most 3 arguments"),
        ([], {"SEQ_LENGTHS": "128 64"}, "data/pretrain_lddl_64 not found"),
        ([], {"SEQ_LENGTHS": "128", "CPU_PROCESS_COUNTS": "1 0"}, "CPU_PROCESS_COUNTS (environment) entry '0'"),
        ([], {"SEQ_LENGTHS": "128", "TRAIN_STEPS": "0"}, "TRAIN_STEPS (environment) '0'")])
    problems += _refusals(sandbox, "run_stability_test.sh", [
        (["0", *SUMMARIZATION], {}, "N_SEEDS (1st) '0'"),
        (SUMMARIZATION, {"SEEDS": "1 x"}, "SEEDS (environment) entry 'x'"),
        (["2", *_at(SUMMARIZATION, 8, "fp4")], {}, "PREC (8th) 'fp4' is not a precision"),
        (SUMMARIZATION, {"RESULTS_DIR": "a_file"}, "RESULTS_DIR (environment): a_file is a file")])
    assert not problems, "\n".join(problems)


def test_the_training_scripts_check_their_extra_flags_before_training(sandbox):
    """EXTRA_ARGS (and the flags after the values) are checked as the script's own values, before anything starts.
    Rules out: EVAL_CHECKPOINT=best with --save_top_k 0 ran the whole fine-tuning, then the evaluation was refused."""
    out = str(sandbox.tmp / "elsewhere")
    assert _refusals(sandbox, "run_summarization.sh", [
        (SUMMARIZATION, {"EVAL_CHECKPOINT": "best", "EXTRA_ARGS": "--save_top_k 0"},
         "EVAL_CHECKPOINT (environment) 'best' evaluates the best validation checkpoint, but --save_top_k 0 in the "
         "finetune.py flags (EXTRA_ARGS / after the 16 values) keeps none"),
        ([*SUMMARIZATION, "--n_val", "0"], {"EVAL_CHECKPOINT": "best"}, "but --n_val 0 in the finetune.py flags"),
        (SUMMARIZATION, {"EXTRA_ARGS": f"--output_dir {out}"}, f"--output_dir {out} in the finetune.py flags"),
        (SUMMARIZATION, {"EXTRA_ARGS": "--overwrite_output_dir", "MAX_RESTARTS": "2"},
         "every torchrun restart would remove the run and start over"),
    ]) == []
    assert _refusals(sandbox, "run_pretraining.sh", [
        (PRETRAINING, {"EXTRA_ARGS": f"--output_dir={out}"}, f"--output_dir {out} in EXTRA_ARGS (environment)")]) == []


def test_run_summarization_resumes_or_starts_over_and_evaluates_again(sandbox):
    """A rerun resumes (auto) and replaces its own evaluation (--overwrite: run_eval.py refuses an earlier one
    otherwise); --overwrite_output_dir among the flags starts over instead of resuming."""
    run = sandbox.run(["scripts/run_summarization.sh", *SUMMARIZATION], {"OUTPUT_DIR": str(sandbox.tmp / "run")})
    assert run.returncode == 0, run.stderr
    finetune, evaluate = _python_calls(sandbox)
    assert _arg(finetune, "--resume_from_checkpoint") == "auto" and "--overwrite" in evaluate.split()
    run = sandbox.run(["scripts/run_summarization.sh", *SUMMARIZATION, "--overwrite_output_dir"],
                      {"OUTPUT_DIR": str(sandbox.tmp / "run")})
    assert run.returncode == 0, run.stderr
    finetune = _python_calls(sandbox)[0].split()
    assert "--overwrite_output_dir" in finetune and "--resume_from_checkpoint" not in finetune


def test_phase_2_says_which_phase_1_checkpoint_it_looked_for(sandbox):
    """Rules out: exit 2 with nothing said after phase 1's banner (ls's status under pipefail ended the script)."""
    res = sandbox.tmp / "res"
    (res / "phase_1").mkdir(parents=True)
    (res / "phase_1" / "dllogger.json").write_text("")
    run = sandbox.run(["scripts/run_pretraining.sh", *PRETRAINING], {"OUTPUT_DIR": str(res), "PHASES": "1 2"})
    assert run.returncode == 0, run.stderr  # the stub leaves phase 1's checkpoint, as a finished phase 1 does
    os.remove(res / "phase_1" / "_step2.ckpt")
    run = sandbox.run(["scripts/run_pretraining.sh", *PRETRAINING], {"OUTPUT_DIR": str(res), "PHASES": "1 2",
                                                                     "PYTHON": "/bin/true"})
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and lines == [
        f"run_pretraining.sh: phase 2 starts from phase 1's last checkpoint, but {res}/phase_1/_step*.ckpt matches no "
        f"file (the folder holds: dllogger.json): phase 1 writes one when it ends; run phase 1 (PHASES=\"1 2\") until "
        f"it ends"], run.stderr


def test_the_resume_command_a_stopped_script_names(sandbox):
    """The scripts' stop line: the command that resumes, with the run's OUTPUT_DIR (a default one is dated: the
    same command alone would start another run), every environment value the run was started with (not: EXTRA_ARGS,
    N_VAL, SEED, VAL_CHECK_INTERVAL, TOKENIZER, CPU_PROCESSES dropped: the resume silently ran with other settings)
    and without --overwrite_output_dir."""
    env = {"OUTPUT_DIR": "results/bart_pyt_1", "EXTRA_ARGS": "--overwrite_output_dir --seed 3", "SEED": "5",
           "N_VAL": "0", "TOKENIZER": "my tok", "CPU_PROCESSES": "2", "VAL_CHECK_INTERVAL": "0.5"}
    run = sandbox.run(None, env, command="bash -c 'source scripts/params/common.sh; resume_command' "
                                         "scripts/run_summarization.sh data/cnn_dm/ 'a b' --overwrite_output_dir --lamb")
    assert run.returncode == 0, run.stderr
    assert run.stdout == (f"EXTRA_ARGS=--seed\\ 3 TOKENIZER=my\\ tok SEED=5 N_VAL=0 VAL_CHECK_INTERVAL=0.5 "
                          f"CPU_PROCESSES=2 OUTPUT_DIR=results/bart_pyt_1 bash "
                          f"{sandbox.root}/scripts/run_summarization.sh data/cnn_dm/ a\\ b --lamb"), run.stdout
    # the line runs as printed: each assignment reaches the script's environment as it was
    assignments = run.stdout[:run.stdout.index(" bash ")]
    shown = subprocess.run(["bash", "-c", assignments + " env"], capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin"}).stdout.splitlines()
    assert {k: v for k, v in env.items() if k != "EXTRA_ARGS"}.items() <= dict(line.split("=", 1) for line in shown).items()
