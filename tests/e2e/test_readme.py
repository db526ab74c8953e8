"""The commands and flags of the README and docs/*.md exist and do what they say (no GPU, no data needed)."""
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT
from tests.helpers.fork_server import fork_server
from tests.helpers.forked import run_python

README = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()


def _code_blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_opens_with_the_demo_and_test_commands_ci_runs():
    first = _code_blocks("bash")[0].splitlines()
    assert first[0].startswith("bash scripts/run_demo.sh") and first[1].startswith("bash scripts/run_tests.sh")
    assert "bash scripts/run_tests.sh" in open(os.path.join(ROOT, ".ci", "run")).read()


def test_every_script_and_file_named_exists_and_parses():
    """In the README and every docs/*.md file."""
    texts = {name: open(os.path.join(ROOT, name), encoding="utf-8").read() for name in _doc_files()}
    assert len(set(re.findall(r"(scripts/[\w/.-]+\.(?:sh|sbatch))", README))) >= 10
    for name, text in texts.items():
        for script in set(re.findall(r"(scripts/[\w/.-]+\.(?:sh|sbatch))", text)):
            path = os.path.join(ROOT, script)
            assert os.path.isfile(path), (name, script)
            assert subprocess.run(["bash", "-n", path]).returncode == 0, (name, script)
        for path in re.findall(r"`((?:configs|bart|utils|benchmarks|tests)/[\w/.-]+\.(?:json|py|sh))`", text):
            assert os.path.exists(os.path.join(ROOT, path)), (name, path)


def test_script_usage_and_argument_count_checks():
    env = dict(os.environ, PYTHON=sys.executable)
    for script, wrong in (("run_pretraining.sh", ["1"] * 16), ("run_summarization.sh", ["missing_data_dir"]),
                          ("run_eval_summarization.sh", []), ("run_summarization_eval.sh", []),
                          ("preprocess_pretrain_data.sh", ["a"] * 5),
                          ("run_training_benchmark.sh", ["1"] * 5), ("run_inference_benchmark.sh", ["1"] * 8)):
        path = os.path.join(ROOT, "scripts", script)
        help_out = subprocess.run(["bash", path, "--help"], capture_output=True, text=True, env=env)
        assert help_out.returncode == 0 and "usage" in help_out.stdout.lower(), script
        bad = subprocess.run(["bash", path, *wrong], capture_output=True, text=True, env=env)
        assert bad.returncode == 2 and ("expected" in bad.stderr or "missing_data_dir not found" in bad.stderr), script


def test_flags_named_in_the_readme_are_accepted():
    flags = set(re.findall(r"(--[a-z][\w-]+)", README.split("### Parameters")[1].split("### Command-line")[0]))
    # each script's --help-all forked from this process (its output is the point, not an interpreter's start-up)
    helps = {name: run_python([sys.executable, name, "--help-all"], cwd=ROOT, timeout=300).stdout
             for name in ("pretrain.py", "finetune.py", "run_eval.py")}
    assert all(h for h in helps.values())
    missing = [f for f in flags if f not in helps["pretrain.py"] + helps["finetune.py"]]
    assert not missing


def _parameter_lists() -> dict:
    """The README's parameter lists: name ("Both training scripts", "finetune.py", "pretrain.py") -> the flags its
    lines name before their ": "."""
    section = README.split("### Parameters")[1].split("### Command-line")[0]
    blocks = re.findall(r"^(Both training scripts|`finetune.py`|`pretrain.py`):\n```\n(.*?)```", section, flags=re.S | re.M)
    return {name.strip("`"): {flag for line in block.splitlines() for flag in re.findall(r"--[\w-]+", line.split(": ")[0])}
            for name, block in blocks}


def test_the_readmes_parameter_lists_are_the_flags_of_each_training_scripts_help():
    """The README lists each training script's --help flags (the settings' quick= marks), no more, no fewer."""
    from bart.cli.parsing import build_parser

    lists = _parameter_lists()
    assert set(lists) == {"Both training scripts", "finetune.py", "pretrain.py"}, lists
    for script in ("pretrain.py", "finetune.py"):
        quick = [a for a in build_parser(script).quick_actions if a.dest not in ("help", "help_all", "config_file")]
        listed = lists["Both training scripts"] | lists[script]
        assert sorted(listed - {option for a in quick for option in a.option_strings}) == [], script
        assert [a.option_strings[0] for a in quick if not listed & set(a.option_strings)] == [], script


def test_the_export_example_runs_as_printed(tmp_path, small_tokenizer_dir):
    """The "Exporting to Hugging Face" block, each line run as printed in a folder laid out as Quick Start step 5
    leaves it (a fine-tuning run's results/cnn_dm, its tokenizer saved beside its checkpoints). Rules out: exit 2 on
    final_step.ckpt, asking for --config, which the README does not print; before that, the README's command named a
    data/tokenizer folder no step makes."""
    import json
    import shutil

    from tests.helpers.corpus import micro_config
    from tests.helpers.entry import run_entry
    from tests.helpers.summaries import write_summarization_data

    block = README.split("### Exporting to Hugging Face")[1].split("```bash\n")[1].split("```")[0]
    commands = [line for line in block.splitlines() if line.strip()]
    assert commands and commands[0] == "python -m bart.export results/cnn_dm/final_step.ckpt results/bart_hf"
    assert "data/tokenizer" not in README
    shutil.copytree(small_tokenizer_dir, tmp_path / "elsewhere" / "tokenizer")  # the run's --tokenizer, not data/
    (tmp_path / "config.json").write_text(json.dumps(micro_config()))
    data = write_summarization_data(str(tmp_path / "data" / "cnn_dm"), sizes=(("train", 8), ("val", 2), ("test", 2)))
    assert run_entry("finetune.py", ["--config_path", str(tmp_path / "config.json"), "--data_dir", data,
                                     "--tokenizer", str(tmp_path / "elsewhere" / "tokenizer"), "--from_scratch",
                                     "--max_steps", "1", "--train_batch_size", "2", "--n_val", "0", "--num_workers",
                                     "0", "--max_source_length", "32", "--max_target_length", "8", "--no_tensorboard",
                                     "--output_dir", str(tmp_path / "results" / "cnn_dm")]) == 0
    shutil.rmtree(tmp_path / "elsewhere")  # the export finds the tokenizer beside the checkpoint
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    for command in commands:
        argv = [sys.executable if word == "python" else word for word in _shell_words(command)]
        done = run_python(argv, cwd=tmp_path, env=env)
        assert done.returncode == 0, (command, done.stderr[-3000:])
    assert (tmp_path / "results" / "bart_hf" / "model.safetensors").is_file()
    # "Two more targets": the --ct2 line as printed (the --push_to_hub line runs against a stand-in hub in test_hub)
    [convert] = [line for line in README.splitlines() if line.startswith("python -m bart.export ") and "--ct2" in line]
    argv = [sys.executable if word == "python" else word for word in _shell_words(convert)]
    done = run_python(argv, cwd=tmp_path, env=env)
    assert done.returncode == 0, (convert, done.stderr[-3000:])
    assert (tmp_path / "results" / "bart_ct2" / "bart_translate_options.json").is_file()
    assert (tmp_path / "results" / "bart_ct2" / "model.bin").is_file()


def _shell_words(command: str) -> list[str]:
    import shlex
    return shlex.split(command)


@pytest.mark.slow
def test_the_hugging_face_hand_off_runs_as_printed(tmp_path, tokenizer_dir, tokenizer, monkeypatch, capsys):
    """Quick Start step 8, typed as printed (in a folder holding the results it names) under the installed
    transformers (CI: 5.x, and 4.57 in its own step): the export, then transformers' AutoModelForSeq2SeqLM +
    generate print the summaries this project generates ("Exporting to Hugging Face": the test above)."""
    import shutil
    import textwrap

    from bart.modeling import BartForConditionalGeneration
    from tests.export.test_export import _checkpoint

    quick_start = README.split("8. Hand the model to Hugging Face tools")[1].split("\n## ")[0]
    blocks = [("bash", textwrap.dedent(_code_blocks_in(quick_start, "bash")[0])),
              ("python", textwrap.dedent(_code_blocks_in(quick_start, "python")[0]))]
    assert all("AutoModelForSeq2SeqLM" in text for kind, text in blocks if "transformers" in text)
    (tmp_path / "results" / "cnn_dm").mkdir(parents=True)  # a run's folder: its checkpoint, its tokenizer beside
    _checkpoint(tmp_path / "results" / "cnn_dm" / "final_step.ckpt", False, 3)
    for name in os.listdir(tokenizer_dir):
        shutil.copy(os.path.join(tokenizer_dir, name), tmp_path / "results" / "cnn_dm" / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_")) and k != "TOKENIZER"}
    env.update(PYTHONPATH=ROOT, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    # the command in a shell (`python` this interpreter, its commands forked from this process:
    # tests/helpers/fork_server.py); the Python block in this process (Python, not a command: no second start-up),
    # run from the same folder with the same hub settings
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    with fork_server() as python:
        os.symlink(python, bin_dir / "python")
        out = subprocess.run(["bash", "-c", blocks[0][1]], cwd=tmp_path, env=dict(env, PATH=f"{bin_dir}{os.pathsep}"
                             f"{env['PATH']}"), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (blocks[0][1], out.stderr[-3000:])
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith(("HF_", "TRANSFORMERS_")) or k == "TOKENIZER"]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    capsys.readouterr()
    exec(compile(blocks[1][1], "README.md (Quick Start 8)", "exec"), {"__name__": "__main__"})
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("['")]
    assert sorted(os.listdir(tmp_path / "results")) == ["cnn_dm", "cnn_dm_hf"]
    assert {"vocab.json", "merges.txt", "model.safetensors", "generation_config.json"} <= set(
        os.listdir(tmp_path / "results" / "cnn_dm_hf"))
    # what the project generates with the model's own settings (3 beams, lengths, n-gram blocking)
    model = BartForConditionalGeneration.from_pretrained(str(tmp_path / "results" / "cnn_dm" / "final_step.ckpt"))
    expected = []
    for text in ("Some long text.",):
        batch = tokenizer([text], return_tensors="pt")
        ids = model.eval().generate(batch["input_ids"], attention_mask=batch["attention_mask"])
        expected.append(repr(tokenizer.batch_decode(ids, skip_special_tokens=True)))
    assert printed == expected and all(len(eval(line)[0]) > 5 for line in printed)


def _code_blocks_in(text, language):
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


# -- every command the README and docs/*.md print, and the test that runs it as printed -------------------------------
# Commands of the ```bash blocks (one a line, comments dropped), the ```python blocks, and the commands quoted inline
# (`bash ...`, `python ...`, `pip ...`, ...), per file. Each maps to the test that runs it, as printed where it can run
# here. A template (with `...`, `N`, `DIR`) maps to the test that runs an instance of it; what cannot run on this
# machine (a download, another vendor's tool) says so, with what is checked instead.
_HERE = "tests/e2e/test_readme.py::test_commands_no_other_test_runs_run_as_printed"
_JOURNEY = "tests/e2e/test_journey.py::test_quick_start_journey"
_CONTAINER_BUILD = "tests/scripts/test_container.py::test_the_build_steps_run_on_cpu"
_HELP = "tests/e2e/test_readme.py::test_flags_named_in_the_readme_are_accepted"
_EXPORT = "tests/e2e/test_readme.py::test_the_export_example_runs_as_printed"
_PACKAGE = "tests/scripts/test_package.py::test_editable_install_runs_the_checkout"
_INSTALLED = "tests/scripts/test_package.py::test_installed_copy_runs_from_anywhere_with_a_shipped_config_by_name"
_LAUNCH = "tests/training/test_signals.py::test_stop_signals_under_torchrun_end_the_job_with_the_documented_code"
_ONNX = "tests/export/test_onnx.py::test_the_documented_onnx_export_decodes_as_this_project"
DOC_COMMANDS = {
    "README.md": {
        # the opening block: CHECK_ONLY=1 here (the demo's parts run in their own tests; CI runs the suite: .ci/run)
        "bash scripts/run_demo.sh": _HERE,
        "bash scripts/run_tests.sh": _HERE,
        # Quick Start
        "bash scripts/docker/build.sh": _HERE,  # docker is a recorder here: the docker command it would run
        "bash scripts/docker/launch.sh": _HERE,
        "bash scripts/get_data.sh data": _JOURNEY,
        "bash scripts/get_pretraining_data.sh data": _JOURNEY,
        "bash scripts/preprocess_pretrain_data.sh data/wikipedia data/common_crawl data/openwebtext data": _JOURNEY,
        "bash scripts/run_pretraining.sh 200 32 5e-3 4e-3 bf16 true 8 2166 200 95040 7560 100 40 120 "
        "configs/config.json": _JOURNEY,
        "export CKPT_PATH=results/bart_pyt_pretraining/phase_2 OUTPUT_DIR=results/cnn_dm": _JOURNEY,
        "bash scripts/run_summarization.sh $(source scripts/params/cnn_dm_params.sh && dgxa100_8gpu_bf16)": _JOURNEY,
        "OUTPUT_DIR=results/cnn_dm_eval bash scripts/run_eval_summarization.sh results/cnn_dm/final_step.ckpt "
        "$(source scripts/params/cnn_dm_params.sh && dgxa100_8gpu_bf16_eval)": _JOURNEY,
        "python block: from bart.modeling import BartForConditionalGeneration":
            "tests/e2e/test_readme.py::test_the_quick_start_python_example_runs_as_printed",
        "OUTPUT_DIR=results/xsum bash scripts/run_summarization.sh $(source scripts/params/xsum_params.sh && "
        "dgxa100_8gpu_bf16)": _HERE,
        "python -m bart.export results/cnn_dm results/cnn_dm_hf": _JOURNEY,
        "python block: from transformers import AutoModelForSeq2SeqLM, AutoTokenizer":
            "tests/e2e/test_readme.py::test_the_hugging_face_hand_off_runs_as_printed",
        # Command-line options
        "python pretrain.py --help": _HELP,
        "python finetune.py --help": _HELP,
        "python run_eval.py --help": _HELP,
        # Your own tokenizer: the first runs on the Quick Start's shards; the second is a template
        "python -m bart.tokenization.train_tokenizer data/pretrain_lddl_128 --vocab_size 32000 --out "
        "data/my_tokenizer --config bart-large --config_out data/config_32k.json": _JOURNEY,
        "TOKENIZER=data/my_tokenizer bash scripts/run_pretraining.sh ... data/config_32k.json":
            "tests/tokenization/test_tokenizer_choice.py::test_scripts_leave_the_tokenizer_to_the_python_rule",
        # Starting from public weights (the second: a template; the Quick Start's step 5 from facebook/bart-large)
        "hf download facebook/bart-large": "tests/export/test_hub.py::test_the_readmes_download_command_runs_as_printed",
        "HF_HUB_OFFLINE=1 python finetune.py --init_checkpoint facebook/bart-large ...": _JOURNEY,
        "ngc registry model download-version \"nvidia/dle/bart__pyt_ckpt_ds-cnndm:20.11.1_amp\"":
            "not run (NGC's command-line tool, a 4 GB download)",
        # Exporting to Hugging Face (after Quick Start step 5), and CTranslate2's converter on the exported folder
        "python -m bart.export results/cnn_dm/final_step.ckpt results/bart_hf": _EXPORT,
        "python -c \"from transformers import AutoModelForSeq2SeqLM as M, AutoTokenizer as T; t = T.from_pretrained("
        "'results/bart_hf'); print(t.batch_decode(M.from_pretrained('results/bart_hf').generate(**t(['Some long text "
        "...'], return_tensors='pt')), skip_special_tokens=True))\"": _EXPORT,
        "python -m bart.export results/cnn_dm/final_step.ckpt results/bart_hf_ct2 --ct2 results/bart_ct2": _EXPORT,
        "python -m bart.export results/cnn_dm/final_step.ckpt results/bart_hf_hub --push_to_hub ME/bart-cnn --private":
            "tests/export/test_hub.py::test_export_pushes_to_the_hub_through_huggingface_hub",
        "hf auth login": "not run (huggingface_hub's login prompt, quoted; the push test passes HF_TOKEN)",
        # Benchmarking
        "bash scripts/run_training_benchmark.sh 40 1024 142 data/cnn_dm":
            "tests/scripts/test_benchmark_scripts.py::test_readme_training_benchmark_runs_as_printed",
        "bash scripts/run_inference_benchmark.sh 128 4 1024 142 results/cnn_dm/final_step.ckpt data/cnn_dm "
        "configs/config.json": "tests/scripts/test_benchmark_scripts.py::test_readme_inference_benchmark_runs_as_printed",
        # -- quoted inline --
        "bash scripts/run_tests.sh -k generation -x": _HERE,
        "bash scripts/run_tests.sh tests/optim/test_lamb.py": _HERE,
        "OMP_NUM_THREADS=1 bash scripts/run_demo.sh": _HERE,
        "bash scripts/install.sh": _CONTAINER_BUILD,  # the image's build step runs it as written
        "BART_TRANSFORMERS=4 bash scripts/install.sh": _HERE,  # CHECK_ONLY=1; CI's run_tests_transformers4.sh runs it
        "pip install -e .": _PACKAGE,
        "pip install .": _INSTALLED,
        "pip install --no-deps --no-build-isolation -e .": _PACKAGE,
        "ruff check .": "tests/scripts/test_package.py::test_ruff_passes_with_the_projects_configuration",
        "python -m bart.tokenization.build_tokenizer DIR": _CONTAINER_BUILD,
        "python -m bart.scoring.nltk_data": _CONTAINER_BUILD,
        "CHECK_ONLY=1 bash scripts/...":
            "tests/scripts/test_script_checks.py::test_data_and_setup_scripts_check_every_value_before_downloading",
        "python -m bart.data.preprocess": _JOURNEY,
        "python -m bart.data.prepare_summarization": _JOURNEY,
    },
    "docs/PERFORMANCE.md": {
        # CHECK_ONLY=1 here; full runs with a tiny model: test_benchmark_scripts.py's sweep and stability tests
        "PRECISIONS=\"tf32 bf16\" bash scripts/run_pretraining_benchmark.sh 200 32 configs/config.json": _HERE,
        "bash scripts/run_stability_test.sh 5 $(source scripts/params/xsum_params.sh && dgxa100_8gpu_bf16)": _HERE,
        # the side-by-side benchmarks (minutes at bart-base's size): their flags as printed, then --help, here
        "python benchmarks/bench_generation.py": _HERE,
        "python benchmarks/bench_generation.py --contenders all --sources lee": _HERE,
        "python benchmarks/bench_model.py": _HERE,
        "python benchmarks/bench_lamb.py": _HERE,
        "python benchmarks/bench_pretraining_loader.py": _HERE,
        "python benchmarks/bench_pretraining.py": _HERE,
        "python benchmarks/bench_resume.py": _HERE,
        "python benchmarks/bench_pretraining_layouts.py": _HERE,
        "python benchmarks/bench_run_eval.py": _HERE,
        # needs CUDA: its dry run on CPU (a tiny config, two of the contenders)
        "python benchmarks/bench_gpu_training.py --device cpu --config configs/config.json --shapes pretrain128 "
        "--contenders lamb,lamb_compile,lamb_layers_compile --batch 2 --source_length 64 --target_length 64 --steps 6 "
        "--warmup 2": "not run (five minutes of inductor compiles of bart-large); its contenders are built by "
                      "tests/e2e/test_gpu_suite.py::test_training_contenders_build_the_optimizer_their_name_says",
        "python benchmarks/bench_gpu_training.py --lengths xsum --contenders hf,hf_tokens,adamw,adamw_tokens":
            "tests/scripts/test_bench_gpu_training_lengths.py::test_dry_run_reports_real_tokens_per_second",
        # its full run at tiny widths, in process, its counts checked
        "python benchmarks/count_step_ops.py":
            "tests/scripts/test_count_step_ops.py::test_counts_of_each_contender_and_of_the_decode_reads",
        # the GPU suite: on a CPU machine the first is one line and exit 2; the dry run runs whole
        "bash benchmarks/gpu_suite.sh results/gpu_suite":
            "tests/e2e/test_gpu_suite.py::test_without_cuda_and_without_dry_run_exits_2_in_one_line",
        "bash benchmarks/gpu_suite.sh results/gpu_suite_matrix --parts matrix":
            "tests/e2e/test_gpu_suite.py::test_without_cuda_and_without_dry_run_exits_2_in_one_line",
        "bash benchmarks/gpu_suite.sh results/gpu_suite_dry --dry-run":
            "tests/e2e/test_gpu_suite.py::test_dry_run_order_tarball_and_budget",
        # the demo's benchmark runs: CHECK_ONLY=1 on the demo's folders here (full runs: the README's Benchmarking
        # commands' tests)
        "CONFIG_PATH=results/demo/data/config_demo.json TRAIN_STEPS=40 bash scripts/run_training_benchmark.sh 16 128 "
        "64 results/demo/data/summarization": _HERE,
        "bash scripts/run_inference_benchmark.sh 8 2 64 64 results/demo/finetuning/final_step.ckpt "
        "results/demo/data/summarization results/demo/data/config_demo.json": _HERE,
        "OMP_NUM_THREADS=1 python benchmarks/bench_generation.py --threads 1 --batch_sizes B --num_beams K": _HERE,
        "python benchmarks/bench_generation.py --batch_sizes 1 8 32 --num_beams K": _HERE,
    },
    "docs/REFERENCE_FLAGS.md": {
        "torchrun --nproc_per_node N": _LAUNCH,
        "python finetune.py --gpus 8": "tests/cli/test_reference_flags.py::test_launcher_checks_of_gpus_nodes_processes",
        "nsys profile": "not run (Nsight Systems' command, quoted)",
        "torchrun --nnodes N": "tests/training/test_trainer.py::test_two_torchrun_nodes_train_together_as_one_process",
    },
    "docs/TRAINING.md": {
        "pip install torchao==0.18.0": "not run (a download); its pin is requirements.txt's: " + _HERE,
        "tensorboard --logdir OUTPUT_DIR/tensorboard": "tests/training/test_monitoring.py::test_tensorboard_events_read_back",
        "pip install wandb": "not run (a download); without it: tests/training/test_monitoring.py::test_flag_mistakes",
        "pip install datasets": "not run (a download); without it: "
                                "tests/cli/test_dataset_name.py::test_without_the_datasets_package_the_line_says_how_to_install_it",
        "python -m utils.plot_logs LOG.json ... --labels ... --out DIR":
            "tests/training/test_monitoring.py::test_plot_has_a_row_per_phase",
        "srun --cpu-bind": "not run (SLURM's srun flag, quoted)",
        "python -m bart.tokenization.train_tokenizer": "tests/tokenization/test_train_tokenizer.py::test_cli_trains_and_writes_the_config",
    },
    "docs/TROUBLESHOOTING.md": {
        "docker stop": "not run (docker's command, quoted)",
        "torchrun --max_restarts N":
            "tests/training/test_restarts.py::test_torchrun_restart_after_a_killed_rank_resumes_and_ends_as_an_uninterrupted_run",
        "python -m utils.launch": _LAUNCH,
    },
    "docs/INFERENCE.md": {
        "python block: import json": "tests/e2e/test_readme.py::test_the_references_python_form_runs_as_printed",
        "python -m bart.export results/finetune/final_step.ckpt results/bart_hf --ct2 results/bart_ct2": "tests/export/test_ctranslate2.py::test_the_options_file_makes_ctranslate2_decode_as_run_eval",
        "python block: import ctranslate2, transformers": "tests/export/test_ctranslate2.py::test_the_options_file_makes_ctranslate2_decode_as_run_eval",
        "python -m bart.export CKPT OUT_DIR": _EXPORT,
        "pip install ctranslate2==4.8.5":
            "tests/export/test_ctranslate2.py::test_ct2_without_ctranslate2_is_one_line_naming_the_install",
        "hf auth login": "not run (huggingface_hub's login prompt, quoted; the push test passes HF_TOKEN)",
        # ONNX: a transformers 4.57 environment of its own (optimum-onnx 0.1.0 requires transformers<4.58); CI's
        # transformers 4.57 step runs the export and decode lines as printed (skipped under 5.x)
        'python -m venv .venv-onnx && .venv-onnx/bin/pip install "transformers==4.57.6" "optimum-onnx[onnxruntime]==0.1.0"':
            "not run (a download); its pins are requirements-transformers4.txt's, which CI's transformers 4.57 step "
            "installs: tests/export/test_onnx.py::test_the_documented_install_line_names_the_pins_ci_tests",
        ".venv-onnx/bin/optimum-cli export onnx --model results/bart_hf --task text2text-generation-with-past "
        "results/bart_onnx": _ONNX,
        ".venv-onnx/bin/python -c \"from optimum.onnxruntime import ORTModelForSeq2SeqLM; from transformers import "
        "AutoTokenizer": _ONNX,
        "t = AutoTokenizer.from_pretrained('results/bart_onnx'); m = ORTModelForSeq2SeqLM.from_pretrained("
        "'results/bart_onnx')": _ONNX,
        "print(t.batch_decode(m.generate(**t(['Some long text ...'], return_tensors='pt')), skip_special_tokens=True))\"":
            _ONNX,
    },
    "docs/ARCHITECTURE.md": {
        "python -m bart.export CKPT OUT_DIR": _EXPORT,
        "python -m bart.tokenization.train_tokenizer": "tests/tokenization/test_train_tokenizer.py::test_cli_trains_and_writes_the_config",
        "python -m utils.launch": _LAUNCH,
    },
}
README_COMMANDS = DOC_COMMANDS["README.md"]
ALL_COMMANDS = {command: where for commands in DOC_COMMANDS.values() for command, where in commands.items()}


def _doc_files() -> list[str]:
    docs = sorted(name for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md"))
    return ["README.md"] + [f"docs/{name}" for name in docs]


def doc_commands(text: str) -> list[str]:
    """A Markdown file's commands: each line of its bash blocks (comments and continuations joined), each python block
    by its first line, and each command quoted inline (whitespace collapsed)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.append(" ".join(line.split()))
    commands += ["python block: " + block.strip().splitlines()[0]
                 for block in re.findall(r"```python\n(.*?)```", text, flags=re.S)]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    words = r"(?:[A-Z_0-9]+=\S+\s+)*(?:bash|python|pip|ruff|hf|huggingface-cli|ct2-transformers-converter|tensorboard|ngc|" \
            r"torchrun|srun|docker|nsys|mpirun)\s[^`]*"
    commands += [" ".join(m.split()) for m in re.findall(rf"`({words})`", prose)]
    return list(dict.fromkeys(commands))


def readme_commands() -> list[str]:
    return doc_commands(README)


def test_every_command_the_readme_and_docs_print_has_a_test_that_runs_it():
    """A command added to the README or a docs/*.md file needs its line in DOC_COMMANDS (under that file), naming the
    test that runs it; every docs/*.md file has its entry."""
    assert set(DOC_COMMANDS) == set(_doc_files()), sorted(set(DOC_COMMANDS) ^ set(_doc_files()))
    for name, mapped in DOC_COMMANDS.items():
        commands = doc_commands(open(os.path.join(ROOT, name), encoding="utf-8").read())
        assert set(commands) == set(mapped), (name, sorted(set(commands) - set(mapped)), sorted(set(mapped) - set(commands)))
    for command, where in ALL_COMMANDS.items():
        named = re.findall(r"(tests/(?:\w+/)?test_\w+\.py)::(test_\w+)", where)
        assert named or where.startswith("not run ("), (command, where)
        for path, test in named:
            assert re.search(rf"^def {test}\(", open(os.path.join(ROOT, path)).read(), flags=re.M), (command, where)


def _readme_sandbox(tmp_path):
    """The checkout's files (linked) beside the folders the commands name, laid out as the README assumes (small
    stand-ins: the commands below only have their values checked)."""
    import shutil

    from tests.helpers.summaries import write_summarization_data
    repo = tmp_path / "bart"
    repo.mkdir()
    for name in os.listdir(ROOT):
        if name not in ("data", "results", ".git"):
            os.symlink(os.path.join(ROOT, name), repo / name)
    for folder in ("data/xsum", "results/demo/data/summarization"):
        write_summarization_data(str(repo / folder), sizes=(("train", 2), ("val", 1), ("test", 1)))
    for folder in ("data/nvidia_pretrained/bart_large", "data/pretrain_lddl_128", "data/pretrain_lddl_512",
                   "results/demo/finetuning"):
        (repo / folder).mkdir(parents=True, exist_ok=True)
    (repo / "results" / "demo" / "finetuning" / "final_step.ckpt").write_bytes(b"")
    shutil.copy(os.path.join(ROOT, "configs", "config_tiny.json"), repo / "results" / "demo" / "data" / "config_demo.json")
    return repo


def test_commands_no_other_test_runs_run_as_printed(tmp_path, monkeypatch, capsys):
    """The README's commands whose full run no test can afford (the demo, the suite, the benchmarks at their sizes)
    or whose tool is absent here (docker), each typed as printed:
    - the scripts with CHECK_ONLY=1 (every value checked, nothing started; their full runs are other tests' with
      other values, DOC_COMMANDS names them);
    - scripts/docker/*.sh with `docker` a recorder on PATH: the docker command each would run;
    - the side-by-side benchmarks with their printed flags and --help, run as `python FILE` runs them (in this
      process: no second torch start-up);
    - the torchao pin docs/TRAINING.md's install line names is requirements.txt's."""
    import runpy
    import shlex

    repo = _readme_sandbox(tmp_path)
    checked = [c for c, where in ALL_COMMANDS.items() if where == _HERE and "bash " in c and "docker" not in c]
    env = {k: v for k, v in os.environ.items() if k not in ("OUTPUT_DIR", "RESULTS_DIR", "CONFIG_PATH", "TOKENIZER")}
    env.update(CHECK_ONLY="1", PYTHON=sys.executable, CUDA_VISIBLE_DEVICES="")  # no GPU: any GPU count is accepted
    assert len(checked) == 11
    for command in checked:
        out = subprocess.run(["bash", "-c", command], cwd=repo, env=env, capture_output=True, text=True, timeout=None)
        assert out.returncode == 0 and "every value checked (CHECK_ONLY=1: nothing started)" in out.stdout, (
            command, out.stdout[-1000:], out.stderr[-1000:])
    assert not os.path.exists(repo / "results" / "demo" / "plots") and not list((repo / "results").glob("bart_pyt_*"))
    # docker: the commands build.sh and launch.sh hand to it, from the repository root
    log = tmp_path / "docker_calls"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "docker").write_text(f"#!/bin/bash\necho \"$PWD | $*\" >> {log}\n")
    (tmp_path / "bin" / "docker").chmod(0o755)
    docker_env = dict(env, PATH=f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}")
    docker_env.pop("CHECK_ONLY")
    for command in ("bash scripts/docker/build.sh", "bash scripts/docker/launch.sh"):
        out = subprocess.run(["bash", "-c", command], cwd=repo, env=docker_env, capture_output=True, text=True,
                             timeout=None)
        assert out.returncode == 0, (command, out.stderr)
    build, launch = log.read_text().splitlines()
    assert build == f"{repo} | build --network=host -t bart_pyt --build-arg BUILD_APEX=1 ."
    workdir = [line.split()[1] for line in open(os.path.join(ROOT, "Dockerfile")) if line.startswith("WORKDIR ")][-1]
    assert f"-v {repo}:{workdir} " in launch and launch.endswith(f"-w {workdir} bart_pyt bash")  # the image built
    # the benchmarks: printed flags, then --help (argparse reads the flags before it meets --help)
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for command in [c for c, where in ALL_COMMANDS.items() if where == _HERE and "benchmarks/bench_" in c]:
        words = shlex.split(command.replace(" B ", " 8 ").replace(" K", " 4"))
        words = words[words.index("python") + 1:]
        monkeypatch.setattr(sys, "argv", [*words, "--help"])
        with pytest.raises(SystemExit) as stop:
            runpy.run_path(os.path.join(ROOT, words[0]), run_name="__main__")
        assert stop.value.code == 0 and capsys.readouterr().out.startswith("usage: "), command
    requirements = open(os.path.join(ROOT, "requirements.txt")).read()
    training = open(os.path.join(ROOT, "docs", "TRAINING.md"), encoding="utf-8").read()
    assert re.search(r"^torchao==0\.18\.0\b", requirements, flags=re.M) and "`pip install torchao==0.18.0`" in training


@pytest.mark.parametrize("pre_ln", [True, False])
def test_the_quick_start_python_example_runs_as_printed(tmp_path, monkeypatch, capsys, small_tokenizer_dir, pre_ln):
    """Quick Start step 7, the Python block as printed, in a folder laid out as step 5 leaves it: the fine-tuned
    results/cnn_dm/final_step.ckpt (a raw state dict, as fine-tuning writes it), the run's run_config.json (its model
    config: Pre-LN or post-LN) and tokenizer files beside it. It prints one summary, the one the model's own
    generation settings give. (Rules out: 15 lines hard-coding pre_ln = True, wrong for post-LN weights.)"""
    import json
    import shutil
    import textwrap

    import torch

    from bart.configuration import BartConfig
    from bart.modeling import BartForConditionalGeneration
    from tests.helpers.corpus import micro_config

    block = textwrap.dedent(_code_blocks_in(README.split("7. Summarize in a few lines of Python")[1], "python")[0])
    assert 'from_pretrained("results/cnn_dm/final_step.ckpt")' in block and len(block.strip().splitlines()) <= 7
    assert 'BartTokenizer.from_pretrained("results/cnn_dm")' in block
    torch.manual_seed(0)
    config = micro_config(pre_ln=pre_ln, num_beams=2, max_length=12)
    model = BartForConditionalGeneration(BartConfig(**config)).eval()
    (tmp_path / "results" / "cnn_dm").mkdir(parents=True)
    torch.save(model.state_dict(), tmp_path / "results" / "cnn_dm" / "final_step.ckpt")
    (tmp_path / "results" / "cnn_dm" / "run_config.json").write_text(json.dumps({"model_config": config}))
    for name in os.listdir(small_tokenizer_dir):  # as a fine-tuning run saves its tokenizer beside its checkpoints
        shutil.copy(os.path.join(small_tokenizer_dir, name), tmp_path / "results" / "cnn_dm" / name)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md (Quick Start 7)", "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out.splitlines()[-1]  # after the line naming the run's config
    summaries = eval(printed)
    assert isinstance(summaries, list) and len(summaries) == 1 and isinstance(summaries[0], str)
    from bart.tokenization.tokenization_bart import BartTokenizer
    tokenizer = BartTokenizer.from_pretrained(small_tokenizer_dir)
    batch = tokenizer(["NVIDIA Geforce Won't Run or Uninstall"], return_tensors="pt")
    expected = model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], num_beams=2, max_length=12)
    assert summaries == tokenizer.batch_decode(expected, skip_special_tokens=True)  # the run's own settings


def test_the_references_python_form_runs_as_printed(tmp_path, monkeypatch, capsys, small_tokenizer_dir):
    """docs/INFERENCE.md's "The reference's form", as printed, in a folder laid out as Quick Start step 5 leaves
    it: configs/config.json (a tiny Pre-LN config), the fine-tuned final_step.ckpt (a raw state dict) and the run's
    tokenizer beside it. It prints one summary."""
    import json
    import shutil
    import textwrap

    import torch

    from bart.configuration import BartConfig
    from bart.modeling import BartForConditionalGeneration
    from tests.helpers.corpus import micro_config

    doc = open(os.path.join(ROOT, "docs", "INFERENCE.md"), encoding="utf-8").read()
    block = textwrap.dedent(_code_blocks_in(doc.split("## The reference's form")[1], "python")[0])
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "config.json").write_text(json.dumps(micro_config(pre_ln=True)))
    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(**micro_config(pre_ln=True))).eval()
    (tmp_path / "results" / "cnn_dm").mkdir(parents=True)
    torch.save(model.state_dict(), tmp_path / "results" / "cnn_dm" / "final_step.ckpt")
    for name in os.listdir(small_tokenizer_dir):
        shutil.copy(os.path.join(small_tokenizer_dir, name), tmp_path / "results" / "cnn_dm" / name)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/INFERENCE.md (the reference's form)", "exec"), {"__name__": "__main__"})
    [printed] = capsys.readouterr().out.splitlines()
    summaries = eval(printed)
    assert isinstance(summaries, list) and len(summaries) == 1 and isinstance(summaries[0], str)
