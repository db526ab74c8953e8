"""benchmarks/gpu_suite.sh: the one-command GPU suite. Its dry run on CPU (every part's figures and the
report), failing, out-of-memory and hung parts reported while the others run, one-line refusals; and
the pieces it relies on (datasheet peaks by device name, the budget's shares, batches shrunk on OOM,
beam search past a batch that does not fit, the report of a part stopped part-way)."""
import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch

from tests.helpers import ROOT
from tests.helpers.fork_server import fork_server
from tests.helpers.processes import wait_for

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import bench_generation  # noqa: E402
import bench_gpu_training  # noqa: E402
import gpu_suite  # noqa: E402
from gpu_suite_report import render  # noqa: E402

SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_suite.sh")


def _suite(*args, faults=None, cuda_hidden=False, timeout=None, python=None):
    env = {k: v for k, v in os.environ.items() if k != gpu_suite.FAULTS_ENV}
    env["OMP_NUM_THREADS"] = "1"  # tiny models: robust when other work shares the cores
    if python:
        env["PYTHON"] = python
    if faults:
        env[gpu_suite.FAULTS_ENV] = faults
    if cuda_hidden:
        env["CUDA_VISIBLE_DEVICES"] = ""
    start = time.time()
    run = subprocess.run(["bash", SCRIPT, *map(str, args)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=timeout)
    return run, time.time() - start


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_suite") / "out"
    # the suite and its parts forked from this process (tests/helpers/fork_server.py): what they do is tested here,
    # not an interpreter's start-up; the refusals and stopped parts below start real ones
    with fork_server() as python:
        run, seconds = _suite(out, "--dry-run", python=python)
    assert run.returncode == 0, run.stdout + run.stderr
    print(f"dry run: {seconds:.1f} s")
    return out, json.loads((out / "suite.json").read_text()), (out / "report.md").read_text()


def test_dry_run_order_tarball_and_budget(dry_run):
    """The tests run first (correctness before speed), then the versions, peaks, training, beam search, profile
    and the configuration matrix with the time left, one after the other; OUT_DIR's report, logs and figures are also OUT_DIR.tar.gz (no weights: the
    matrix's checkpoints stay on disk); the budget is one 9-minute command."""
    import tarfile
    out, suite, _ = dry_run
    assert gpu_suite.PART_NAMES == ("tests", "env", "peaks", "pretrain128", "pretrain512", "finetune_xsum",
                                    "finetune_lengths", "beam", "profile", "matrix")
    assert list(suite["parts"]) == list(gpu_suite.PART_NAMES)
    started = [os.stat(out / f"{part}.log").st_mtime for part in gpu_suite.PART_NAMES]
    assert started == sorted(started)  # each part's log last written before the next part's
    with tarfile.open(str(out) + ".tar.gz") as tar:
        names = set(tar.getnames())
        files = [m.name for m in tar.getmembers() if m.isfile()]
    assert {f"out/{name}" for name in ("report.md", "suite.json", "tests.log", "beam.json", "profile.json")} <= names
    weights = [p for p in out.rglob("*") if p.suffix in (".ckpt", ".safetensors", ".bin", ".pt")]
    assert weights and all(name.endswith(gpu_suite.TARBALL_SUFFIXES) for name in files), (weights[:3], files)
    assert suite["budget_s"] == gpu_suite.DEFAULT_BUDGET == 540
    # compile time apart from step time; compile_generation a contender of the beam part
    for part in ("pretrain128", "pretrain512"):
        rows = {r["contender"]: r for r in suite["figures"][part]["rows"]}
        assert rows["lamb_compile"]["compile_s"] is not None and rows["lamb"]["compile_s"] is None
    assert all("ours_compiled" in r["contenders"] for r in suite["figures"]["beam"]["rows"])
    # its first call apart: the compile a batch shape costs, which the timed calls leave out
    assert all(r["contenders"]["ours_compiled"]["first_call_seconds"] > 0 for r in suite["figures"]["beam"]["rows"])
    assert max(gpu_suite.BEAM["batch_sizes"]) == 128


def test_dry_run_every_part_ok_with_its_figures(dry_run):
    out, suite, _ = dry_run
    assert suite["dry_run"] is True
    assert {p: s["status"] for p, s in suite["parts"].items()} == {p: "ok" for p in gpu_suite.PART_NAMES}
    figures = suite["figures"]
    env = figures["env"]
    import transformers
    assert env["torch"] == torch.__version__ and env["transformers"] == transformers.__version__
    assert env["gpu"].startswith("none visible") and env["apex"] and env["container"] and env["driver"]
    peaks = figures["peaks"]
    assert peaks["matmul_tflops"] > 0 and peaks["bandwidth_bytes_s"] > 0
    apex = env["apex_fused_lamb"]  # apex's LAMB usable: the project's own LAMB is a contender too
    for part, shape in gpu_suite.DRY_TRAIN_SHAPES.items():
        expected = gpu_suite.DRY_CONTENDERS[part].split(",")
        if apex and part != "finetune_xsum":
            expected.insert(expected.index("lamb") + 1, "lamb_foreach")
        rows = figures[part]["rows"]
        assert [r["contender"] for r in rows] == expected, part
        assert all((r["batch"], r["source"], r["target"]) == shape and r["seq_s"] > 0 and r["tflops"] > 0
                   for r in rows), rows
        assert figures[part]["peak_tflops"] == peaks["matmul_tflops"]  # MFU against the peak measured in the run
        assert figures[part]["datasheet_tflops"] == 989.0  # the dry run's H100 SXM stand-in
    lengths = figures["finetune_lengths"]["rows"]  # XSum's lengths: tokens of real text, padding apart
    assert [(r["contender"], r["batching"]) for r in lengths] == [("hf", "padded"), ("adamw_compile_tokens", "tokens")]
    assert all(r["real_tokens_s"] > 0 and 0 <= r["padding"] < 1 for r in lengths)
    beam = figures["beam"]
    assert [r["batch"] for r in beam["rows"]] == list(gpu_suite.DRY_BEAM["batch_sizes"])
    assert beam["bandwidth_bytes_s"] == pytest.approx(peaks["bandwidth_bytes_s"])  # the peaks part's figure
    for r in beam["rows"]:
        assert r["ours_summaries_s"] > 0 and r["hf_summaries_s"] > 0 and 0 <= r["token_agreement"] <= 1
        assert r["ours_bandwidth_share"] > 0 and r["speedup"] == pytest.approx(r["hf_seconds"] / r["ours_seconds"])
    for key in ("train", "decode"):
        rows = figures["profile"][key]["rows"]
        assert 5 <= len(rows) <= 15 and sum(r["share"] for r in rows) <= 1 + 1e-9
        assert not any(r["kernel"].startswith("ProfilerStep") for r in rows)
        assert [r["ms"] for r in rows] == sorted((r["ms"] for r in rows), reverse=True)
    matrix = figures["matrix"]  # the configuration matrix's dry run: one row, one process, the whole job done
    assert matrix["processes"] == 1 and matrix["device"] == "cpu" and list(matrix["rows"]) == ["fp32_eager"]
    assert matrix["rows"]["fp32_eager"]["problems"] == [] and matrix["rows"]["fp32_eager"]["seconds"]["straight"] > 0
    tests = figures["tests"]  # CUDA is hidden from the dry run's parts: every GPU test skips
    assert tests["tests"] == tests["skipped"] >= 1 and tests["failed_tests"] == []
    for part in gpu_suite.PART_NAMES:
        assert (out / f"{part}.log").stat().st_size > 0


def test_dry_run_report_sections_and_figures(dry_run):
    out, suite, report = dry_run
    headings = [line for line in report.splitlines() if line.startswith("#")]
    expected = ["# GPU suite report (DRY RUN)", "## Parts", "## Targets", "## Versions", "## tests/e2e/test_gpu.py",
                "## Configuration matrix", "## Measured peaks", "## Pretraining, bart-large at 128", "## Pretraining, bart-large at 512",
                "## Fine-tuning, bart-large, XSum shape", "## Fine-tuning, bart-large, XSum's lengths",
                "## Beam search", "## Top kernels",
                "### one training step", "### one decode step"]
    assert len(headings) == len(expected)
    assert all(h.startswith(e) for h, e in zip(headings, expected)), headings
    assert "**Dry run on CPU**" in report and "not measurements" in report
    assert not re.search(r"^\*\*\w+: ", report, flags=re.M)  # no part reported as failed
    targets = report.split("## Targets")[1].split("## Versions")[0]
    checks = [line for line in targets.splitlines() if line.startswith("| ") and not line.startswith("| part")]
    assert len(checks) == 12 and all(line.rstrip(" |").endswith(("yes", "no")) for line in checks if "--fp8" not in line), checks
    assert "| pretrain128 | --fp8 MFU (datasheet) >= 50% | - | not measured |" in checks  # no float8 on CPU
    figures = suite["figures"]
    assert f"| torch | {figures['env']['torch']} |" in report
    assert "| container (NVIDIA_PYTORCH_VERSION / PYTORCH_BUILD_VERSION) |" in report
    assert f"{figures['peaks']['matmul_tflops']:,.1f} TFLOP/s" in report
    section = report.split("## Pretraining, bart-large at 512")[1].split("## Fine-tuning")[0]
    for r in figures["pretrain512"]["rows"]:
        assert f"| {r['contender']}: {r['label']} | {r['batch']} | {r['seconds']:.4f} | {r['seq_s']:,.1f} |" in section
    beam = report.split("## Beam search")[1].split("## Top kernels")[0]
    for r in figures["beam"]["rows"]:
        assert f"| {r['batch']} | {r['hf_summaries_s']:,.2f} | {r['ours_summaries_s']:,.2f} | {r['speedup']:.2f}x |" \
            in beam
        compiled = r["contenders"]["ours_compiled"]  # its speed, and its first call: the compile
        assert f"x, first call {compiled['first_call_seconds']:.1f} s) |" in beam.split(f"\n| {r['batch']} |")[1]
    matrix = report.split("## Configuration matrix")[1].split("## Measured peaks")[0]
    assert "| fp32_eager | fp32 off on fsdp pre padded | ok |" in matrix and "in 1 process (the strategies in" in matrix
    kernels = report.split("### one decode step")[1]
    assert figures["profile"]["decode"]["rows"][0]["kernel"][:120] in kernels


def test_failing_parts_are_reported_and_the_others_run(tmp_path):
    """A hung part is stopped at its limit, failing and out-of-memory parts are reported with the last line
    of their logs, and the part after them runs and gives its figures. Every part but the profile is a fault
    (the failing ones end at once): the hung part's share of the budget is small, the profile's large."""
    out = tmp_path / "out"
    failing = ("tests", "matrix", "peaks", "pretrain128", "pretrain512", "finetune_lengths", "beam")
    with fork_server() as python:  # the suite and its profile part forked; the faults are interpreters of their own
        run, seconds = _suite(out, "--dry-run", "--budget", "40", python=python,
                              faults=",".join([f"{p}=error" for p in failing] + ["env=hang", "finetune_xsum=oom"]))
    assert run.returncode == 0, run.stdout + run.stderr
    suite = json.loads((out / "suite.json").read_text())
    status = {p: s["status"] for p, s in suite["parts"].items()}
    assert list(status) == list(gpu_suite.PART_NAMES)  # the parts after a hung, failed or OOM part ran
    assert status["env"].startswith("timed out after") and all(status[p] == "failed (exit 1)" for p in failing)
    assert status["finetune_xsum"] == "out of memory" and status["profile"] == "ok"
    assert suite["parts"]["env"]["seconds"] < suite["parts"]["env"]["limit"] + 6
    assert suite["figures"]["profile"]["train"]["rows"] and suite["figures"]["profile"]["decode"]["rows"]
    assert all(suite["figures"][p] is None for p in ("env", "finetune_xsum", *failing))
    report = (out / "report.md").read_text()
    assert re.search(r"^\*\*env: timed out after \d+ s\*\*: `injected hang` \(raw log: `env.log`\)", report, re.M)
    for part in failing:
        assert f"**{part}: failed (exit 1)**: `RuntimeError: injected failure (GPU_SUITE_FAULTS)`" in report
    assert "**finetune_xsum: out of memory**: `torch.OutOfMemoryError: injected out of memory" in report
    assert "| pretrain128 | this project's best seq/s >= 1,400.0 | - | not measured |" in report
    assert "### one decode step: this project" in report and "### one training step: this project" in report
    assert seconds < 30 + 10
    hung = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline(pid).count("injected hang")]
    assert not hung  # the hung part's process group was ended


def _signal_state(pid) -> str:
    """A process's parent, state and signal masks (/proc/PID/status), for a failure's message."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return f"pid {pid}: " + ", ".join(line.strip() for line in status
                                              if line.startswith(("PPid", "State", "SigIgn", "SigBlk", "SigPnd",
                                                                  "ShdPnd", "SigCgt")))
    except OSError:
        return f"pid {pid}: gone"


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def test_without_cuda_and_without_dry_run_exits_2_in_one_line(tmp_path):
    """The whole suite, and the matrix alone, as docs/PERFORMANCE.md prints them."""
    for args in ([], ["--parts", "matrix"]):
        run, seconds = _suite(tmp_path / "out", *args, cuda_hidden=True)
        assert run.returncode == 2 and run.stdout == ""
        assert run.stderr.count("\n") == 1 and "no CUDA GPU is visible" in run.stderr and "--dry-run" in run.stderr
        assert not (tmp_path / "out").exists()  # refused before anything ran


@pytest.mark.parametrize("args, faults, named", [
    (["--budget", "0"], None, "--budget"), (["--parts", "env,nope"], None, "--parts"),
    ([], "peaks=explode", "GPU_SUITE_FAULTS"), ("file", None, "is a file"), ("none", None, "OUT_DIR missing")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, faults, named):
    if args == "file":
        (tmp_path / "taken").write_text("")
        args = [tmp_path / "taken", "--dry-run"]
    elif args == "none":
        args = []
    else:
        args = [tmp_path / "out", "--dry-run", *args]
    run, _ = _suite(*args, faults=faults)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and named in run.stderr, run.stderr
    assert not (tmp_path / "out").exists()


def test_datasheet_peaks_by_device_name():
    cases = {"NVIDIA H100 80GB HBM3": (989.0, 3.35), "NVIDIA H100 PCIe": (756.0, 2.0), "NVIDIA H100 NVL": (835.0, 3.9),
             "NVIDIA H200": (989.0, 4.8), "NVIDIA H200 NVL": (835.0, 4.8), "NVIDIA GH200 480GB": (989.0, None),
             "NVIDIA A100-SXM4-80GB": (312.0, 2.039), "NVIDIA A100-SXM4-40GB": (312.0, 1.555),
             "NVIDIA A100 80GB PCIe": (312.0, 1.935), "NVIDIA GeForce RTX 4090": (None, None), "": (None, None)}
    assert {name: gpu_suite.datasheet_peaks(name) for name in cases} == cases


def test_part_limits_share_the_time_left():
    weights = list(gpu_suite.PART_WEIGHTS.values())
    assert sum(weights) == 530  # the default 540 s budget (one 9-minute command), 10 s kept for the report
    assert gpu_suite.part_limits(530, weights) == pytest.approx(110)  # the tests, first
    # a part that finished early leaves its time to the ones after it, in proportion to their weights
    assert gpu_suite.part_limits(530 - 40, weights[1:]) == pytest.approx(490 * gpu_suite.PART_WEIGHTS["env"] / 420)
    assert gpu_suite.part_limits(100, weights[-1:]) == 100


def test_training_batch_shrinks_until_it_fits():
    """--shrink_on_oom: a batch that runs out of memory is retried at 3/4, 1/2, 1/4, 1/8 of it, slices
    of the same batches; without it the contender is reported out of memory."""
    seen = []

    def step(batch):
        rows = batch["input_ids"].shape[0]
        seen.append(rows)
        if rows > 100:
            raise torch.OutOfMemoryError("too big")

    batches = [{"input_ids": torch.arange(200 * 3).view(200, 3)} for _ in range(3)]
    assert bench_gpu_training._batch_candidates(200, True) == [200, 150, 100, 50, 25]
    size, seconds, memory, oom = bench_gpu_training.time_fitting(step, batches, 1, "cpu",
                                                                  bench_gpu_training._batch_candidates(200, True))
    assert (size, oom) == (100, [200, 150]) and seconds > 0 and memory > 0
    assert seen == [200, 150, 100, 100, 100]
    assert bench_gpu_training.time_fitting(step, batches, 1, "cpu", bench_gpu_training._batch_candidates(200, False)) \
        == (None, None, None, [200])


def test_beam_benchmark_reports_a_batch_that_does_not_fit_and_runs_the_next(tmp_path, monkeypatch):
    """bench_generation: transformers out of memory at batch 3 (this project timed alone), this project
    out of memory at 4 (the batch reported), batch 1 compared as usual; the JSON has every batch."""
    import transformers

    from bart.modeling import BartForConditionalGeneration
    values = json.load(open(os.path.join(ROOT, "configs", "config.json")))
    values.update(gpu_suite.DRY_CONFIG)
    (tmp_path / "config.json").write_text(json.dumps(values))

    def failing_from(cls, rows):
        original = cls.generate

        def generate(self, input_ids, **kwargs):
            if input_ids.shape[0] >= rows:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 GiB (a test)")
            return original(self, input_ids, **kwargs)
        monkeypatch.setattr(cls, "generate", generate)

    failing_from(transformers.BartForConditionalGeneration, 3)
    failing_from(BartForConditionalGeneration, 4)
    threads = torch.get_num_threads()
    monkeypatch.setattr(sys, "argv", ["bench_generation.py", "--config", str(tmp_path / "config.json"), "--device",
                                      "cpu", "--batch_sizes", "1", "3", "4", "--num_beams", "2", "--new_tokens", "4",
                                      "--source_length", "12", "--threads", "1", "--bandwidth", "10",
                                      "--json", str(tmp_path / "beam.json")])
    try:
        bench_generation.main()
    finally:
        torch.set_num_threads(threads)
    rows = json.loads((tmp_path / "beam.json").read_text())["rows"]
    assert [r["batch"] for r in rows] == [1, 3, 4]
    assert rows[0]["out_of_memory"] is None and rows[0]["hf_summaries_s"] > 0 and rows[0]["identical_rows"] == 1
    assert rows[0]["token_agreement"] == 1.0 and rows[0]["ours_bandwidth_share"] > 0
    assert rows[1]["out_of_memory"] == "transformers" and rows[1]["ours_summaries_s"] > 0
    assert rows[1]["hf_summaries_s"] is None and rows[1]["speedup"] is None and rows[1]["token_agreement"] is None
    assert rows[2] == {"batch": 4, "out_of_memory": "this project"}


def test_token_agreement_counts_positions_either_output_uses():
    pad = 1
    a = torch.tensor([[2, 5, 6, 7, 2], [2, 5, 2, pad, pad]])
    b = torch.tensor([[2, 5, 6, 8, 2], [2, 5, 2, pad, pad]])
    assert bench_generation._token_agreement(a, b, pad) == pytest.approx(7 / 8)
    assert bench_generation._token_agreement(a, b[:, :3], pad) == pytest.approx(6 / 8)


def test_report_keeps_the_rows_of_a_part_stopped_part_way(tmp_path):
    """A training part stopped at its limit after four contenders: its rows, MFU against the measured
    and datasheet peaks, the targets from them (the ratio to the faster of transformers' rows, here the compiled one;
    the --fp8 row held to its own MFU target, not the best of the others), and the status line; a pytest stopped
    before its XML is counted from its -v log."""
    (tmp_path / "peaks.json").write_text(json.dumps({"matmul_tflops": 800.0, "bandwidth_bytes_s": 3.0e12,
                                                     "matmul_size": 8192, "copy_bytes": 2**30, "device": "x"}))
    (tmp_path / "env.json").write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3"}))
    row = dict(shape="pretrain128", batch=200, source=128, target=128, out_of_memory=[], peak_gib=40.0)
    rows = [dict(row, contender="hf", label="transformers", seconds=0.25, seq_s=800.0, tokens_s=204800.0,
                 tflops=253.9),
            dict(row, contender="lamb", label="this project: apex.FusedLAMB", seconds=0.16, seq_s=1250.0,
                 tokens_s=320000.0, tflops=396.7, out_of_memory=[250]),
            dict(row, contender="lamb_fce_fp8_compile", label="this project: fp8", seconds=0.1333, seq_s=1500.0,
                 tokens_s=384000.0, tflops=476.0),
            dict(row, contender="hf_compile", label="transformers compiled", seconds=0.2222, seq_s=900.0,
                 tokens_s=230400.0, tflops=285.6)]
    (tmp_path / "pretrain128.json").write_text(json.dumps({"peak_tflops": 800.0, "rows": rows}))
    (tmp_path / "tests.log").write_text("tests/e2e/test_gpu.py::test_a[bf16] PASSED [ 10%]\n"
                                        "tests/e2e/test_gpu.py::test_b FAILED [ 20%]\n")
    suite = gpu_suite.Suite(str(tmp_path), False, 540.0, ["peaks", "pretrain128", "tests"], (None, None), time.time())
    suite.status = {"peaks": dict(status="ok", seconds=3.0, limit=15.0),
                    "pretrain128": dict(status="timed out after 140 s", seconds=140.0, limit=140.0,
                                        reason="compiling"),
                    "tests": dict(status="timed out after 75 s", seconds=75.0, limit=75.0, reason="")}
    report = render(suite)
    assert "| lamb: this project: apex.FusedLAMB | 200 (OOM at [250]) | 0.1600 | 1,250.0 | 320,000 | 396.7 | " \
           "49.6% | 40.1% | 40.0 | 1.56x |" in report
    assert "**pretrain128: timed out after 140 s**: `compiling` (raw log: `pretrain128.log`)" in report
    assert "| pretrain128 | this project's best seq/s >= 1,400.0 | 1,250.0 | no |" in report
    assert "| pretrain128 | MFU (datasheet) >= 45% | 40.1% | no |" in report
    assert "| pretrain128 | vs transformers + fused AdamW + torch.compile >= 1.6x | 1.39x | no |" in report
    assert "| pretrain128 | --fp8 MFU (datasheet) >= 50% | 48.1% | no |" in report
    assert "| pretrain512 | this project's best seq/s >= 290.0 | - | not measured |" in report
    assert "| memory bandwidth, 1,024 MiB copy (read + write), best of 10 | 3.000 TB/s | 3.35 TB/s | 89.6% |" in report
    assert "1 passed, 1 failed, 0 errors, 0 skipped, of 2 (from its log" in report
    assert "Failed: `tests/e2e/test_gpu.py::test_b`" in report


def test_gpu_commands_carry_the_shapes_the_measured_peaks_and_the_contenders(tmp_path):
    """The commands a GPU run gives its parts (the dry run only shows the tiny ones): the shapes it measures,
    the peaks the peaks part measured, the datasheet peak of the GPU's name, apex's LAMB and the
    project's own when apex can run, the profile at the batch pretraining could run."""
    (tmp_path / "env.json").write_text(json.dumps({"gpu": "NVIDIA H200", "apex_fused_lamb": True}))
    (tmp_path / "peaks.json").write_text(json.dumps({"matmul_tflops": 750.5, "bandwidth_bytes_s": 4.2e12}))
    (tmp_path / "pretrain128.json").write_text(json.dumps({"rows": [{"contender": "lamb_fce", "batch": 150}]}))
    suite = gpu_suite.Suite(str(tmp_path), False, 540.0, list(gpu_suite.PART_NAMES), (None, None), time.time())

    def flag(command, name):
        return command[command.index(name) + 1]

    for part, (batch, source, target) in gpu_suite.TRAIN_SHAPES.items():
        command = suite.command(part)
        assert command[1].endswith("bench_gpu_training.py") and "--shrink_on_oom" in command
        assert [flag(command, f) for f in ("--batch", "--source_length", "--target_length")] == \
            [str(batch), str(source), str(target)]
        assert float(flag(command, "--measured_tflops")) == 750.5 and float(flag(command, "--peak_tflops")) == 989.0
        assert flag(command, "--config").endswith(os.path.join("configs", "config.json"))
        assert "--device" not in command and "--compile_backend" not in command  # cuda, inductor
    assert flag(suite.command("pretrain512"), "--contenders") == "lamb_compile,hf,lamb_layers_compile"  # no eager LAMB
    assert flag(suite.command("finetune_xsum"), "--contenders") == "hf,adamw,adamw_compile,adamw_layers_compile"
    lengths = suite.command("finetune_lengths")  # XSum's lengths: every contender on the same 2,000 examples
    assert [flag(lengths, f) for f in ("--lengths", "--examples", "--batch")] == ["xsum", "2000", "40"]
    assert flag(lengths, "--contenders").startswith("hf,adamw_compile,") and "--device" not in lengths
    beam = suite.command("beam")
    assert [flag(beam, f) for f in ("--num_beams", "--new_tokens", "--source_length", "--dtype", "--device")] == \
        ["6", "62", "1024", "bf16", "cuda"]
    assert beam[beam.index("--batch_sizes") + 1:][:5] == ["64", "128", "32", "8", "1"]  # the targets' batches first
    assert float(flag(beam, "--bandwidth")) == pytest.approx(4200.0)  # GB/s
    assert flag(beam, "--contenders") == "ours,ours_compiled,hf" and "--compile_backend" not in beam
    assert flag(suite.command("profile"), "--train_batch") == "150" and "--dry-run" not in suite.command("profile")
    (tmp_path / "env.json").write_text(json.dumps({"gpu": "NVIDIA H200", "apex_fused_lamb": False}))
    assert flag(suite.command("pretrain128"), "--contenders") == \
        "hf,lamb_compile,hf_compile,lamb_layers_compile,lamb,lamb_fce"
    # --fp8 where the env part found torchao and float8 tensor cores: at 128, the FP8 target's shape, right after the
    # default (the rows after it are the first a short limit leaves out)
    (tmp_path / "env.json").write_text(json.dumps({"gpu": "NVIDIA H200", "fp8_training": "yes"}))
    assert flag(suite.command("pretrain128"), "--contenders") == \
        "hf,lamb_compile,lamb_fce_fp8_compile,hf_compile,lamb_layers_compile,lamb,lamb_fce"
    assert "fp8" not in flag(suite.command("pretrain512"), "--contenders") + flag(suite.command("finetune_xsum"),
                                                                                 "--contenders")


def test_training_contenders_build_the_optimizer_their_name_says():
    from bart.configuration import BartConfig
    from bart.modeling import BartForConditionalGeneration
    from bart.optim import Lamb
    config = BartConfig(**dict(json.load(open(os.path.join(ROOT, "configs", "config.json"))), **gpu_suite.DRY_CONFIG))
    state = BartForConditionalGeneration(config).state_dict()
    batch = bench_gpu_training.make_batches(1, 2, 8, 6, config.vocab_size, device="cpu")[0]
    for name, optimizer, label in (("adamw_fce", torch.optim.AdamW, "this project: AdamW(foreach) + fused CE"),
                                   ("lamb_foreach", Lamb, "this project: foreach LAMB"),
                                   ("lamb_fce", Lamb, "this project: foreach LAMB + fused CE")):
        step, found = bench_gpu_training.project_step_fn(state, config, name, "cpu")
        assert found == label
        trainer = dict(zip(step.__code__.co_freevars, (c.cell_contents for c in step.__closure__)))["trainer"]
        assert type(trainer.optimizer) is optimizer and trainer.settings.loss.fused_cross_entropy == ("fce" in name)
        step(batch)
    # the compiled contenders' scope (not stepped here: inductor compiles for tens of seconds on CPU)
    for name, scope, label in (("lamb_compile", "model", "this project: foreach LAMB + compile"),
                               ("adamw_layers_compile", "layers", "this project: AdamW(foreach) + compile (layers)")):
        step, found = bench_gpu_training.project_step_fn(state, config, name, "cpu")
        trainer = dict(zip(step.__code__.co_freevars, (c.cell_contents for c in step.__closure__)))["trainer"]
        assert found == label and trainer.forward_model.scope == scope == trainer.settings.model.compile_scope


def test_fp8_contender_trains_with_float8_linear_layers():
    """bench_gpu_training's --fp8 contender (emulated on CPU): float8 layers, the fp8 precision, a step that runs;
    the env part says why a machine cannot run it."""
    pytest.importorskip("torchao.float8")
    from bart.configuration import BartConfig
    from bart.modeling import BartForConditionalGeneration
    from bart.training.float8 import is_float8
    values = json.load(open(os.path.join(ROOT, "configs", "config.json")))
    config = BartConfig(**{**values, **gpu_suite.DRY_CONFIG, "encoder_layers": 2, "decoder_layers": 2})
    state = BartForConditionalGeneration(config).state_dict()
    step, label = bench_gpu_training.project_step_fn(state, config, "lamb_fce_fp8_compile", "cpu")
    assert label.endswith("+ fused CE + fp8 + compile")
    trainer = dict(zip(step.__code__.co_freevars, (c.cell_contents for c in step.__closure__)))["trainer"]
    assert trainer.precision.name == "fp8" and trainer.compilation is not None
    assert trainer.settings.loss.fused_cross_entropy
    assert any(is_float8(m) for m in trainer.model.modules())
    trainer.forward_model = trainer.model  # the step itself, not inductor's compile of it
    step(bench_gpu_training.make_batches(1, 2, 16, 16, config.vocab_size, device="cpu")[0])
    if not torch.cuda.is_available():
        assert "no CUDA GPU is visible" in gpu_suite._fp8_problem()


@pytest.mark.parametrize("when", ["starting", "running"])
def test_sigterm_ends_the_running_part_and_keeps_the_report(tmp_path, when):
    """Parts run in their own sessions (a timeout ends a part's whole process group), so a stop signal
    reaching the suite must end the running part itself: none is left running, the report says which
    part was interrupted and which did not run, the exit code is 128 + SIGTERM. ``starting``: the signal is sent
    once the part's log has its command line, while the suite starts the part (rules out: a signal that came while
    ``subprocess.Popen`` started the part left it running); ``running``: once the part printed its first line."""
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1", **{gpu_suite.FAULTS_ENV: "peaks=hang"})
    suite = subprocess.Popen([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_suite.py"), str(out), "--dry-run",
                              "--parts", "env,peaks,profile"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    # until the part starts or runs, however loaded the machine (the hang watch's rule, not a number of seconds)
    seen = "print('injected hang'" if when == "starting" else "\ninjected hang\n"  # its command line; its own line
    wait_for(lambda: seen in ((out / "peaks.log").read_text() if (out / "peaks.log").exists() else ""),
             suite, f"the peaks part's injected hang {when}")
    suite.terminate()
    _, stderr = suite.communicate(timeout=None)
    assert suite.returncode == 128 + 15
    assert stderr.strip().splitlines()[-1] == ("gpu_suite.py: stopped: SIGTERM: the running part was ended; report.md "
                                               "has the parts that finished")
    status = {p: s["status"] for p, s in json.loads((out / "suite.json").read_text())["parts"].items()}
    assert status == {"env": "ok", "peaks": "interrupted by SIGTERM: the suite stopped here",
                      "profile": "not run: the suite was stopped"}
    assert "**peaks: interrupted by SIGTERM: the suite stopped here**" in (out / "report.md").read_text()
    time.sleep(0.5)
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and "injected hang" in _cmdline(pid)]
    assert not left, [_signal_state(pid) for pid in left]  # (a loaded run once left one: what it held)
