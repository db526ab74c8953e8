"""Beam-search speed: this project's generate against transformers' generate and CTranslate2, same weights
and inputs.

bart-base geometry (configs/config_base.json; --config configs/config.json for bart-large; a Pre-LN config
runs against transformers' mBART) with random weights, beams 4, no-repeat 3. Three workloads: ``full`` (512-token sources, 64 new tokens, batch
sizes 1, 8, 32, 64) suppresses EOS until the last step (min_length), so every row decodes every step (pure
decode cost); ``short`` (128-token sources, 24 new tokens, batch 4 and 8) likewise, where per-step
overheads weigh most; ``ragged`` (as full) makes EOS likely (a bias on its logit, --eos_bias; min_length 8,
as the start token, EOS, makes it the likeliest first token of random weights) so that, as in real
summarization, sources finish at different steps (what finished rows still cost shows there).
--batch_sizes, --source_length and --new_tokens override the workload's. Sources are random token ids, or
real English text with --sources lee (the Lee news corpus, 300 Australian news documents, from gensim's
wheel on PyPI, downloaded once into ~/.cache/bart_bench) or --sources FILE (a document a line): row i is
the documents from number i on, cut at the source length.

Contenders (--contenders, comma-separated, or all; default ours,hf): ``ours`` (this project, the
reference of every comparison: plain model.generate, which on CPU in fp32 decodes with the packed copy kept
beside the model), ``ours_unpacked`` (generate(packed=False): the model's own weights, plain generate before
that copy), ``ours_packed`` (run_eval.py's path: prepare_for_decoding(model, "fp32", packed=...) as
bart.generation.precision.decodes_packed says), ``ours_compiled`` (generate(compile_generation=True)), ``ours_bf16`` and
``ours_int8`` (bart.generation.precision.prepare_for_decoding), ``hf`` (transformers' generate; up to
--hf_max_batch), ``ct2_fp32`` and ``ct2_int8`` (CTranslate2, the same weights written by bart.export's
code and converted by its TransformersConverter in this run, into a temporary folder; int8 is its
compute_type at load). A contender that is not available (not installed, an option generate does not
have yet) is named with the reason and left out; one that fails at a batch is reported and the others run.
transformers must return the same tokens as ours before the timings count (--allow_mismatch to report
only); every other contender is compared with ours: rows identical, token agreement (the share of
positions where both returned the same token), why they differ (CTranslate2 fp32: the same as ours with
renormalize_logits=True means the settings, as CTranslate2 takes its log-softmax after the n-gram and
length bans; otherwise the log-prob gap of the two tokens where the first row leaves ours, under the fp32
model: near 0 is a near-tie that rounding decides) and, for bf16/int8, ROUGE-L of their decoded outputs
against ours (the fp32 output is the reference: with random weights there is no true summary). The
settings' mapping onto CTranslate2 is the package's ``bart.ct2.ct2_options`` (tests/export/test_ctranslate2.py
checks it).

Every contender runs once (the checked run), then --repeats times in turn (ours, transformers, ...,
ours, ...) and medians are reported. Per contender and batch: median seconds, summaries/s, new tokens/s
(generated tokens of ours' sequences, start token excluded), peak memory during generate (CUDA: max
allocated above the level before the call; CPU: peak resident set size above the level before the call,
sampled every 5 ms, after freed memory is handed back to the system with malloc_trim so that one run does
not reuse what the previous one left; measured in the checked run only: the timed runs have no sampler
thread, which on a 2-core machine preempts one of torch's OpenMP threads), the speedup over transformers and over ours. The summary line
gives the versions and the load average.

    python benchmarks/bench_generation.py [--workload full|short|ragged] [--batch_sizes 1 8 32 64] [--threads 2]
        [--repeats 1] [--source_length 512] [--new_tokens 64] [--config configs/config.json] [--device cpu]
        [--contenders all] [--sources lee] [--hf_max_batch 8] [--json rows.json] [--bandwidth GB/s]

With --json the rows are also written there (rewritten after every batch size, so a process stopped
part-way keeps the batch sizes it finished), with the token agreement of ours and transformers and, under
"contenders", every contender's figures and comparison. --bandwidth gives the copy bandwidth to divide by
instead of measuring it (and the bandwidth column on CPU too). A batch size that runs out of memory is
reported as such and the next one runs.
"""
import argparse
import atexit
import contextlib
import ctypes
import dataclasses
import gc
import json
import os
import shutil
import statistics
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bart.configuration import BartConfig  # noqa: E402

# CTranslate2: generate's settings as translate_batch's options and what it does differently (bart/ct2.py)
from bart.ct2 import ct2_options, ct2_vocabulary  # noqa: E402
from bart.modeling import BartForConditionalGeneration  # noqa: E402

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def _trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass


class PeakMemory:
    """Peak memory of the block above the level at its start, in bytes."""

    def __init__(self, device: str):
        self.device, self.peak = device, 0

    def __enter__(self):
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.start = torch.cuda.memory_allocated()
        else:
            gc.collect()
            _trim()
            self.start = self.top = _rss()
            self.running = True
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()
        return self

    def _sample(self):
        while self.running:
            self.top = max(self.top, _rss())
            time.sleep(0.005)

    def __exit__(self, *exc):
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self.start
        else:
            self.running = False
            self.thread.join()
            self.peak = max(self.top, _rss()) - self.start
        return False


def _identical_rows(a: torch.Tensor, b: torch.Tensor, pad: int) -> int:
    """Sources whose returned sequences are the same tokens (trailing padding aside)."""
    width = max(a.shape[1], b.shape[1])
    a = torch.nn.functional.pad(a, (0, width - a.shape[1]), value=pad)
    b = torch.nn.functional.pad(b, (0, width - b.shape[1]), value=pad)
    return int((a == b).all(1).sum())


def _token_agreement(a: torch.Tensor, b: torch.Tensor, pad: int) -> float:
    """The share of positions (either output not padding there) where both returned the same token."""
    width = max(a.shape[1], b.shape[1])
    a = torch.nn.functional.pad(a, (0, width - a.shape[1]), value=pad)
    b = torch.nn.functional.pad(b, (0, width - b.shape[1]), value=pad)
    used = (a != pad) | (b != pad)
    return float(((a == b) & used).sum()) / max(int(used.sum()), 1)


def _copy_bandwidth(device: str, nbytes: int = 2**30) -> float:
    """Bytes/s of a large copy on the device (read + write), best of 10."""
    x = torch.empty(nbytes, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    best = float("inf")
    for _ in range(12):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        y.copy_(x)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    del x, y
    return 2 * nbytes / best


def _least_bytes(model, sequences: torch.Tensor, source_length: int, pad: int, beams: int) -> float:
    """A lower bound of the bytes one generate call reads: the encoder's weights once (the token
    embedding aside: a lookup reads only the source's rows); per decode step the decoder's weights
    (cross-attention K/V projections aside: they run once) and the LM head (the whole shared
    embedding), the cross K/V of every source still running (a source runs until its returned
    sequence ends) and the filled self K/V cache of its beams."""
    config, size = model.config, next(model.parameters()).element_size()
    params = dict(model.named_parameters())
    encoder = sum(p.numel() for n, p in params.items() if ".encoder." in n)
    decoder = sum(p.numel() for n, p in params.items() if ".decoder." in n
                  and "encoder_attn.k_proj" not in n and "encoder_attn.v_proj" not in n)
    decoder += params["model.shared.weight"].numel()  # the LM head
    lengths = (sequences[:, 1:] != pad).sum(1).tolist()  # steps each source ran
    kv_per_token = 2 * config.decoder_layers * config.d_model * size
    total = encoder * size + max(lengths) * decoder * size
    for steps in lengths:
        total += steps * source_length * kv_per_token  # cross K/V, read every step
        total += beams * kv_per_token * steps * (steps + 1) // 2  # self K/V: positions 1..steps
    return float(total)


WORKLOADS = {  # source length, new tokens, batch sizes (flags override)
    "full": (512, 64, [1, 8, 32, 64]), "ragged": (512, 64, [1, 8, 32, 64]), "short": (128, 24, [4, 8])}
# ragged: the decoder's start token is EOS, so random weights make EOS the likeliest first tokens; rows may end
# from this length on (then at different steps)
RAGGED_MIN_LENGTH = 8
CONTENDERS = ("ours", "ours_unpacked", "ours_packed", "ours_compiled", "ours_bf16", "ours_int8", "hf", "ct2_fp32",
              "ct2_int8")
REDUCED = {"ours_bf16": "bf16", "ours_int8": "int8", "ct2_int8": "int8"}
LEE_WHEEL = "gensim==4.4.0"  # its wheel ships the Lee news corpus (300 Australian news documents), as the demo uses


def _cache_dir() -> str:
    folder = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "bart_bench")
    os.makedirs(folder, exist_ok=True)
    return folder


def lee_corpus() -> str:
    """The Lee news corpus (one document a line) from gensim's wheel on PyPI, downloaded once into the cache."""
    import glob
    import subprocess
    import zipfile

    path = os.path.join(_cache_dir(), "lee_background.txt")
    if not os.path.isfile(path):
        download = os.path.join(_cache_dir(), "download")
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "-d", download, LEE_WHEEL], check=True)
        with zipfile.ZipFile(glob.glob(os.path.join(download, "gensim-*.whl"))[0]) as z:
            data = z.read("gensim/test/test_data/lee_background.cor")
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
    return path


def text_sources(tokenizer, path: str, rows: int, length: int, offset: int = 0) -> torch.Tensor:
    """``rows`` sources of exactly ``length`` tokens (<s> ... </s>) of real text: row i is the documents
    from number offset + i on, one after the other, cut at ``length``."""
    documents = [line.strip() for line in open(path, encoding="utf-8") if line.strip()]
    encoded = {}
    out = []
    for row in range(rows):
        ids, k = [], offset + row
        while len(ids) < length - 2:
            d = k % len(documents)
            if d not in encoded:
                encoded[d] = tokenizer(" " + documents[d], add_special_tokens=False)["input_ids"]
            ids += encoded[d]
            k += 1
        out.append([tokenizer.bos_token_id] + ids[:length - 2] + [tokenizer.eos_token_id])
    return torch.tensor(out)


def first_difference(model, ours: torch.Tensor, theirs: torch.Tensor, ids: torch.Tensor, pad: int):
    """(row, position, log-prob gap) of the first position where a row of ``theirs`` leaves ``ours``: the
    difference of the fp32 model's log-probs of the two tokens there, given the common prefix (a gap near 0
    is a near-tie that rounding decides). None when every row is the same."""
    width = max(ours.shape[1], theirs.shape[1])
    a = torch.nn.functional.pad(ours, (0, width - ours.shape[1]), value=pad)
    b = torch.nn.functional.pad(theirs.to(ours.device), (0, width - theirs.shape[1]), value=pad)
    for row in range(a.shape[0]):
        diff = (a[row] != b[row]).nonzero()
        if len(diff):
            position = int(diff[0])
            with torch.no_grad():
                logits = model(input_ids=ids[row:row + 1], attention_mask=torch.ones_like(ids[row:row + 1]),
                               decoder_input_ids=a[row:row + 1, :position]).logits[0, -1].float()
            logp = torch.log_softmax(logits, -1)
            return row, position, abs(float(logp[a[row, position]] - logp[b[row, position]]))
    return None


def rouge_l(predictions: list, references: list) -> float:
    """Mean ROUGE-L F1 x 100 of each prediction against its reference; a prediction equal to its
    reference counts 100 (rouge-score gives 0 for two empty texts)."""
    from bart.scoring.metrics import calculate_rouge

    scores = [100.0 if p == r else calculate_rouge([p], [r], rouge_keys=("rougeL",), bootstrap=False)["rougeL"]
              for p, r in zip(predictions, references)]
    return sum(scores) / max(len(scores), 1)


def _gap_reason(found, renormalized_same: bool, reduced: bool = False) -> str:
    """Why a contender's output differs from this project's fp32 one, in a few words."""
    if renormalized_same:
        return "settings: = ours with renormalize_logits=True (CT2 takes its log-softmax after the bans)"
    if found is None:
        return ""
    row, position, gap = found
    kind = ("reduced precision" if reduced else "numerics (near-tie)" if gap < 1e-3 else
            "numerics or settings (beam scores)")
    return f"{kind}: row {row} leaves ours at token {position}, log-prob gap {gap:.2g}"


def _convert_ct2(ours, config_values: dict, tokenizer_dir: str, folder: str) -> str:
    """``ours``'s weights through ``python -m bart.export``'s code and CTranslate2's converter; returns the
    CTranslate2 model folder. Tokens for the rows the tokenizer lacks (a model's vocab_size above it) are
    added to the converter's copy only: CTranslate2 needs one token per row."""
    from bart import ct2
    from bart.export import export

    checkpoint = os.path.join(folder, "model.ckpt")
    torch.save({"model": ours.state_dict(), "config": ours.config.to_dict(), "step": 0}, checkpoint)
    hf_dir = os.path.join(folder, "hf")
    export(checkpoint, hf_dir, tokenizer=tokenizer_dir, allow_tokenizer_mismatch=True)
    out = os.path.join(folder, "ct2")
    os.makedirs(out)
    ct2.convert(hf_dir, out, config_values["vocab_size"], ct2.model_settings(ours.config))
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/config_base.json")
    parser.add_argument("--batch_sizes", type=int, nargs="+", help="default: the workload's")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="full")
    parser.add_argument("--eos_bias", type=float,
                        help="ragged: added to the EOS logit (default 1.5 with text sources, 2.0 with random ids: "
                             "rows of bart-base's random weights then end between about 10 and 64 new tokens)")
    parser.add_argument("--source_length", type=int, help="default: the workload's")
    parser.add_argument("--new_tokens", type=int, help="default: the workload's")
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1, help="timed runs after the checked warm-up run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32",
                        help="weights and activations of both models (bf16/fp16: the models are cast)")
    parser.add_argument("--allow_mismatch", action="store_true",
                        help="report the share of token-identical rows instead of stopping when outputs differ "
                             "(half precision: the two implementations round differently and near-ties can flip)")
    parser.add_argument("--json", help="also write the rows here (rewritten after every batch size)")
    parser.add_argument("--compile_backend", default="inductor",
                        help="torch.compile backend of ours_compiled (eager: dynamo only, for dry runs)")
    parser.add_argument("--bandwidth", type=float, help="copy bandwidth in GB/s to divide by (measured when not given)")
    parser.add_argument("--contenders", default="ours,hf",
                        help=f"comma-separated, from {','.join(CONTENDERS)}, or 'all' (those not available are "
                             f"reported and left out)")
    parser.add_argument("--hf_max_batch", type=int, help="transformers only up to this batch size (its time is the "
                                                         "longest)")
    parser.add_argument("--sources", default="random",
                        help="random token ids, 'lee' (the Lee news corpus, real English) or a text file (one "
                             "document a line)")
    parser.add_argument("--tokenizer", help="tokenizer folder for text sources, CTranslate2 and ROUGE (default: "
                                            "GPT-2's BPE as BART's, assembled offline)")
    return parser


def parse_args(argv=None):
    """The flags, the workload's defaults filled in; and the contenders' names (one not known: one line)."""
    args = _parser().parse_args(argv)
    if args.compile_backend != "inductor":  # compile_generation calls torch.compile(..., mode=...)
        import functools
        torch.compile = functools.partial(torch.compile, backend=args.compile_backend)
    source_length, new_tokens, batch_sizes = WORKLOADS[args.workload]
    args.source_length = args.source_length or source_length
    args.new_tokens = args.new_tokens or new_tokens
    args.batch_sizes = args.batch_sizes or batch_sizes
    names = list(CONTENDERS) if args.contenders == "all" else [n.strip() for n in args.contenders.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown or "ours" not in names:
        raise SystemExit(f"bench_generation: --contenders {args.contenders!r}: "
                         + (f"unknown {unknown}" if unknown else "'ours' (the reference of the agreement) is missing")
                         + f"; choose from {','.join(CONTENDERS)} or all")
    return args, names


@dataclasses.dataclass
class Bench:
    """What every batch size shares: the flags, the two models (the same weights), generate's settings, the
    tokenizer (text sources, CTranslate2, ROUGE) and, once made, the contenders' runners."""
    args: argparse.Namespace
    values: dict  # the model's configuration
    hf: torch.nn.Module
    ours: torch.nn.Module
    dtype: torch.dtype
    bandwidth: float  # bytes/s, or None: no bandwidth column
    settings: dict
    pad: int
    versions: list
    tokenizer: object = None
    tokenizer_dir: str = None
    text_path: str = None
    runners: dict = dataclasses.field(default_factory=dict)  # name -> (label, runner)
    skipped: dict = dataclasses.field(default_factory=dict)  # name -> why it is not available

    def decode(self, sequences):
        return [t.strip() for t in self.tokenizer.batch_decode(sequences.cpu(), skip_special_tokens=True)]


def build(args, names) -> Bench:
    """transformers' BART with random weights (seed 0) and this project's with the same ones, on the device in the
    dtype; generate's settings for the workload; the tokenizer and the text sources where they are needed."""
    import transformers  # here: the GPU suite's peaks part uses _copy_bandwidth alone
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    values = json.load(open(args.config))
    values.update(dropout=0.0, forced_bos_token_id=None, forced_eos_token_id=None)
    # transformers' aliases (num_hidden_layers, ...) left out: 5.x reads a leftover one over encoder_layers
    hf_values = {k: v for k, v in values.items()
                 if k not in ("pre_ln", "dtype", "model_type", *transformers.BartConfig.attribute_map)}
    # a Pre-LN config is transformers' mBART (its layer norms inside each branch and a final one per stack)
    kind, config = ((transformers.MBartForConditionalGeneration, transformers.MBartConfig) if values.get("pre_ln")
                    else (transformers.BartForConditionalGeneration, transformers.BartConfig))
    hf = kind(config(**{"scale_embedding": False, **hf_values}, attn_implementation="sdpa"))
    ours = BartForConditionalGeneration(BartConfig(**values))
    if args.workload == "ragged":
        if args.eos_bias is None:
            args.eos_bias = 2.0 if args.sources == "random" else 1.5
        with torch.no_grad():
            hf.final_logits_bias[0, values["eos_token_id"]] = args.eos_bias
    ours.load_state_dict(hf.state_dict())
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    hf, ours = hf.to(args.device, dtype).eval(), ours.to(args.device, dtype).eval()
    bandwidth = args.bandwidth * 1e9 if args.bandwidth else (
        _copy_bandwidth(args.device) if args.device.startswith("cuda") else None)
    settings = dict(num_beams=args.num_beams, max_length=args.new_tokens + 1,
                    min_length=args.new_tokens if args.workload in ("full", "short") else RAGGED_MIN_LENGTH,
                    no_repeat_ngram_size=3, length_penalty=1.0, early_stopping=True)
    bench = Bench(args, values, hf, ours, dtype, bandwidth, settings, values.get("pad_token_id", 1),
                  [f"torch {torch.__version__}", f"transformers {transformers.__version__}"])
    if args.sources != "random" or any(n.startswith("ct2") or n in REDUCED for n in names):
        from bart.tokenization.tokenization_bart import BartTokenizer
        bench.tokenizer_dir = args.tokenizer
        if bench.tokenizer_dir is None:
            from bart.tokenization.build_tokenizer import build_tokenizer_folder
            bench.tokenizer_dir = build_tokenizer_folder(os.path.join(_cache_dir(), "gpt2_bart_tokenizer"))
        bench.tokenizer = BartTokenizer.from_pretrained(bench.tokenizer_dir)
    bench.text_path = None if args.sources == "random" else (lee_corpus() if args.sources == "lee" else args.sources)
    return bench


# a runner: (ids, mask, meter) -> (output, seconds), the call timed and measured (meter: a context manager,
# PeakMemory or nullcontext) without what it needs before (loading, conversion of the inputs)
def generate_runner(bench: Bench, model, **extra):
    """A runner of ``model.generate`` (this project's or transformers') with the benchmark's settings."""
    def run(ids, mask, meter):
        with meter:
            start = time.perf_counter()
            out = model.generate(ids, attention_mask=mask, **bench.settings, **extra)
            if bench.args.device.startswith("cuda"):
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
        return out, seconds
    return run


def ct2_contender(bench: Bench, name: str, ct2_dir: list):
    """(label, runner) of ct2_fp32 or ct2_int8: this project's weights converted once (into ``ct2_dir``, shared by
    both), translate_batch with generate's settings as bart.ct2 maps them."""
    import tempfile

    import ctranslate2
    args = bench.args
    if not bench.versions[-1].startswith("ctranslate2"):
        bench.versions.append(f"ctranslate2 {ctranslate2.__version__}")
    if not ct2_dir:
        folder = tempfile.mkdtemp(prefix="bench_ct2_")
        atexit.register(shutil.rmtree, folder, True)
        ct2_dir.append(_convert_ct2(bench.ours.float().cpu(), bench.values, bench.tokenizer_dir, folder))
        bench.ours.to(args.device, bench.dtype)
    compute = {"ct2_fp32": "float32", "ct2_int8": "int8"}[name]
    vocabulary = ct2_vocabulary(ct2_dir[0])  # the converter's tokenizer: placeholders included
    index = {token: i for i, token in enumerate(vocabulary)}

    def run(ids, mask, meter):
        # A Translator lives for one call (its loading untimed): once it has translated, its idle
        # thread pool slowed torch's small parallel kernels in the same process by up to 1.7x on
        # the 2-core test machine (a decode step at batch 1: 1.4 s -> 2.0 s) until it was deleted.
        translator = ctranslate2.Translator(ct2_dir[0], device="cuda" if args.device.startswith("cuda")
                                            else "cpu", compute_type=compute, intra_threads=args.threads)
        source = [[vocabulary[i] for i in row[m.bool()].tolist()] for row, m in zip(ids.cpu(), mask.cpu())]
        options = ct2_options(bench.settings, vocabulary, len(source))
        with meter:
            start = time.perf_counter()
            results = translator.translate_batch(source, **options)
            seconds = time.perf_counter() - start
        del translator
        rows = [[bench.values["decoder_start_token_id"]] + [index[t] for t in r.hypotheses[0]] for r in results]
        width = max(map(len, rows))
        return torch.tensor([r + [bench.pad] * (width - len(r)) for r in rows]), seconds
    return f"CTranslate2 {ctranslate2.__version__} {compute}", run


def contender(bench: Bench, name: str, ct2_dir: list):
    """(label, runner) of one contender; ImportError, TypeError, ValueError or RuntimeError: not available."""
    args, ours = bench.args, bench.ours
    if name == "ours":
        return ("this project fp32, model.generate" if args.dtype == "fp32" else f"this project {args.dtype}",
                generate_runner(bench, ours))
    if name == "ours_unpacked":
        return f"this project {args.dtype}, generate(packed=False)", generate_runner(bench, ours, packed=False)
    if name == "hf":
        import transformers
        return f"transformers {transformers.__version__} generate", generate_runner(bench, bench.hf)
    if name == "ours_packed":  # run_eval.py's fp32 on CPU: a decoding copy, packed as its policy says
        from bart.generation.precision import (
            can_pack,
            decodes_packed,
            prepare_for_decoding,
        )
        if not can_pack(ours):
            raise RuntimeError("packed linear layers are for an fp32 model on CPU with oneDNN")
        return ("this project fp32, run_eval's decoding copy (packed)",
                generate_runner(bench, prepare_for_decoding(ours, "fp32", packed=decodes_packed())))
    if name == "ours_compiled":
        probe = torch.tensor([[0, 5, 6, 2]], device=args.device)
        ours.generate(probe, max_length=3, num_beams=2, compile_generation=False)  # the option exists
        return f"this project {args.dtype}, compile_generation", generate_runner(bench, ours, compile_generation=True)
    if name in ("ours_bf16", "ours_int8"):
        from bart.generation.precision import prepare_for_decoding
        # as run_eval.py --decode_precision decodes: bf16 with packed linear layers where oneDNN can
        return (f"this project {REDUCED[name]}",
                generate_runner(bench, prepare_for_decoding(ours, REDUCED[name], packed=True)))
    return ct2_contender(bench, name, ct2_dir)


def make_runners(bench: Bench, names: list) -> list:
    """Every contender's runner into bench.runners; one not available (not installed, an option generate does
    not have) is named with the reason in bench.skipped and left out. Returns the names of those that run."""
    ct2_dir = []  # the converted model, made once for both CTranslate2 contenders
    for name in names:
        try:
            bench.runners[name] = contender(bench, name, ct2_dir)
        except (ImportError, TypeError, ValueError, RuntimeError) as err:
            bench.skipped[name] = (f"{type(err).__name__}: {str(err).splitlines()[0][:160]}" if str(err)
                                   else type(err).__name__)
            print(f"{name}: not available, left out ({bench.skipped[name]})", flush=True)
    return [n for n in names if n in bench.runners]


@dataclasses.dataclass
class BatchRun:
    """One batch size's sources and what its contenders gave: the checked run's outputs and peaks, those out of
    memory or failed, the comparisons with ours and the timed runs."""
    batch: int
    names: list  # the contenders at this batch size
    ids: torch.Tensor
    mask: torch.Tensor
    outputs: dict = dataclasses.field(default_factory=dict)
    peaks: dict = dataclasses.field(default_factory=dict)
    out_of_memory: list = dataclasses.field(default_factory=list)
    failed: dict = dataclasses.field(default_factory=dict)  # name -> why
    identical: int = None  # rows of transformers token-identical to ours (None: transformers did not run)
    agreement: float = None
    compared: dict = dataclasses.field(default_factory=dict)  # every other contender against ours
    timings: dict = dataclasses.field(default_factory=dict)
    median: dict = dataclasses.field(default_factory=dict)
    first: dict = dataclasses.field(default_factory=dict)  # seconds of the checked run (a compile included)


def batch_sources(bench: Bench, batch: int, names: list) -> BatchRun:
    """The batch's sources (real text or random ids between <s> and </s>) and the contenders that run at its size."""
    args = bench.args
    if bench.text_path:
        ids = text_sources(bench.tokenizer, bench.text_path, batch, args.source_length).to(args.device)
    else:
        ids = torch.randint(4, bench.values["vocab_size"] - 1, (batch, args.source_length), device=args.device)
        ids[:, 0], ids[:, -1] = 0, 2
    batch_names = [n for n in names if not (n == "hf" and args.hf_max_batch and batch > args.hf_max_batch)]
    return BatchRun(batch, batch_names, ids, torch.ones_like(ids))


def checked_runs(bench: Bench, run: BatchRun) -> None:
    """Every contender once (the warm-up, whose outputs are compared): outputs and peak memory (a sampler thread,
    after malloc_trim). One out of memory is reported (ours: the batch stops there); another contender's failure
    is reported and the rest run (ours' and transformers' stop the benchmark)."""
    for name in run.names:
        memory = PeakMemory(bench.args.device)
        try:
            with torch.no_grad():
                run.outputs[name], run.first[name] = bench.runners[name][1](run.ids, run.mask, memory)[:2]
            run.peaks[name] = memory.peak
        except torch.OutOfMemoryError as err:
            print(f"batch {run.batch}: {name} ran out of memory ({str(err).splitlines()[0][:200]})", flush=True)
            run.out_of_memory.append(name)
            if name == "ours":
                break
        except Exception as err:  # noqa: BLE001 - another contender's failure is reported, the rest run
            if name in ("ours", "hf"):
                raise
            run.failed[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
            print(f"batch {run.batch}: {name} failed ({run.failed[name]})", flush=True)
    gc.collect()
    if bench.args.device.startswith("cuda"):
        torch.cuda.empty_cache()


def compare(bench: Bench, run: BatchRun) -> None:
    """transformers' rows against ours (they must be the same tokens, unless --allow_mismatch); every other
    contender against ours: rows, token agreement, why they differ, ROUGE-L of the reduced precisions."""
    ours_out, hf_out, batch, pad = run.outputs["ours"], run.outputs.get("hf"), run.batch, bench.pad
    if hf_out is not None:
        run.identical = _identical_rows(ours_out.cpu(), hf_out.cpu(), pad)
        run.agreement = _token_agreement(ours_out.cpu(), hf_out.cpu(), pad)
        if run.identical < batch and not bench.args.allow_mismatch:
            raise SystemExit(f"batch {batch}: outputs differ ({run.identical}/{batch} rows identical): the comparison "
                             f"would be meaningless (--allow_mismatch to report it anyway)")
    renormalized = None
    ours_text = bench.decode(ours_out) if bench.tokenizer is not None else None
    for name in run.outputs:
        if name in ("ours", "hf"):
            continue
        out = run.outputs[name].to(ours_out.device)
        entry = dict(identical_rows=_identical_rows(ours_out, out, pad), token_agreement=_token_agreement(ours_out, out, pad))
        if entry["identical_rows"] < batch:
            if name.startswith("ct2") and renormalized is None:
                with torch.no_grad():
                    renormalized = bench.ours.generate(run.ids, attention_mask=run.mask, renormalize_logits=True,
                                                       **bench.settings)
            reference = ours_out
            if name.startswith("ct2"):  # CTranslate2's settings are ours with renormalize_logits=True
                entry["identical_rows_renormalized"] = _identical_rows(renormalized, out, pad)
                reference = renormalized
            same = name.startswith("ct2") and entry["identical_rows_renormalized"] == batch
            entry["reason"] = _gap_reason(None if same else first_difference(bench.ours, reference, out, run.ids, pad),
                                          same, name in REDUCED)
            if name.startswith("ct2") and not same:
                entry["reason"] += (f" (against ours with renormalize_logits=True, which "
                                    f"{entry['identical_rows_renormalized']}/{batch} rows equal)")
        if name in REDUCED and ours_text is not None:
            entry["rougeL_vs_fp32"] = rouge_l(bench.decode(out), ours_text)
        run.compared[name] = entry


def timed_repeats(bench: Bench, run: BatchRun) -> None:
    """--repeats timed runs of every contender that gave an output, in turn (ours, transformers, ..., ours, ...), and
    their medians. Nothing else runs in the process (on 2 cores a sampler thread preempts one of torch's OpenMP
    threads every 5 ms, which cost this project's many small kernels up to 30%)."""
    timed = [n for n in run.names if n in run.outputs]
    run.timings = {name: [] for name in timed}
    for _ in range(bench.args.repeats):
        for name in timed:
            gc.collect()
            with torch.no_grad():
                run.timings[name].append(bench.runners[name][1](run.ids, run.mask, contextlib.nullcontext())[1])
    run.median = {name: statistics.median(t) for name, t in run.timings.items()}


def table_rows(bench: Bench, run: BatchRun, new_tokens: int, least) -> list:
    """The batch's rows of the table: transformers first, then the other contenders in the order asked."""
    batch, bandwidth, median = run.batch, bench.bandwidth, run.median
    hf_s, ours_s = median.get("hf"), median["ours"]
    rows = []
    for name in ["hf"] + [n for n in run.names if n != "hf"]:
        if name not in run.names:
            continue
        label = bench.runners[name][0]
        if name in run.failed:
            rows.append(f"| {batch} | {label}: failed ({run.failed[name]}) | | | | | | | | |" + (" |" if bandwidth else ""))
            continue
        if name not in median:
            rows.append(f"| {batch} | {label}: out of memory | | | | | | | | |" + (" |" if bandwidth else ""))
            continue
        seconds = median[name]
        share = f" {least / bandwidth / seconds:.1%} |" if bandwidth else ""
        speedup = f"{hf_s / seconds:.2f}x" if hf_s else "-"
        if name == "ours":
            same, note = "-", ""
        elif name == "hf":
            same, note = (f"{run.identical}/{batch}", f"token agreement {run.agreement:.1%}")
        else:
            entry = run.compared[name]
            same = f"{entry['identical_rows']}/{batch}"
            note = "; ".join(x for x in (f"token agreement {entry['token_agreement']:.1%}", entry.get("reason", ""),
                                         f"ROUGE-L vs fp32 {entry['rougeL_vs_fp32']:.2f}"
                                         if "rougeL_vs_fp32" in entry else "") if x)
        rows.append(f"| {batch} | {label} | {seconds:.3f} | {batch / seconds:.2f} | {new_tokens / seconds:.0f} | "
                    f"{run.peaks[name] / 2**20:.0f} | {speedup} | {ours_s / seconds:.2f}x | {same} | {note} |{share}")
    return rows


def batch_result(bench: Bench, run: BatchRun, new_tokens: int, least) -> dict:
    """The batch's entry of the JSON's rows: ours' and transformers' figures and, under "contenders", every
    contender's figures and comparison."""
    batch, median = run.batch, run.median
    hf_s, ours_s = median.get("hf"), median["ours"]
    result = dict(batch=batch, new_tokens=new_tokens, identical_rows=run.identical, token_agreement=run.agreement,
                  speedup=hf_s / ours_s if hf_s else None,
                  out_of_memory=None if hf_s or "hf" not in run.names else "transformers")
    for name in ("ours", "hf"):
        seconds = median.get(name)
        result.update({f"{name}_seconds": seconds, f"{name}_summaries_s": batch / seconds if seconds else None,
                       f"{name}_peak_mib": run.peaks[name] / 2**20 if seconds else None,
                       f"{name}_bandwidth_share": least / bench.bandwidth / seconds if least and seconds else None})
    result["contenders"] = {n: dict(run.compared.get(n, {}), label=bench.runners[n][0], seconds=median.get(n),
                                    times=run.timings.get(n), first_call_seconds=run.first.get(n),
                                    vs_ours=ours_s / median[n] if n in median else None,
                                    out_of_memory=n in run.out_of_memory, failed=run.failed.get(n)) for n in run.names}
    return result


def bench_batch(bench: Bench, batch: int, names: list):
    """One batch size: the checked run, the comparisons, the timed repeats; its table rows and JSON entry."""
    run = batch_sources(bench, batch, names)
    checked_runs(bench, run)
    if "ours" not in run.outputs:
        return ([f"| {batch} | this project: out of memory | | | | | |" + (" |" if bench.bandwidth else "")],
                dict(batch=batch, out_of_memory="this project"))
    compare(bench, run)
    ours_out = run.outputs["ours"]
    new_tokens = int((ours_out[:, 1:] != bench.pad).sum())
    timed_repeats(bench, run)
    args = bench.args
    least = _least_bytes(bench.ours, ours_out, args.source_length, bench.pad, args.num_beams) if bench.bandwidth else None
    rows = table_rows(bench, run, new_tokens, least)
    line = ", ".join(f"{n} {run.median[n]:.2f} s" for n in run.timings)
    print(f"batch {batch}: {line}, {new_tokens} new tokens" + (
        f", {run.identical}/{batch} rows token-identical to transformers, token agreement {run.agreement:.1%}"
        if run.median.get("hf") else "")
        + "".join(f", {n} {c['identical_rows']}/{batch} rows as ours" for n, c in run.compared.items()), flush=True)
    return rows, batch_result(bench, run, new_tokens, least)


def write_json(bench: Bench, results: list) -> None:
    """--json: the settings, versions, contenders left out and every batch size's entry so far."""
    args = bench.args
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU",
                       "dtype": args.dtype, "num_beams": args.num_beams, "source_length": args.source_length,
                       "new_tokens": args.new_tokens, "workload": args.workload, "sources": args.sources,
                       "settings": bench.settings, "eos_bias": args.eos_bias if args.workload == "ragged" else None,
                       "versions": bench.versions, "skipped": bench.skipped, "load_average": os.getloadavg(),
                       "bandwidth_bytes_s": bench.bandwidth, "rows": results}, f, indent=1)


def print_report(bench: Bench, rows: list, results: list) -> None:
    """The summary line (device, versions, settings, token-identical rows, load average), the contenders left
    out, the bandwidth limit's basis, and the table."""
    args = bench.args
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU, {args.threads} threads"
    shape = os.path.splitext(os.path.basename(args.config))[0].replace("config_", "bart-")
    same = ", ".join(f"{'-' if r['identical_rows'] is None else r['identical_rows']}/{r['batch']}"
                     for r in results if "identical_rows" in r)  # the batch sizes ours ran at
    sources = {"random": "random token ids", "lee": "Lee news corpus (real English)"}.get(args.sources, args.sources)
    print(f"\nbeam search, {device}, {', '.join(bench.versions)}: {shape} geometry, {args.dtype}, beams {args.num_beams}, "
          f"source {args.source_length} ({sources}), up to {args.new_tokens} new tokens, no-repeat 3, workload "
          f"{args.workload}, batch sizes {args.batch_sizes}, medians of {args.repeats}, contenders interleaved, "
          f"token-identical rows (ours vs transformers): {same}; load average {os.getloadavg()[0]:.2f}")
    if bench.skipped:
        print("left out: " + "; ".join(f"{n} ({why})" for n, why in bench.skipped.items()))
    if bench.bandwidth:
        measured = "given by --bandwidth" if args.bandwidth else "device-to-device copy measured in this run"
        print(f"memory-bandwidth limit: the least bytes a run must read (weights of the encoder once and of the decoder "
              f"and LM head per step, cross K/V of the live sources and the self K/V cache per step) at "
              f"{bench.bandwidth / 1e12:.2f} TB/s ({measured}, read + write)")
    extra = (" share of bandwidth limit |", "---|") if bench.bandwidth else ("", "")
    print("| batch | implementation | median s | summaries/s | new tokens/s | peak memory MiB | speedup | vs this project "
          "fp32 | rows as this project fp32 | agreement, why different, ROUGE-L |" + extra[0])
    print("|---|---|---|---|---|---|---|---|---|---|" + extra[1])
    print("\n".join(rows))


def main(argv=None) -> None:
    args, names = parse_args(argv)
    bench = build(args, names)
    names = make_runners(bench, names)
    rows, results = [], []
    gc.freeze()  # the modules and models live to the end: each run's gc.collect walks only what runs make
    for batch in args.batch_sizes:
        batch_rows, result = bench_batch(bench, batch, names)
        rows += batch_rows
        results.append(result)
        write_json(bench, results)
    print_report(bench, rows, results)


if __name__ == "__main__":
    main()
