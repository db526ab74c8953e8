"""report.md of benchmarks/gpu_suite.py: the parts' figures in tables, the targets beside them.

Each section shows what its part wrote (a part stopped part-way keeps the rows it finished) and,
when the part did not end well, its status and the last line of its log. MFU is recomputed here from
each row's achieved TFLOP/s: against the bf16 matmul peak the peaks part measured (the benchmark's
own measurement when the peaks part did not run) and against the datasheet peak of the GPU's name.
"""
from __future__ import annotations

import time

# What the suite runs and the targets its report holds the figures to (benchmarks/gpu_suite.py imports them).
# The targets on an H100 or H200: MFU against the datasheet peak, seq/s that MFU on an H100 SXM; the ratio to the faster
# of transformers' rows (compiled where hf_compile ran, so the ratio is honest); fp8_mfu: the --fp8 row's MFU
TARGETS = {"pretrain128": dict(seq_s=1400.0, mfu=0.45, vs_hf=1.6, fp8_mfu=0.50),
           "pretrain512": dict(seq_s=290.0, mfu=0.40, vs_hf=1.3), "finetune_xsum": dict(seq_s=3 * 74.6),
           "finetune_lengths": dict(vs_hf=1.5), "beam": dict(summaries_s=200.0, vs_hf=3.0)}
# (batch, source, target) of the training parts; the dry run's tiny stand-ins
TRAIN_SHAPES = {"pretrain128": (200, 128, 128), "pretrain512": (32, 512, 512), "finetune_xsum": (40, 1024, 60)}
DRY_TRAIN_SHAPES = {"pretrain128": (4, 32, 32), "pretrain512": (2, 64, 64), "finetune_xsum": (2, 96, 12)}
# the batch sizes in the order they run: the targets' batches first (on an H200 the suite reached only batches 1 and 8
# of the old order 1, 8, 32, 64, 128 within the part's limit); "rising": the batches whose summaries/s must not
# fall; "profile": the batch the profile decodes
BEAM = dict(batch_sizes=(64, 128, 32, 8, 1), rising=(32, 64, 128), profile=32, source_length=1024, new_tokens=62,
            num_beams=6)
# the dry run: five batch sizes in the GPU run's order (its rising three, its profile batch),
# two beams, 4 new tokens (the profile steps to the middle one): every code path of the GPU run, little CPU time
DRY_BEAM = dict(batch_sizes=(4, 5, 3, 2, 1), rising=(3, 4, 5), profile=3, source_length=16, new_tokens=4, num_beams=2)
REPORT_ORDER = ("env", "tests", "matrix", "peaks", "pretrain128", "pretrain512", "finetune_xsum", "finetune_lengths",
                "beam", "profile")


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _compiled(row: dict) -> str:
    """The compile_generation contender's summaries/s in a beam row, and its ratio to the eager search."""
    entry = (row.get("contenders") or {}).get("ours_compiled") or {}
    if entry.get("failed"):
        return f"failed: {str(entry['failed'])[:60]}"
    if entry.get("out_of_memory"):
        return "out of memory"
    seconds = entry.get("seconds")
    if not seconds:
        return "-"
    first = f", first call {entry['first_call_seconds']:.1f} s" if entry.get("first_call_seconds") else ""  # compiles
    return f"{_num(row['batch'] / seconds, 2)} ({row['ours_seconds'] / seconds:.2f}x{first})" \
        if row.get("ours_seconds") else _num(row["batch"] / seconds, 2) + first


def _table(header: list, rows: list) -> list:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
        ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x, digits=1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _met(value, target) -> str:
    if value is None:
        return "not measured"
    return "yes" if value >= target else "no"


class Report:
    def __init__(self, suite):
        self.suite = suite
        self.tflops, self.tbps, self.datasheet_source = suite.datasheet()
        self.peaks = suite.figures("peaks") or {}
        self.checks: list = []  # (section, target, figure, met)

    def status_note(self, part: str) -> list:
        """Nothing when the part ran well; else its status, the end of its log and where the log is."""
        if part not in self.suite.parts:
            return ["*Not selected (--parts).*"]
        status = self.suite.status.get(part)
        if status is None:
            return ["*Not run yet.*"]
        if status["status"] == "ok":
            return []
        reason = f": `{_cell(status['reason'])}`" if status.get("reason") else ""
        return [f"**{part}: {status['status']}**{reason} (raw log: `{part}.log`)"]

    # -- sections -------------------------------------------------------------------------
    def parts(self) -> list:
        rows = []
        for name in REPORT_ORDER:
            if name not in self.suite.parts:
                continue
            s = self.suite.status.get(name)
            if s is None:
                rows.append([name, "not run yet", "", "", f"{name}.log"])
            else:
                rows.append([name, s["status"], f"{s['seconds']:.1f}", f"{s['limit']:.0f}", f"{name}.log"])
        return ["## Parts", ""] + _table(["part", "status", "seconds", "limit s", "raw log"], rows)

    def versions(self) -> list:
        env = self.suite.figures("env")
        lines = ["## Versions", ""] + self.status_note("env")
        if env:
            memory = f"{env['gpu_memory_gib']:.1f} GiB" if env.get("gpu_memory_gib") else "-"
            lines += _table(["item", "version"], [[item, env.get(key, "-")] for item, key in (
                ("driver (nvidia-smi)", "driver"), ("CUDA (torch build)", "cuda"), ("cuDNN", "cudnn"),
                ("torch", "torch"), ("transformers", "transformers"), ("apex", "apex"), ("dllogger", "dllogger"),
                ("python", "python"), ("container (NVIDIA_PYTORCH_VERSION / PYTORCH_BUILD_VERSION)", "container"))])
            gpu = f"| GPU | {env.get('gpu')} (x{env.get('gpu_count')}, {memory}) |"
            lines.insert(lines.index("|---|---|") + 1, gpu)
        return lines

    def tests(self) -> list:
        counts = self.suite.figures("tests")
        lines = ["## tests/e2e/test_gpu.py", ""] + self.status_note("tests")
        if counts:
            source = "from its log: pytest stopped before writing its XML, later tests did not run" \
                if counts.get("partial") else "pytest's XML: `tests.xml`"
            lines.append(f"{counts['passed']} passed, {counts['failures']} failed, {counts['errors']} errors, "
                         f"{counts['skipped']} skipped, of {counts['tests']} ({source}).")
            if counts["failed_tests"]:
                lines += ["", "Failed: " + ", ".join(f"`{t}`" for t in counts["failed_tests"])]
            if counts["skip_reasons"]:
                lines += ["", "Skipped because: " + "; ".join(counts["skip_reasons"])]
        return lines

    def matrix(self) -> list:
        """The configuration matrix: each row's choices, whether it did the whole job (else its problems), its
        seconds and compile figures (matrix.json)."""
        found = self.suite.figures("matrix")
        lines = ["## Configuration matrix", ""] + self.status_note("matrix")
        if found:
            processes = found["processes"]
            lines += [f"Each row one whole fine-tuning job (stopped by SIGTERM, resumed, predicted, evaluated, exported, "
                      f"loaded by transformers; benchmarks/config_matrix.py) in {processes} process"
                      f"{'es' if processes > 1 else ' (the strategies in their single-process form)'}.", ""]
            rows = []
            for name, row in found["rows"].items():
                choices = row["row"]
                compiled = row["compile"].get("straight", {})
                rows.append([name, " ".join(f"{choices[k]}" for k in ("precision", "compile", "fused_ce", "strategy",
                                                                      "layer_norm", "vocab")),
                             "ok" if not row["problems"] else "; ".join(row["problems"]),
                             f"{row['seconds'].get('total', 0):.1f}",
                             "-" if not compiled else f"{compiled.get('compile_updates_s', 0):.1f} s, "
                                                      f"{compiled.get('recompiles', 0)} recompiles"])
            lines += _table(["row", "precision compile fused-CE strategy LN vocabulary", "job", "seconds",
                             "compile"], rows)
        return lines

    def peak_figures(self) -> list:
        lines = ["## Measured peaks", ""] + self.status_note("peaks")
        p = self.peaks
        if p:
            flops, bandwidth = p["matmul_tflops"], p["bandwidth_bytes_s"] / 1e12
            header = ["figure", "measured in this run", f"datasheet ({self.datasheet_source})", "measured / datasheet"]
            lines += _table(header, [
                [f"bf16 matmul, {p['matmul_size']}^3, best of 10", f"{flops:,.1f} TFLOP/s",
                 f"{self.tflops:,.0f} TFLOP/s" if self.tflops else "unknown (--datasheet_tflops)",
                 _pct(flops / self.tflops) if self.tflops else "-"],
                [f"memory bandwidth, {p['copy_bytes'] / 2**20:,.0f} MiB copy (read + write), best of 10",
                 f"{bandwidth:,.3f} TB/s", f"{self.tbps:,.2f} TB/s" if self.tbps else "unknown (--datasheet_tbps)",
                 _pct(bandwidth / self.tbps) if self.tbps else "-"]])
        return lines

    def training(self, part: str, title: str) -> list:
        batch, source, target = (DRY_TRAIN_SHAPES if self.suite.dry_run else TRAIN_SHAPES)[part]
        lines = [f"## {title} ({source}/{target} tokens, batch {batch}"
                 f"{' or the largest that fits' if part != 'finetune_xsum' else ''})", ""] + self.status_note(part)
        data = self.suite.figures(part) or {}
        rows = data.get("rows", [])
        measured_peak = self.peaks.get("matmul_tflops") or data.get("peak_tflops")
        measured = [r for r in rows if "seq_s" in r]
        peers = [r for r in measured if r["contender"].startswith("hf")]
        hf = next((r for r in peers if r["contender"] == "hf"), None)  # the table's column: eager transformers
        peer = max(peers, key=lambda r: r["seq_s"], default=None)  # the targets': the faster of transformers' rows
        fp8 = next((r for r in measured if "fp8" in r["contender"]), None)  # a target of its own
        best = max((r for r in measured if r not in peers and r is not fp8), key=lambda r: r["seq_s"], default=None)
        table = []
        for r in rows:
            name = f"{r['contender']}: {r['label']}"
            if "seq_s" not in r:
                table.append([name, f"out of memory at batch {r['out_of_memory']}"] + [""] * 9)
                continue
            shrunk = f" (OOM at {r['out_of_memory']})" if r.get("out_of_memory") else ""
            table.append([name, f"{r['batch']}{shrunk}", f"{r['seconds']:.4f}", _num(r["seq_s"]),
                          _num(r["tokens_s"], 0), _num(r["tflops"]),
                          _pct(r["tflops"] / measured_peak if measured_peak else None),
                          _pct(r["tflops"] / self.tflops if self.tflops else None), _num(r["peak_gib"]),
                          f"{r['seq_s'] / hf['seq_s']:.2f}x" if hf else "-",
                          _num(r["compile_s"]) if r.get("compile_s") is not None else "-"])
        if table:
            lines += ["Contenders: `hf` transformers + fused AdamW (`hf_compile` under torch.compile); this project's "
                      "`lamb` (apex FusedLAMB where it can run, `lamb_foreach` the project's own), `_fce` fused "
                      "cross-entropy, `_compile` --compile (the default on CUDA; the others --no-compile), "
                      "`_layers_compile` --compile_scope layers, `_fp8` --fp8. "
                      f"MFU against the measured peak ({_num(measured_peak)} TFLOP/s) and the datasheet's "
                      f"({_num(self.tflops, 0)} TFLOP/s).", ""]
            lines += _table(["contender", "batch", "s/update", "seq/s", "tokens/s (src+tgt)", "TFLOP/s",
                             "MFU measured peak", "MFU datasheet", "peak GiB", "vs transformers",
                             "compile s (not in s/update)"], table)
        goal = TARGETS[part]
        seq = best["seq_s"] if best else None
        checks = [(f"this project's best seq/s >= {goal['seq_s']:,.1f}", _num(seq), _met(seq, goal["seq_s"]))]
        if "mfu" in goal:
            mfu = best["tflops"] / self.tflops if best and self.tflops else None
            checks.append((f"MFU (datasheet) >= {goal['mfu']:.0%}", _pct(mfu), _met(mfu, goal["mfu"])))
            ratio = best["seq_s"] / peer["seq_s"] if best and peer else None
            named = "transformers + fused AdamW" + (" + torch.compile" if peer and peer["contender"] == "hf_compile"
                                                    else "")
            checks.append((f"vs {named} >= {goal['vs_hf']}x", _num(ratio, 2) + "x" * bool(ratio),
                           _met(ratio, goal["vs_hf"])))
        if "fp8_mfu" in goal:
            mfu = fp8["tflops"] / self.tflops if fp8 and self.tflops else None
            checks.append((f"--fp8 MFU (datasheet) >= {goal['fp8_mfu']:.0%}", _pct(mfu), _met(mfu, goal["fp8_mfu"])))
        return lines + self.targets(part, checks, best and f"{best['contender']}")

    def lengths(self) -> list:
        """Fine-tuning at XSum's length distribution: tokens of real text per second, against transformers' rows."""
        lines = ["## Fine-tuning, bart-large, XSum's lengths (sources and targets drawn from XSum's length "
                 "distribution)", ""] + self.status_note("finetune_lengths")
        rows = (self.suite.figures("finetune_lengths") or {}).get("rows", [])
        hf = next((r for r in rows if r["contender"] == "hf"), None)  # transformers as its Trainer runs by default
        best = max((r for r in rows if not r["contender"].startswith("hf")), key=lambda r: r["real_tokens_s"],
                   default=None)
        if rows:
            lines += ["Every contender trains on the same examples: `padded` batches of a fixed size padded to their "
                      "longest row, or `tokens` budgets (the fine-tuning loader's --max_tokens_per_batch). Compiled "
                      "contenders compile for any length in their warm-up updates. Padding does not count.", ""]
            lines += _table(["contender", "batching", "updates", "sequences/update", "real tokens/s", "padding",
                             "s/update", "peak GiB", "vs transformers"],
                            [[f"{r['contender']}: {r['label']}", r["batching"], r["updates"],
                              _num(r["sequences_per_update"]), _num(r["real_tokens_s"], 0), _pct(r["padding"]),
                              f"{r['seconds_per_update']:.4f}", _num(r["peak_gib"]),
                              f"{r['real_tokens_s'] / hf['real_tokens_s']:.2f}x" if hf else "-"] for r in rows])
        goal = TARGETS["finetune_lengths"]
        ratio = best["real_tokens_s"] / hf["real_tokens_s"] if best and hf else None
        checks = [(f"real tokens/s vs transformers (padded batches, eager) >= {goal['vs_hf']}x",
                   _num(ratio, 2) + "x" * bool(ratio), _met(ratio, goal["vs_hf"]))]
        return lines + self.targets("finetune_lengths", checks, best and best["contender"])

    def beam(self) -> list:
        shape = DRY_BEAM if self.suite.dry_run else BEAM
        lines = [f"## Beam search (bf16, beams {shape['num_beams']}, {shape['new_tokens']} new tokens, "
                 f"{shape['source_length']}-token sources)", ""] + self.status_note("beam")
        data = self.suite.figures("beam") or {}
        rows, table = sorted(data.get("rows", []), key=lambda r: r["batch"]), []
        for r in rows:
            if r.get("ours_summaries_s") is None:
                table.append([r["batch"], "", f"{r['out_of_memory']}: out of memory"] + [""] * 7)
                continue
            hf = r.get("hf_summaries_s")
            table.append([r["batch"], _num(hf, 2) if hf else f"{r['out_of_memory']}: out of memory",
                          _num(r["ours_summaries_s"], 2), f"{r['speedup']:.2f}x" if hf else "-",
                          _pct(r["hf_bandwidth_share"]), _pct(r["ours_bandwidth_share"]),
                          f"{r['identical_rows']}/{r['batch']}" if hf else "-", _pct(r["token_agreement"]),
                          f"{_num(r['ours_peak_mib'], 0)} / {_num(r['hf_peak_mib'], 0)}", _compiled(r)])
        if table:
            lines += ["Random weights, workload `full` (every row decodes every step), outputs of the two compared "
                      "token by token; bandwidth share: the least bytes a call reads over the measured copy "
                      "bandwidth.", ""]
            lines += _table(["batch", "transformers summaries/s", "this project summaries/s", "speedup",
                             "bandwidth share transformers", "bandwidth share this project", "rows identical",
                             "token agreement", "peak MiB ours / transformers",
                             "compile_generation summaries/s (vs ours, its first call: the compile)"], table)
        measured = [r for r in rows if r.get("ours_summaries_s")]
        best = max(measured, key=lambda r: r["ours_summaries_s"]) if measured else None
        goal = TARGETS["beam"]
        tail = [r for r in measured if r["batch"] in shape["rising"]]
        rising = None
        if len(tail) == 3:
            rising = all(b["ours_summaries_s"] >= a["ours_summaries_s"] for a, b in zip(tail, tail[1:]))
        sizes = "/".join(str(b) for b in shape["rising"])
        checks = [(f"summaries/s >= {goal['summaries_s']:.0f}", _num(best and best["ours_summaries_s"], 2),
                   _met(best and best["ours_summaries_s"], goal["summaries_s"])),
                  (f"vs transformers >= {goal['vs_hf']}x (at the fastest batch)",
                   f"{best['speedup']:.2f}x" if best and best["speedup"] else "-",
                   _met(best and best["speedup"], goal["vs_hf"])),
                  (f"summaries/s not falling over batch {sizes}",
                   " -> ".join(f"{r['ours_summaries_s']:,.1f}" for r in tail) or "-",
                   "not measured" if rising is None else "yes" if rising else "no")]
        return lines + self.targets("beam", checks, best and f"batch {best['batch']}")

    def targets(self, part: str, checks: list, best) -> list:
        self.checks += [(part, *c) for c in checks]
        return ["", f"Targets (H100){f', best: {best}' if best else ''}:", ""] + \
            _table(["target", "figure", "met"], [list(c) for c in checks])

    def kernels(self) -> list:
        lines = ["## Top kernels", ""] + self.status_note("profile")
        data = self.suite.figures("profile") or {}
        for key, title in (("train", "one training step"), ("decode", "one decode step")):
            found = data.get(key)
            if not found:
                lines += ["", f"### {title}", "", "*not measured*"]
                continue
            lines += ["", f"### {title}: {found['label']}, {found['shape']} ({found['total_ms']:,.2f} ms "
                          f"{'of CPU operator time' if self.suite.dry_run else 'of GPU time'})", ""]
            lines += _table(["kernel", "calls", "ms", "share"], [
                [r["kernel"][:120], r["calls"], f"{r['ms']:,.3f}", _pct(r["share"])] for r in found["rows"]])
        return lines


def render(suite) -> str:
    report = Report(suite)
    dry = suite.dry_run
    elapsed = time.time() - suite.started
    head = ["# GPU suite report" + (" (DRY RUN)" if dry else ""), ""]
    if dry:
        head += ["**Dry run on CPU**: tiny model and shapes, one or two steps, torch.compile's eager backend. The "
                 "figures only show that every part's code runs; they are not measurements of anything.", ""]
    head += [f"Written {time.strftime('%Y-%m-%d %H:%M:%S')}, {elapsed:.0f} s into a budget of {suite.budget:.0f} s; "
             f"raw logs and figures: `<part>.log`, `<part>.json` in this folder.", ""]
    body = []
    sections = {"env": report.versions, "tests": report.tests, "matrix": report.matrix, "peaks": report.peak_figures,
                "pretrain128": lambda: report.training("pretrain128", "Pretraining, bart-large at 128"),
                "pretrain512": lambda: report.training("pretrain512", "Pretraining, bart-large at 512"),
                "finetune_xsum": lambda: report.training("finetune_xsum", "Fine-tuning, bart-large, XSum shape"),
                "finetune_lengths": report.lengths,
                "beam": report.beam, "profile": report.kernels}
    for name in REPORT_ORDER:
        section = sections[name]()
        if dry:  # every section says its figures are the dry run's
            section[0] += " (dry run)"
        body += [""] + section
    summary = ["## Targets" + (" (dry run)" if dry else ""), ""] + _table(["part", "target", "figure", "met"], [list(c) for c in report.checks])
    return "\n".join(head + report.parts() + [""] + summary + body) + "\n"
