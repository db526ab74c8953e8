"""``--compile`` for training: torch.compile that says what it costs and never costs a run.

:class:`CompiledOrEager` is the module the trainer runs forward through: the model compiled (inductor by
default), or, after a compile failure, the model itself. :meth:`Compilation.run` runs one update's
forward and backward passes through it and

- logs when it compiles (the first update, and any later one that compiles again) and how long that
  update took, compilation included;
- counts the recompiles over the run's shapes (a last, shorter batch, a phase 2 at another length):
  graphs compiled after the first update, from torch._dynamo's counters, each logged, and the total in
  the run's summary;
- on a compile failure, writes one warning line naming the error and ``--no-compile``, switches the
  module to eager for the rest of the run and runs the update again (its gradients are dropped first).
"""
from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable

import torch
import torch.fx.experimental._config  # use_duck_shape (CompiledOrEager.forward)

# --compile_backend's choices: torch.compile's default (what a CUDA run compiles with), and two cheap checks of what
# it would compile: aot_eager (dynamo's graphs, the same graph breaks and recompiles, traced through AOTAutograd into
# forward and backward graphs run by eager kernels) and eager (dynamo's graphs alone, run as traced: the same graph
# breaks and recompiles, no AOTAutograd, no code generation; the cheapest)
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
# --compile_scope's choices: what --compile compiles. model: the whole model in one graph (the embeddings, every
# layer, the LM head and the loss). layers: each encoder and decoder layer's forward, one graph per kind of layer
# shared by every layer of that kind (the rest eager), as torchtitan compiles per block: a compile whose length does
# not grow with depth (bart-base on CPU, inductor, cold: 23.5 s against 61.9 s; 2 graphs for 12 layers)
COMPILE_SCOPES = ("model", "layers")


def compile_errors() -> tuple[type, ...]:
    """The exceptions torch.compile raises for a failure of its own (tracing, lowering, code generation)."""
    from torch._dynamo.exc import TorchDynamoException
    errors: tuple[type, ...] = (TorchDynamoException,)
    try:
        from torch._inductor.exc import InductorError
        errors += (InductorError,)
    except ImportError:
        pass
    return errors


class CompiledOrEager(torch.nn.Module):
    """``model`` compiled, or itself once ``eager`` is set (a failed compile). ``_orig_mod`` is the model, as
    on torch.compile's own wrapper: state dicts and strategies reach it there. ``varying_lengths`` (fine-tuning:
    batches of any length): compiled with dynamic sizes from the first update (``dynamic=True``), so one compile
    serves every length. Dynamo's own rule compiles static sizes first and again for each size that changes,
    every graph of the model (an FSDP model's layers are graphs of their own): 7 recompiled graphs in a 4-update
    fine-tuning run under FSDP, a minute of compiling each time on CPU. Fixed-shape batches (pretraining) keep
    the static, specialized compile. Python floats (a layer norm's eps, the label smoothing) are traced as the
    constants they are (``specialize_float``): dynamo's default traced them as symbols, found them specialized
    after tracing and traced the whole model again (a quarter of a fine-tuning compile: 55 s to 42 s for
    the one-layer model of the tests on CPU). Dynamic sizes are not duck-shaped (``use_duck_shape``): dynamo took two
    sizes equal on the first batch for one (a target length equal to the batch size) and compiled again at the first
    batch where they differed. ``scope`` (``--compile_scope``): ``model``, the model in one graph;
    ``layers``, each encoder and decoder layer's forward compiled (the same compiled function for every layer of a
    kind), put in place for this module's forward passes only: generation, validation and the strategies' hooks
    (FSDP's unshard around each layer) run outside the compiled code."""

    def __init__(self, model: torch.nn.Module, backend="inductor", varying_lengths: bool = False,
                 scope: str = "model") -> None:
        super().__init__()
        if scope not in COMPILE_SCOPES:
            raise ValueError(f"scope must be one of {COMPILE_SCOPES}, got {scope!r}")
        self._orig_mod = model
        options = {} if backend == "inductor" else {"backend": backend}  # torch.compile's default as it is
        if varying_lengths:  # fine-tuning: every batch its own source and target lengths
            options["dynamic"] = True
        self.scope, self.varying_lengths = scope, varying_lengths
        if scope == "model":
            object.__setattr__(self, "compiled", torch.compile(model, **options))  # not a second submodule
        else:  # one compiled function per kind of layer: its graphs serve every layer of that kind
            compiled: dict = {}
            for kind in {type(layer) for layer in model.layers()}:
                compiled[kind] = torch.compile(kind.forward, **options)
            self.layer_forwards = [(layer, compiled[type(layer)]) for layer in model.layers()]
        self.eager = False
        self._installed = False

    def forward(self, *args, **kwargs):
        if self.eager:
            return self._orig_mod(*args, **kwargs)
        with torch._dynamo.config.patch(specialize_float=True), torch.fx.experimental._config.patch(
                use_duck_shape=not self.varying_lengths):
            if self.scope == "model":
                return self.compiled(*args, **kwargs)
            with self.layers_compiled():
                return self._orig_mod(*args, **kwargs)

    @contextlib.contextmanager
    def layers_compiled(self):
        """Scope ``layers``: each layer's forward the compiled one inside (an attribute of the instance, over its
        class's method); nothing otherwise, and nothing more when already inside. :meth:`Compilation.run` holds it
        around a whole update, so that the backward pass of a checkpointed layer (--gradient_checkpointing) recomputes
        with the forward it saved from (the eager one's tensors differ: torch.utils.checkpoint refuses them)."""
        if self.eager or self.scope != "layers" or self._installed:
            yield
            return
        self._installed = True
        try:
            for layer, forward in self.layer_forwards:
                layer.forward = functools.partial(forward, layer)
            yield
        finally:
            for layer, _ in self.layer_forwards:
                layer.__dict__.pop("forward", None)
            self._installed = False


def describe(err: BaseException) -> str:
    """``err`` in one line: its kind, and the first line of what it wraps (a backend's own error)."""
    root, seen = err, set()
    while id(root) not in seen:
        seen.add(id(root))
        inner = getattr(root, "inner_exception", None) or root.__cause__
        if inner is None:
            break
        root = inner
    lines = [line.strip() for line in str(root).splitlines() if line.strip()]
    text = f"{type(root).__name__}: {lines[0]}" if lines else type(root).__name__
    return text if root is err else f"{type(err).__name__}: {text}"


def _graphs() -> int:
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


class Compilation:
    """The compile bookkeeping of one run (see the module's docstring). ``log(data)``: a log record;
    ``warn(line)``: one line to the user."""

    def __init__(self, module: CompiledOrEager, log: Callable[[dict], None],
                 warn: Callable[[str], None] | None = None) -> None:
        self.module, self.log = module, log
        self.warn = warn or (lambda line: print(line, file=sys.stderr, flush=True))
        self.updates = 0
        self.recompiles = 0
        self.compile_s = 0.0  # wall time of the updates that compiled, compilation included
        self.failed: str | None = None

    def run(self, update: Callable[[], torch.Tensor], reset: Callable[[], None], shapes: str = "") -> torch.Tensor:
        """``update()``: one update's forward and backward passes; ``reset()``: drop what a failed one left
        (gradients). Returns what ``update`` returns."""
        if self.module.eager:
            return update()
        first = self.updates == 0
        if first:
            self.log({"compile": "compiling the model (torch.compile) on its first update; --no-compile runs eager"})
        graphs, start = _graphs(), time.perf_counter()
        try:
            with self.module.layers_compiled():  # forward and backward: a checkpointed layer recomputes compiled
                result = update()
        except compile_errors() as err:
            self.failed = describe(err)
            self.warn(f"[compile] warning: torch.compile failed ({self.failed[:300]}); training goes on eager "
                      f"(--no-compile skips compiling)")
            self.log({"compile": "failed, eager", "compile_error": self.failed[:300]})
            self.module.eager = True
            reset()
            return update()
        self.updates += 1
        new = _graphs() - graphs
        if new:
            took = time.perf_counter() - start
            self.compile_s += took
            if first:
                self.log({"compile": f"compiled {new} graph(s)", "compile_update_s": round(took, 3)})
            else:
                self.recompiles += new
                self.log({"compile": f"recompiled for new shapes{' ' + shapes if shapes else ''}",
                          "recompiles": self.recompiles, "compile_update_s": round(took, 3)})
        return result

    def summary(self) -> dict:
        """What the run's summary says about compilation."""
        out = {"compiled": not self.module.eager, "recompiles": self.recompiles,
               "compile_updates_s": round(self.compile_s, 3)}
        if self.failed:
            out["compile_error"] = self.failed[:300]
        return out
