"""Beam-search speed: this project's generate vs transformers' generate, same weights and inputs.

bart-base geometry (configs/config_base.json; --config configs/config_large.json for bart-large) with
random weights, beams 4, 512-token sources, up to 64 new tokens, no-repeat 3, at batch sizes 1, 8, 32
and 64 (--batch_sizes for a reduced set on CPU; the table says which were run). Two workloads:
``full`` suppresses EOS until the last step (min_length), so every row decodes every step (pure
decode cost); ``ragged`` makes EOS likely (a bias on its logit, --eos_bias) so that, as in real
summarization, sources finish at different steps (what finished rows still cost shows there). At every
batch size the outputs are checked to be token-identical before the timings count; the two
implementations run in turn (ours, transformers, ours, ...) and medians are reported. Reported per implementation and batch: median seconds,
summaries/s, new tokens/s (generated tokens of the returned sequences, start token excluded) and
peak memory during generate (CUDA: max allocated above the level before the call; CPU: peak resident
set size above the level before the call, sampled every 5 ms, after freed memory is handed back to
the system with malloc_trim so that one run does not reuse what the previous one left).

    python benchmarks/bench_generation.py [--batch_sizes 1 8 32 64] [--workload full|ragged] [--threads 2]
        [--repeats 1] [--source_length 512] [--new_tokens 64] [--config configs/config_large.json] [--device cpu]
        [--json rows.json] [--bandwidth GB/s]

With --json the rows are also written there (rewritten after every batch size, so a process stopped
part-way keeps the batch sizes it finished), with the token agreement of the two outputs (the share of
positions where both returned the same token). --bandwidth gives the copy bandwidth to divide by
instead of measuring it (and the bandwidth column on CPU too). A batch size that runs out of memory is
reported as such and the next one runs.
"""
import argparse
import ctypes
import gc
import json
import os
import statistics
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bart.configuration import BartConfig  # noqa: E402
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


# -- CTranslate2 -------------------------------------------------------------------------------------
# What CTranslate2 4.x does differently from transformers' generate (read from its decoding.cc):
#  * its log-probs are a log-softmax taken AFTER the bans (n-gram blocking, min length): transformers
#    bans after the log-softmax unless renormalize_logits=True. Greedy search picks the same token either
#    way; beam search ranks beams by different scores, so CT2 equals generate(..., renormalize_logits=True).
#  * min/max lengths count generated tokens (transformers counts the decoder start token too): 1 less.
#  * a forced first token is a target_prefix (score 0, as transformers' forced BOS); at the first step
#    after it CT2 drops EOS from the beams other than the first (its issue #277), where transformers may
#    finish a hypothesis: identical when min_length keeps EOS out of that step.
#  * there is no forced EOS at max_length (a hypothesis cut there ends without EOS), and early stopping
#    is transformers' early_stopping=True (patience 1).
CT2_SETTINGS = ("num_beams", "max_length", "min_length", "no_repeat_ngram_size", "length_penalty", "early_stopping",
                "forced_bos_token_id", "forced_eos_token_id", "renormalize_logits")


def ct2_options(settings: dict, vocabulary: list, rows: int) -> dict:
    """generate's settings as keyword arguments of ctranslate2.Translator.translate_batch; a setting CTranslate2
    has no equivalent for is a ValueError naming it."""
    unknown = sorted(set(settings) - set(CT2_SETTINGS))
    if unknown:
        raise ValueError(f"no CTranslate2 equivalent known for {unknown}")
    if settings.get("forced_eos_token_id") is not None:
        raise ValueError("forced_eos_token_id: CTranslate2 has no forced EOS at max_length; compare with None")
    if settings.get("early_stopping", True) is not True:
        raise ValueError("early_stopping: CTranslate2's beam search stops as early_stopping=True only")
    options = dict(beam_size=settings.get("num_beams", 1), length_penalty=settings.get("length_penalty", 1.0),
                   no_repeat_ngram_size=settings.get("no_repeat_ngram_size") or 0,
                   min_decoding_length=max(settings.get("min_length", 0) - 1, 0),
                   max_decoding_length=settings["max_length"] - 1, return_end_token=True, max_input_length=0)
    if settings.get("forced_bos_token_id") is not None:
        options["target_prefix"] = [[vocabulary[settings["forced_bos_token_id"]]]] * rows
    return options


def ct2_vocabulary(folder: str) -> list:
    """The tokens of an exported folder's tokenizer in id order (CTranslate2's vocabulary)."""
    import transformers

    vocab = transformers.AutoTokenizer.from_pretrained(folder).get_vocab()
    return [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]


def ct2_generate(translator, vocabulary: list, index: dict, ids: torch.Tensor, attention_mask: torch.Tensor,
                 settings: dict, decoder_start: int, pad: int) -> torch.Tensor:
    """CTranslate2's output for generate's inputs and settings, as generate returns it (decoder start token
    first, padded with ``pad``)."""
    source = [[vocabulary[i] for i in row[mask.bool()].tolist()] for row, mask in zip(ids.cpu(), attention_mask.cpu())]
    results = translator.translate_batch(source, **ct2_options(settings, vocabulary, len(source)))
    rows = [[decoder_start] + [index[token] for token in result.hypotheses[0]] for result in results]
    width = max(map(len, rows))
    return torch.tensor([row + [pad] * (width - len(row)) for row in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/config_base.json")
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--workload", choices=["full", "ragged"], default="full")
    parser.add_argument("--eos_bias", type=float, default=12.0, help="ragged: added to the EOS logit")
    parser.add_argument("--source_length", type=int, default=512)
    parser.add_argument("--new_tokens", type=int, default=64)
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
    parser.add_argument("--bandwidth", type=float, help="copy bandwidth in GB/s to divide by (measured when not given)")
    args = parser.parse_args()
    import transformers  # here: the GPU suite's peaks part uses _copy_bandwidth alone
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    values = json.load(open(args.config))
    values.update(dropout=0.0, forced_bos_token_id=None, forced_eos_token_id=None)
    hf_values = {k: v for k, v in values.items() if k not in ("pre_ln", "dtype")}
    hf = transformers.BartForConditionalGeneration(transformers.BartConfig(**hf_values, attn_implementation="sdpa"))
    ours = BartForConditionalGeneration(BartConfig(**values))
    if args.workload == "ragged":
        with torch.no_grad():
            hf.final_logits_bias[0, values["eos_token_id"]] = args.eos_bias
    ours.load_state_dict(hf.state_dict())
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    hf, ours = hf.to(args.device, dtype).eval(), ours.to(args.device, dtype).eval()
    bandwidth = args.bandwidth * 1e9 if args.bandwidth else (
        _copy_bandwidth(args.device) if args.device.startswith("cuda") else None)
    settings = dict(num_beams=args.num_beams, max_length=args.new_tokens + 1,
                    min_length=args.new_tokens if args.workload == "full" else 0,
                    no_repeat_ngram_size=3, length_penalty=1.0, early_stopping=True)
    pad = values.get("pad_token_id", 1)
    rows, identical_rows, results = [], [], []

    def write_json():
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU",
                           "dtype": args.dtype, "num_beams": args.num_beams, "source_length": args.source_length,
                           "new_tokens": args.new_tokens, "workload": args.workload,
                           "bandwidth_bytes_s": bandwidth, "rows": results}, f, indent=1)

    gc.freeze()  # the modules and models live to the end: each run's gc.collect walks only what runs make
    for batch in args.batch_sizes:
        ids = torch.randint(4, values["vocab_size"] - 1, (batch, args.source_length), device=args.device)
        ids[:, 0], ids[:, -1] = 0, 2

        def run(model):
            with PeakMemory(args.device) as memory, torch.no_grad():
                start = time.perf_counter()
                out = model.generate(ids, attention_mask=torch.ones_like(ids), **settings)
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                seconds = time.perf_counter() - start
            return out, seconds, memory.peak

        outputs = {}  # warm-up runs, and the outputs compared; one that runs out of memory is reported
        for name, model in (("ours", ours), ("hf", hf)):
            try:
                outputs[name], *_ = run(model)
            except torch.OutOfMemoryError as err:
                print(f"batch {batch}: {name} ran out of memory ({str(err).splitlines()[0][:200]})", flush=True)
                break
        gc.collect()
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
        if "ours" not in outputs:
            rows.append(f"| {batch} | this project: out of memory | | | | | |" + (" |" if bandwidth else ""))
            results.append(dict(batch=batch, out_of_memory="this project"))
            write_json()
            continue
        ours_out, hf_out = outputs["ours"], outputs.get("hf")
        identical = agreement = None
        if hf_out is not None:
            identical = _identical_rows(ours_out.cpu(), hf_out.cpu(), pad)
            agreement = _token_agreement(ours_out.cpu(), hf_out.cpu(), pad)
            if identical < batch and not args.allow_mismatch:
                raise SystemExit(f"batch {batch}: outputs differ ({identical}/{batch} rows identical): the comparison "
                                 f"would be meaningless (--allow_mismatch to report it anyway)")
        identical_rows.append((identical, batch))
        new_tokens = int((ours_out[:, 1:] != pad).sum())
        timed = [("ours", ours)] + ([("hf", hf)] if hf_out is not None else [])
        timings = {name: [] for name, _ in timed}
        peaks = {name: 0 for name, _ in timed}
        for _ in range(args.repeats):
            for name, model in timed:
                _, seconds, peak = run(model)
                timings[name].append(seconds)
                peaks[name] = max(peaks[name], peak)
        median = {name: statistics.median(t) for name, t in timings.items()}
        hf_s, ours_s = median.get("hf"), median["ours"]
        least = _least_bytes(ours, ours_out, args.source_length, pad, args.num_beams) if bandwidth else None
        for name, label in (("hf", f"transformers {transformers.__version__} generate"), ("ours", "this project")):
            if name not in median:
                rows.append(f"| {batch} | {label}: out of memory | | | | | |" + (" |" if bandwidth else ""))
                continue
            seconds = median[name]
            share = f" {least / bandwidth / seconds:.1%} |" if bandwidth else ""
            speedup = f"{hf_s / seconds:.2f}x" if hf_s else "-"
            rows.append(f"| {batch} | {label} | {seconds:.3f} | {batch / seconds:.2f} | {new_tokens / seconds:.0f} | "
                        f"{peaks[name] / 2**20:.0f} | {speedup} |{share}")
        if hf_s:
            print(f"batch {batch}: transformers {hf_s:.2f} s, ours {ours_s:.2f} s, {new_tokens} new tokens, "
                  f"{identical}/{batch} rows token-identical, token agreement {agreement:.1%}", flush=True)
        else:
            print(f"batch {batch}: ours {ours_s:.2f} s, {new_tokens} new tokens (transformers ran out of memory)",
                  flush=True)
        result = dict(batch=batch, new_tokens=new_tokens, identical_rows=identical, token_agreement=agreement,
                      speedup=hf_s / ours_s if hf_s else None, out_of_memory=None if hf_s else "transformers")
        for name in ("ours", "hf"):
            seconds = median.get(name)
            result.update({f"{name}_seconds": seconds, f"{name}_summaries_s": batch / seconds if seconds else None,
                           f"{name}_peak_mib": peaks[name] / 2**20 if seconds else None,
                           f"{name}_bandwidth_share": least / bandwidth / seconds if least and seconds else None})
        results.append(result)
        write_json()
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU, {args.threads} threads"
    shape = os.path.splitext(os.path.basename(args.config))[0].replace("config_", "bart-")
    same = ", ".join(f"{'-' if n is None else n}/{b}" for n, b in identical_rows)
    print(f"\nbeam search, {device}, torch {torch.__version__}: {shape} geometry, {args.dtype}, beams {args.num_beams}, "
          f"source {args.source_length}, up to {args.new_tokens} new tokens, no-repeat 3, workload {args.workload}, "
          f"batch sizes {args.batch_sizes}, medians of {args.repeats}, token-identical rows: {same}")
    if bandwidth:
        measured = "given by --bandwidth" if args.bandwidth else "device-to-device copy measured in this run"
        print(f"memory-bandwidth limit: the least bytes a run must read (weights of the encoder once and of the decoder "
              f"and LM head per step, cross K/V of the live sources and the self K/V cache per step) at "
              f"{bandwidth / 1e12:.2f} TB/s ({measured}, read + write)")
    extra = (" share of bandwidth limit |", "---|") if bandwidth else ("", "")
    print("| batch | implementation | median s | summaries/s | new tokens/s | peak memory MiB | speedup |" + extra[0])
    print("|---|---|---|---|---|---|---|" + extra[1])
    print("\n".join(rows))


if __name__ == "__main__":
    main()
