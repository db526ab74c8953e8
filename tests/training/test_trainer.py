"""The training loop: accumulation and data-parallel invariance, exact resume after SIGKILL, NaN handling, the fp16
loss-scale floor."""
import os
import signal
import subprocess
import sys

import pytest
import torch

from bart.modeling import BartForConditionalGeneration
from bart.optim import build_optimizer, build_scheduler
from bart.records.dllogger_compat import read_dllogger
from bart.training.trainer import NonFiniteLossError, Trainer
from tests.helpers import ROOT
from tests.helpers.inductor import scalar_inductor
from tests.helpers.ports import free_port
from tests.helpers.processes import Watched
from tests.helpers.synthetic import (
    SyntheticBatches,
    WalkBatches,
    one_process,
    run_settings,
    tiny_config,
)


def _trainer(tmp_path, batch_size, grad_accum, max_steps=2, optimizer="adamw", precision="fp32", data=None,
             compile_model=False, compile_backend="inductor", layers=2, dropout=0.0, **settings_values):
    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(dropout=dropout, encoder_layers=layers, decoder_layers=layers))
    opt, clips = build_optimizer(model, optimizer, lr=1e-2, weight_decay=0.01, max_grad_norm=1.0)
    sched = build_scheduler(opt, "linear", 1, max_steps)
    data = data or SyntheticBatches(8 // batch_size, batch_size)
    settings = run_settings(precision, output_dir=str(tmp_path), max_steps=max_steps,
                            gradient_accumulation_steps=grad_accum, log_freq=1, **settings_values)
    return Trainer(model, opt, sched, data, settings, strategy=one_process(model), clips_internally=clips,
                   progress_bar=False, compile=compile_model, compile_backend=compile_backend)


@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
def test_gradient_accumulation_is_invariant(tmp_path, optimizer):
    one = _trainer(tmp_path / "a", batch_size=8, grad_accum=1, optimizer=optimizer)
    four = _trainer(tmp_path / "b", batch_size=2, grad_accum=4, optimizer=optimizer)
    one.fit(), four.fit()
    for (name, p), q in zip(one.model.named_parameters(), four.model.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-5, msg=name)
    assert [h["loss"] for h in one.history] == pytest.approx([h["loss"] for h in four.history], rel=1e-5)


def _casts_per_update(trainer) -> int:
    """Dtype casts (``aten::_to_copy``) in one update of ``trainer``, counted by torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    batches = [next(iter(trainer.train_data)) for _ in range(trainer.settings.optimization.gradient_accumulation_steps)]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        trainer.train_step(batches)
    return sum(e.name == "aten::_to_copy" for e in prof.profiler.function_events)


@pytest.mark.parametrize("optimizer,fused_cross_entropy", [("adamw", False), ("lamb", True)])
def test_weights_cast_once_per_update_train_like_autocast(tmp_path, optimizer, fused_cross_entropy):
    """--cast_weights_once (bf16, 2 micro-batches an update, dropout on): the linear weights cast once per update
    give the losses and weights of autocast's casts in every micro-batch, to 1e-6 relative (the same bf16
    products; only the order of fp32 additions may differ), every parameter trains, and an update casts less."""
    runs, initial = {}, None
    for once in (False, True):
        torch.manual_seed(1)  # the same dropout draws
        runs[once] = _trainer(tmp_path / str(once), batch_size=2, grad_accum=2, max_steps=3, optimizer=optimizer,
                              precision="bf16", dropout=0.1, cast_weights_once=once,
                              fused_cross_entropy=fused_cross_entropy)
        initial = {name: p.detach().clone() for name, p in runs[once].model.named_parameters()}
        runs[once].fit()
    assert [h["loss"] for h in runs[True].history] == pytest.approx([h["loss"] for h in runs[False].history],
                                                                    rel=1e-6)
    for (name, p), q in zip(runs[False].model.named_parameters(), runs[True].model.parameters()):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=1e-6, msg=name)
        assert not torch.equal(q, initial[name]), name  # it trained
    assert _casts_per_update(runs[True]) < _casts_per_update(runs[False])


def test_weights_cast_once_is_refused_where_it_cannot_be_honoured(tmp_path):
    """--cast_weights_once without autocast, with --compile or FSDP: one line naming the fix."""
    from bart.cli.settings import SettingsError
    from bart.errors import UserError
    for precision, values, message in (("fp32", {}, "add --bf16 or --fp16"),
                                       ("bf16", dict(compile=True), "drop --compile or it"),
                                       ("bf16", dict(distributed_strategy="fsdp"), "use --distributed_strategy ddp")):
        with pytest.raises(SettingsError, match=message):
            run_settings(precision, cast_weights_once=True, **values)
    with pytest.raises(UserError, match="add --no-compile, or drop --cast_weights_once"):
        _trainer(tmp_path, 2, 1, precision="bf16", cast_weights_once=True, compile_model=True)


class _FixedShapeBatches(SyntheticBatches):
    """Every batch padded to the same shape, as a pretraining run's are: one compiled graph, not a
    second, dynamic-shape one for the second batch (which doubled inductor's C++ compile time)."""

    def __iter__(self):
        for batch in super().__iter__():
            input_ids = torch.full((batch["input_ids"].shape[0], 16), 1)
            labels = torch.full((batch["labels"].shape[0], 12), -100)
            input_ids[:, :batch["input_ids"].shape[1]] = batch["input_ids"]
            labels[:, :batch["labels"].shape[1]] = batch["labels"]
            yield {"input_ids": input_ids, "attention_mask": (input_ids != 1).long(), "labels": labels}


def test_compile_trains_like_eager(tmp_path):
    """--compile (torch.compile, inductor on CPU) gives the eager updates; checkpoints keep plain names.
    Inductor's kernels are generated without explicit SIMD here (scalar C++, which the compiler may still
    vectorize), with a C++ wrapper (tests/helpers/inductor.py): the cheapest compile on a cold cache (a fresh CI
    machine)."""
    eager = _trainer(tmp_path / "eager", batch_size=4, grad_accum=1, optimizer="lamb", data=_FixedShapeBatches(2, 4),
                     layers=1)
    compiled = _trainer(tmp_path / "compiled", batch_size=4, grad_accum=1, optimizer="lamb", compile_model=True,
                        data=_FixedShapeBatches(2, 4), layers=1)
    eager.fit()
    with scalar_inductor(cpp_wrapper=True):
        summary = compiled.fit()
    assert compiled.forward_model is not compiled.model  # the compiled wrapper did the forward passes
    assert [h["loss"] for h in compiled.history] == pytest.approx([h["loss"] for h in eager.history], rel=1e-4)
    for (name, p), q in zip(eager.model.named_parameters(), compiled.model.parameters()):
        torch.testing.assert_close(p, q, atol=1e-4, rtol=1e-4, msg=name)
    saved = torch.load(summary["checkpoint"], weights_only=True)["model"]
    assert not any(k.startswith("_orig_mod.") for k in saved)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_compiled_layers_train_like_eager_in_two_graphs_at_any_depth(tmp_path, checkpointing):
    """--compile_scope layers: each encoder and decoder layer compiled (AOTAutograd's forward and backward graphs, run
    by eager kernels), one graph per kind of layer shared by every layer (2 graphs for 3+3 layers), gives the eager
    updates, with dropout, and with --gradient_checkpointing too (the backward pass recomputes a layer with the
    compiled forward it saved from: with the eager one torch.utils.checkpoint refused the recomputed tensors); outside
    the updates (generation, validation) the layers run their own forward, and checkpoints keep plain names."""
    from torch._dynamo.utils import counters
    runs = {}
    for name, compiled in (("eager", {}), ("layers", dict(compile_model=True, compile_backend="aot_eager",
                                                          compile_scope="layers"))):
        runs[name] = _trainer(tmp_path / name, batch_size=4, grad_accum=1, max_steps=3, optimizer="lamb",
                              data=_FixedShapeBatches(2, 4), layers=3, dropout=0.1, **compiled)
        for stack in (runs[name].model.model.encoder, runs[name].model.model.decoder):
            stack.gradient_checkpointing = checkpointing
    eager, compiled = runs["eager"], runs["layers"]
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(1)  # the same dropout draws
    eager.fit()
    torch.manual_seed(1)
    summary = compiled.fit()
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])
    assert summary["compiled"] is True and summary["recompiles"] == 0
    assert [h["loss"] for h in compiled.history] == pytest.approx([h["loss"] for h in eager.history], rel=1e-5)
    for (name, p), q in zip(eager.model.named_parameters(), compiled.model.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-5, msg=name)
    layers = [*compiled.model.model.encoder.layers, *compiled.model.model.decoder.layers]
    assert not any("forward" in vars(layer) for layer in layers)  # the class's own forward again
    saved = torch.load(summary["checkpoint"], weights_only=True)["model"]
    assert set(saved) == set(eager.model.state_dict())


def test_compile_scope_without_compiling_is_refused(tmp_path):
    """--compile_scope layers says what --compile compiles: with --no-compile, or where the run does not compile
    (a CPU run without --compile), it is one line naming the fix."""
    from bart.cli.settings import SettingsError
    from bart.errors import UserError
    with pytest.raises(SettingsError, match="this run has --no-compile: drop one of them"):
        run_settings(compile=False, compile_scope="layers")
    with pytest.raises(UserError, match="add --compile, or drop --compile_scope"):
        _trainer(tmp_path, 2, 1, compile_scope="layers")


class _LengthBatches:
    """Fine-tuning's batches: each padded to its own longest source and target. The first one's target length
    equals its batch size (4), as a batch of 40 with 40-token summaries would."""
    lengths = ((9, 4), (11, 6), (7, 3), (13, 5))

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for source, target in self.lengths:
            input_ids = torch.randint(4, 64, (4, source), generator=g)
            yield {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
                   "labels": torch.randint(4, 64, (4, target), generator=g)}


@pytest.mark.parametrize("scope", ["model", "layers"])
def test_a_compiled_fine_tuning_run_compiles_once_whatever_sizes_the_first_batch_shares(tmp_path, scope):
    """Fine-tuning compiles with dynamic sizes from the first update (varying_lengths): a first batch whose target
    length equals its batch size does not tie the two (dynamo's duck sizing took them for one size and compiled
    again at the first batch where they differed: a minute on a GPU, and each such pair one more time)."""
    from tests.helpers.synthetic import run_settings
    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(dropout=0.0, encoder_layers=1, decoder_layers=1))
    opt, clips = build_optimizer(model, "adamw", lr=1e-3, weight_decay=0.0, max_grad_norm=1.0)
    trainer = Trainer(model, opt, build_scheduler(opt, "linear", 0, 4), _LengthBatches(),
                      run_settings("fp32", output_dir=str(tmp_path), max_steps=4, log_freq=1, compile_scope=scope),
                      strategy=one_process(model), clips_internally=clips, progress_bar=False, compile=True,
                      compile_backend="eager", varying_lengths=True)
    torch._dynamo.reset()
    summary = trainer.fit()
    assert summary["compiled"] is True and summary["recompiles"] == 0, summary


def _failing_backend(graph_module, example_inputs):
    raise RuntimeError("no C++ compiler found (cl.exe)\nmore detail")


def test_a_compile_failure_is_one_warning_and_the_run_goes_on_eager(tmp_path, capsys):
    """--compile never costs a run: a backend that fails (forced here) gives one warning line naming the error
    and --no-compile, and the updates are the eager ones."""
    eager = _trainer(tmp_path / "eager", batch_size=4, grad_accum=2, max_steps=2, layers=1)
    failing = _trainer(tmp_path / "failing", batch_size=4, grad_accum=2, max_steps=2, compile_model=True,
                       compile_backend=_failing_backend, layers=1)
    eager.fit()
    capsys.readouterr()
    summary = failing.fit()
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "torch.compile failed" in line]
    assert len(warnings) == 1 and "no C++ compiler found" in warnings[0] and "--no-compile" in warnings[0]
    assert "Traceback" not in err
    assert summary["compiled"] is False and "no C++ compiler found" in summary["compile_error"]
    assert [h["loss"] for h in failing.history] == pytest.approx([h["loss"] for h in eager.history], rel=1e-6)
    for (name, p), q in zip(eager.model.named_parameters(), failing.model.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-6, msg=name)


def test_compile_is_logged_and_recompiles_over_the_shapes_are_counted(tmp_path, capsys):
    """The log says when it compiles and how long that update took; batches of other shapes (a last batch, a
    phase 2) recompile, each recompile logged and counted in the summary (dynamo's eager backend: tracing only)."""
    trainer = _trainer(tmp_path, batch_size=4, grad_accum=1, max_steps=2, compile_model=True,
                       compile_backend="eager", layers=1)
    torch._dynamo.reset()
    summary = trainer.fit()
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "compile" in line]
    assert "compiling the model (torch.compile)" in lines[0] and "--no-compile" in lines[0]
    assert any("compiled" in line and "compile_update_s" in line for line in lines)
    recompiled = [line for line in lines if "recompiled for new shapes" in line]
    assert summary["compiled"] is True and summary["recompiles"] >= 1 and len(recompiled) >= 1
    assert f"recompiles : {summary['recompiles']}" in recompiled[-1]


def test_compile_is_on_by_default_for_cuda_training_only():
    from bart.cli.args import ArgumentParser, add_flags
    from bart.cli.builder import compile_default
    from bart.cli.settings import ModelSettings, Settings
    parser = ArgumentParser()
    add_flags(parser, [ModelSettings], "pretrain.py")  # pretrain.py's and finetune.py's model flags

    def parsed(*argv):
        return Settings(**vars(parser.parse_args(["--config_path", "c.json", *argv])))
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    plain = parsed()
    assert compile_default(plain, cuda) is True and compile_default(plain, cpu) is False
    assert compile_default(parsed("--no-compile"), cuda) is False
    assert compile_default(parsed("--compile"), cpu) is True


def test_max_steps_is_exact_and_lr_follows_schedule(tmp_path):
    trainer = _trainer(tmp_path, batch_size=4, grad_accum=1, max_steps=5)
    summary = trainer.fit()
    assert trainer.step == 5 and [h["step"] for h in trainer.history] == [1, 2, 3, 4, 5]
    assert os.path.basename(summary["checkpoint"]) == "_step5.ckpt"
    assert trainer.history[-1]["learning_rate"] == pytest.approx(0.0)


class _NanData(SyntheticBatches):
    def __iter__(self):
        for batch in super().__iter__():
            batch["input_ids"] = batch["input_ids"].clone()
            yield batch


def test_nan_loss_stops_fp32_run_with_clear_message(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path, batch_size=4, grad_accum=1, max_steps=10)
    trainer.settings = trainer.settings.replace(max_consecutive_nonfinite=3)
    with torch.no_grad():
        trainer.model.lm_head.weight.fill_(float("nan"))
    with pytest.raises(NonFiniteLossError, match="NaN/inf for 3 consecutive updates"):
        trainer.fit()
    assert trainer.step == 0


def test_fp16_overflow_skips_update_and_scheduler(tmp_path):
    trainer = _trainer(tmp_path, batch_size=4, grad_accum=1, max_steps=3, precision="fp16")
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    micro = [next(iter(trainer.train_data))]
    micro[0]["labels"] = micro[0]["labels"].clone()
    with torch.no_grad():
        trainer.model.lm_head.weight[5, 0] = float("inf")
    lr_before = trainer.scheduler.get_last_lr()
    out = trainer.train_step(micro)
    assert out["applied"] is False
    assert trainer.scheduler.get_last_lr() == lr_before
    for k, v in trainer.model.state_dict().items():
        if k not in ("lm_head.weight", "model.shared.weight", "model.encoder.embed_tokens.weight",
                     "model.decoder.embed_tokens.weight"):
            assert torch.equal(v, before[k]), k


def _in_process(out_dir, *extra):
    """tests.helpers.train_driver in this process (one process, no process group), on one thread as the
    launched processes run (OMP_NUM_THREADS=1): the same arithmetic as ``python -m tests.helpers.train_driver``."""
    from tests.helpers import train_driver

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_driver.main([str(out_dir), *map(str, extra)])
    finally:
        torch.set_num_threads(threads)


def _steps(log_path):
    return {r["step"]: r["data"] for r in read_dllogger(log_path) if r["type"] == "LOG" and isinstance(r["step"], int)}


def test_fp16_loss_scale_floor_stops_the_run(tmp_path):
    from bart.modeling import BartForConditionalGeneration
    from bart.optim import build_optimizer, build_scheduler
    from bart.training.trainer import NonFiniteLossError, Trainer
    from tests.helpers.synthetic import (
        SyntheticBatches,
        one_process,
        run_settings,
        tiny_config,
    )

    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(dropout=0.0))
    optimizer, clips = build_optimizer(model, "adamw", lr=1e-3, weight_decay=0.0)
    settings = run_settings("fp16", output_dir=str(tmp_path), max_steps=50,
                            min_loss_scale=2.0 ** 12)  # 65536 halves to 4096 after 4 skipped updates
    trainer = Trainer(model, optimizer, build_scheduler(optimizer, "linear", 0, 50), SyntheticBatches(4, 4), settings,
                      strategy=one_process(model), clips_internally=clips, progress_bar=False)
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    with pytest.raises(NonFiniteLossError, match="--min_loss_scale"):
        trainer.fit()
    assert trainer.step == 0  # no skipped update was counted as applied
    assert not list(tmp_path.glob("*.ckpt"))  # and no checkpoint of a broken run



@pytest.mark.slow
def test_exact_resume_after_sigkill(tmp_path):
    """A driver process SIGKILLed after writing its step-5 checkpoint (held in the write of the next: write_faults'
    hold_write), resumed from it, logs the losses and learning rates of the uninterrupted run (dropout on: the RNG
    state travels too). The killed run is a real process; the uninterrupted and the resumed ones run in this process
    (the same arithmetic, one thread)."""
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    run = Watched([sys.executable, "-m", "tests.helpers.write_faults", "hold_write:6", "-m", "tests.helpers.train_driver",
                   str(killed), "--max_steps", "10"], forked=True)
    _in_process(straight, "--max_steps", "10")  # while the driver starts
    run.wait_for("write_faults: held in the write of")
    run.proc.send_signal(signal.SIGKILL)
    assert run.finish()[0] == -signal.SIGKILL
    assert max(int(n[5:-5]) for n in os.listdir(killed) if n.startswith("_step") and n.endswith(".ckpt")) == 5
    _in_process(killed, "--max_steps", "10", "--resume", killed / "_step5.ckpt")
    a, b = _steps(straight / "log.json"), _steps(killed / "log.json")
    for step in range(6, 11):
        assert b[step]["loss"] == pytest.approx(a[step]["loss"], abs=1e-6), step
        assert b[step]["learning_rate"] == pytest.approx(a[step]["learning_rate"], abs=1e-12), step


# the data-parallel runs (DDP, then FSDP2) and the one-process runs they are compared with
ONE_PROCESS = ["--max_steps", "3", "--dropout", "0", "--save_every", "0", "--optimizer", "adamw"]
FSDP = ["--max_steps", "3", "--dropout", "0", "--save_every", "0", "--grad_accum", "2", "--strategy", "fsdp"]
FSDP_RESUME = ["--max_steps", "4", "--strategy", "fsdp", "--optimizer", "adamw"]  # a checkpoint after every update


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """Two "nodes" (separate torchrun agents, --nnodes 2) on 127.0.0.1, one gloo process each, one launch of six
    runs in turn (tests.helpers.train_driver --then): DDP, DDP with the all-reduce in bf16 (--half_allreduce),
    FSDP2 (fully_shard) with gradient accumulation under AdamW and under LAMB, a 4-update FSDP run (dropout on)
    and a second one resumed from its step-2 checkpoint (as after a crash there). Each node writes its own copy
    of the parameters (``NAME_node{0,1}.pt``; FSDP gathers them to rank 0, node 0)."""
    base = tmp_path_factory.mktemp("two_nodes")
    port = free_port()
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    procs = []
    for node in (0, 1):
        runs = [base / "ddp", *ONE_PROCESS, "--dump_params", base / f"ddp_node{node}.pt",
                "--then", base / "half", *ONE_PROCESS, "--half_allreduce", "--dump_params", base / f"half_node{node}.pt"]
        for optimizer in ("adamw", "lamb"):
            runs += ["--then", base / optimizer, *FSDP, "--optimizer", optimizer,
                     "--dump_params", base / f"{optimizer}_node{node}.pt"]
        runs += ["--then", base / "straight", *FSDP_RESUME,
                 "--then", base / "resumed", *FSDP_RESUME, "--resume", base / "straight" / "_step2.ckpt"]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={node}",
               "--nproc_per_node=1", "--master_addr=127.0.0.1", f"--master_port={port}",
               "-m", "tests.helpers.train_driver", *map(str, runs)]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()[-4000:]
    return base


def _node_params(folder, name):
    """The parameters both nodes wrote for run NAME: equal to the bit (the nodes agree exactly)."""
    together, other = (torch.load(folder / f"{name}_node{n}.pt") for n in (0, 1))
    assert list(together) == list(other)
    for key in together:
        assert torch.equal(together[key], other[key]), (name, key)
    return together


@pytest.mark.slow
def test_two_torchrun_nodes_train_together_as_one_process(tmp_path, two_nodes):
    """Two nodes, one process each (DDP): the nodes agree exactly and hold the parameters of one process taking
    the whole batch; with the all-reduce in bf16 they stay within 2e-2 of them and really differ."""
    _in_process(tmp_path / "one", *ONE_PROCESS, "--dump_params", tmp_path / "one.pt")
    single = torch.load(tmp_path / "one.pt")  # the same flags in one process
    for run in ("ddp", "half"):
        together = _node_params(two_nodes, run)
        tol = dict(atol=2e-2, rtol=2e-2) if run == "half" else dict(atol=1e-5, rtol=1e-5)
        for name in single:
            torch.testing.assert_close(together[name], single[name], msg=f"{run} {name}", **tol)
        if run == "half":  # the bf16 all-reduce really changed something
            assert any(not torch.equal(single[n], together[n]) for n in single)


@pytest.mark.slow
def test_fsdp_trains_like_ddp(tmp_path, two_nodes):
    """The distribution seam: FSDP2 on two processes gives the parameters of one process taking the whole batch
    (which DDP gives: see above) after 3 updates with gradient accumulation, under AdamW (the trainer clips the
    sharded gradients) and LAMB (per-tensor trust ratios over sharded parameters), and its checkpoints hold
    full, plain tensors."""
    for optimizer in ("adamw", "lamb"):
        _in_process(tmp_path / optimizer, *[f for f in FSDP if f not in ("--strategy", "fsdp")], "--optimizer",
                    optimizer, "--dump_params", tmp_path / f"{optimizer}.pt")
        # the full state is gathered to rank 0 (node 0), as the checkpoint files hold it
        one, fsdp = torch.load(tmp_path / f"{optimizer}.pt"), torch.load(two_nodes / f"{optimizer}_node0.pt")
        assert list(fsdp) == list(one)  # every name of the unwrapped model's state dict, tied ones too
        for name in fsdp:
            assert type(fsdp[name]) is torch.Tensor and fsdp[name].shape == one[name].shape, name
            torch.testing.assert_close(fsdp[name], one[name], msg=f"{optimizer} {name}", atol=1e-5, rtol=1e-5)
        a, b = _steps(tmp_path / optimizer / "log.json"), _steps(two_nodes / optimizer / "log.json")
        for step in (1, 2, 3):
            assert b[step]["loss"] == pytest.approx(a[step]["loss"], abs=1e-6), (optimizer, step)


@pytest.mark.slow
def test_fsdp_resume_is_exact(two_nodes):
    """A second FSDP run resumed from the straight run's step-2 checkpoint (as after a crash there)
    continues it exactly."""
    straight, resumed = two_nodes / "straight", two_nodes / "resumed"
    state = torch.load(straight / "_step2.ckpt", weights_only=True)
    assert all(type(v) is torch.Tensor for v in state["model"].values())  # full tensors, not shards
    a, b = _steps(straight / "log.json"), _steps(resumed / "log.json")
    assert sorted(b) == [3, 4]
    for step in (3, 4):
        assert b[step]["loss"] == pytest.approx(a[step]["loss"], abs=1e-6), step


def test_strategies_come_from_their_table(monkeypatch, capsys):
    """--distributed_strategy NAME builds STRATEGIES[NAME]: a strategy added to the table is the one that runs,
    an unknown name is refused (never DDP), no name is DDP with several processes and nothing with one."""
    from bart.training.strategy import (
        STRATEGIES,
        DDPStrategy,
        FSDPStrategy,
        Strategy,
        build_strategy,
    )

    cpu = torch.device("cpu")

    class Mine(Strategy):
        name = "mine"
        summary = "the test's own"  # --distributed_strategy's help lists each strategy's summary

    monkeypatch.setitem(STRATEGIES, "mine", Mine)
    assert type(build_strategy("mine", 2, cpu)) is Mine
    assert type(build_strategy("fsdp", 2, cpu)) is FSDPStrategy and type(build_strategy(None, 2, cpu)) is DDPStrategy
    assert type(build_strategy("fsdp", 1, cpu)) is Strategy and type(build_strategy(None, 1, cpu)) is Strategy
    for world in (1, 2):
        with pytest.raises(ValueError, match="must be one of ddp, fsdp, mine, got 'zero3'"):
            build_strategy("zero3", world, cpu)
    import pretrain
    with pytest.raises(SystemExit):  # the flag's choices are the table's names
        pretrain.parse_args(["--config_path", "configs/config_tiny.json", "--data_dir", ".", "--output_dir", "out",
                             "--max_steps", "1", "--distributed_strategy", "zero3"])
    assert "--distributed_strategy: invalid choice: 'zero3'" in capsys.readouterr().err


@pytest.mark.parametrize("flags, allowed", [([], True), (["--bf16"], True), (["--bf16", "--no-tf32"], False),
                                            (["--fp16", "--no-tf32"], False), (["--no-tf32"], False)])
def test_no_tf32_reaches_the_training_loop(tmp_path, flags, allowed):
    """--no-tf32 keeps the fp32 parts of a bf16/fp16 run strict fp32: the builder hands it to the trainer."""
    import pretrain
    from bart.cli import builder
    from bart.runtime.distributed import read_env

    args = pretrain.parse_args(["--config_path", "configs/config_tiny.json", "--data_dir", str(tmp_path), "--output_dir",
                                str(tmp_path / "out"), "--max_steps", "1",
                                *flags])
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = not allowed
        trainer = builder.build_trainer(args, BartForConditionalGeneration(tiny_config()), SyntheticBatches(1, 2),
                                        read_env({}), total_steps=1)
        assert trainer.precision.allow_tf32 is allowed
        assert torch.backends.cuda.matmul.allow_tf32 is allowed and torch.backends.cudnn.allow_tf32 is allowed
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


FP8_STEPS, FP8_WINDOW, FP8_BOUND = 200, 25, 0.1  # updates, window of the loss means compared, nats


def _built_run(tmp_path, flags, steps):
    """A run built as pretrain.py builds it (its flags, ``builder.build_model`` and ``build_trainer``) on a micro
    BART (two layers per stack) and copy-task batches, not yet trained."""
    import pretrain
    from bart.cli import builder
    from bart.configuration import BartConfig
    from bart.runtime.distributed import read_env
    from tests.helpers.corpus import micro_config

    args = pretrain.parse_args(["--config_path", "configs/config_tiny.json", "--data_dir", str(tmp_path),
                                "--output_dir", str(tmp_path / "out"), "--max_steps", str(steps), "--log_freq", "1",
                                "--learning_rate", "1e-2", "--warmup_steps", "5", "--lr_end", "0", "--dropout", "0",
                                "--weight_decay", "0", "--no_tensorboard", *flags])
    torch.manual_seed(0)
    config = BartConfig(**micro_config(encoder_layers=2, decoder_layers=2, vocab_size=64, dropout=0.0))
    model = builder.build_model(args, config)
    return builder.build_trainer(args, model, WalkBatches(steps), read_env({}), total_steps=steps)


@pytest.fixture(scope="module")
def fp8_and_bf16_runs(tmp_path_factory):
    """The same micro run, --bf16 and --fp8 --fp8_emulate (torchao's emulation on CPU), FP8_STEPS updates each."""
    pytest.importorskip("torchao.float8")
    runs = {}
    for name, flags in (("bf16", ["--bf16"]), ("fp8", ["--fp8", "--fp8_emulate"])):
        trainer = _built_run(tmp_path_factory.mktemp(name), flags, FP8_STEPS)
        runs[name] = trainer, trainer.fit()
    return runs


def test_fp8_emulated_loss_stays_within_bound_of_bf16(fp8_and_bf16_runs):
    """--fp8 (float8 products of every linear layer but the LM head and the first and last layer, emulated):
    over 200 updates of a micro BART the loss falls as bf16's does, every 25-update mean within 0.1 nats."""
    from bart.training.float8 import float8_summary

    (bf16, _), (fp8, _) = fp8_and_bf16_runs["bf16"], fp8_and_bf16_runs["fp8"]
    assert "float8 linear layers 16 of 33 (torchao, emulated" in float8_summary(fp8.model)
    assert fp8.precision.name == "fp8" and fp8.precision.autocast_dtype == torch.bfloat16 and fp8.scaler is None
    curves = [[h["loss"] for h in run.history] for run in (bf16, fp8)]
    assert [len(c) for c in curves] == [FP8_STEPS, FP8_STEPS]
    means = [[sum(c[i:i + FP8_WINDOW]) / FP8_WINDOW for i in range(0, FP8_STEPS, FP8_WINDOW)] for c in curves]
    assert means[0][-1] < means[0][0] - 2.0, means  # the task is learned
    assert max(abs(a - b) for a, b in zip(*means)) < FP8_BOUND, means
    assert curves[0] != curves[1]  # the float8 rounding did happen


def test_fp8_checkpoint_layout_is_bf16s(fp8_and_bf16_runs, tmp_path):
    """An --fp8 run's checkpoint holds what a bf16 run's does (names, shapes, fp32 dtypes; Float8Linear keeps
    nn.Linear's parameters): it loads strictly into a plain model, and a bf16 run resumes from it (--allow_resume_change precision)."""
    from bart.configuration import BartConfig
    from tests.helpers.corpus import micro_config

    saved = {name: torch.load(summary["checkpoint"], weights_only=True)["model"]
             for name, (_, summary) in fp8_and_bf16_runs.items()}
    layout = {name: {k: (v.shape, v.dtype) for k, v in sd.items()} for name, sd in saved.items()}
    assert layout["fp8"] == layout["bf16"] and all(dtype == torch.float32 for _, dtype in layout["fp8"].values())
    plain = BartForConditionalGeneration(BartConfig(**micro_config(encoder_layers=2, decoder_layers=2, vocab_size=64)))
    plain.load_state_dict(saved["fp8"], strict=True)
    resumed = _built_run(tmp_path, ["--bf16", "--allow_resume_change", "precision", "max_steps"], FP8_STEPS + 1)
    resumed.resume(fp8_and_bf16_runs["fp8"][1]["checkpoint"])
    assert resumed.step == FP8_STEPS
    for name, value in resumed.model.state_dict().items():
        assert torch.equal(value, saved["fp8"][name]), name


def test_fp8_converts_every_chosen_linear_layer_and_each_computes():
    """--fp8's conversion (applied by the builder): every linear layer but the LM head, the first layer
    (encoder.layers.0) and the last (decoder.layers[-1]) is a Float8Linear, the tied head still shares the
    embeddings, and every converted layer does the product of a training step (attention's fused q/k/v
    GEMM would bypass the projections' own forward)."""
    pytest.importorskip("torchao.float8")
    from bart.configuration import BartConfig
    from bart.training.float8 import convert_to_float8, is_float8
    from tests.helpers.corpus import micro_config

    model = BartForConditionalGeneration(BartConfig(**micro_config(encoder_layers=3, decoder_layers=3, vocab_size=64)))
    converted = convert_to_float8(model, emulate=True)
    float8 = {n for n, m in model.named_modules() if is_float8(m)}
    linear = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    kept = {n for n in linear if n == "lm_head" or n.startswith(("model.encoder.layers.0.", "model.decoder.layers.2."))}
    assert float8 == set(converted) == linear - kept and len(float8) == 2 * 6 + 2 * 10
    assert model.lm_head.weight is model.model.shared.weight
    ran = set()
    for name in float8:
        model.get_submodule(name).register_forward_hook(lambda m, i, o, name=name: ran.add(name))
    ids = torch.randint(4, 64, (2, 9))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(input_ids=ids, labels=ids).loss.backward()
    assert ran == float8


def test_an_fp8_model_validates_and_decodes_as_its_weights_in_bf16():
    """Outside training the float8 layers compute as the linear layers they replaced, under the run's bf16 autocast:
    generation (beam search under torch.inference_mode) and validation's token loss of an --fp8 model are those of
    a plain model holding the same weights decoded in bf16 (what run_eval.py --bf16 and the export give), and in
    training the products are float8's. Rules out: generate raised NotImplementedError (aten.to.dtype on torchao's
    float8 tensor), so an --fp8 run's validation, --do_predict and best-k ended in a traceback."""
    pytest.importorskip("torchao.float8")
    import copy
    from types import SimpleNamespace

    from bart.configuration import BartConfig
    from bart.runtime.precision import Precision
    from bart.training.float8 import convert_to_float8
    from bart.training.validation import token_loss
    from tests.helpers.corpus import micro_config

    torch.manual_seed(0)
    config = BartConfig(**micro_config(encoder_layers=2, decoder_layers=2, vocab_size=64, init_std=0.2, dropout=0.0))
    model = BartForConditionalGeneration(config)
    plain = copy.deepcopy(model)
    assert convert_to_float8(model, emulate=True)  # the layers it converted
    ids = torch.randint(4, 64, (3, 9))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        trained = model(input_ids=ids, labels=ids).loss
        assert not torch.equal(trained, plain(input_ids=ids, labels=ids).loss)  # float8 products in training
        trained.backward()
    for m in (model, plain):
        m.eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = model.generate(ids, num_beams=2, max_length=12, min_length=0, no_repeat_ngram_size=0)
        bf16 = plain.generate(ids, num_beams=2, max_length=12, min_length=0, no_repeat_ngram_size=0)
    assert torch.equal(ours, bf16) and len(set(ours.flatten().tolist())) > 3  # the same tokens, and not one repeated
    batch = [{"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}]
    losses = [token_loss(SimpleNamespace(model=m, device=torch.device("cpu"), precision=Precision("fp8")), batch)
              for m in (model, plain)]
    assert losses[0] == losses[1] and model.training  # validation's loss is the bf16 one; training mode back
