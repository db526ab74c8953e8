"""Greedy decoding and multinomial sampling on a decode session.

A row that produced EOS leaves the running batch (greedy only): its tokens wait, padded, in the output.
One host sync per ``sync_every`` steps (the stopping check, which also says who is done). Sampling draws with
``torch.multinomial`` on the same processed scores, in the same order and shapes as transformers'
``_sample``, so the same generator state gives the same tokens.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from bart.generation.options import GenerationOptions
from bart.generation.processing import process
from bart.generation.session import Decoder, drops_finished, is_eos


def greedy_search(decoder: Decoder, opts: GenerationOptions, encoder_ids: torch.Tensor, processors: list,
                  sync_every: int = 1):
    """Greedy decoding, or with ``do_sample`` multinomial sampling (num_return_sequences rows per source).
    A finished row stops costing work (greedy only): it leaves the running batch and its tokens wait,
    padded, in the output. ``sync_every``: steps between the reads of which rows are done (finished rows
    add pad tokens in between; the steps taken after every row was done are cut from the output)."""
    rows = encoder_ids.shape[0] * (opts.num_return_sequences if opts.do_sample else 1)
    device = encoder_ids.device
    drop = drops_finished(opts) and not getattr(decoder, "fixed_rows", False)
    output = torch.full((rows, opts.max_length), opts.pad_token_id, dtype=torch.long, device=device)
    live = list(range(rows))  # output rows of the running rows
    tokens = opts.prompt_rows(rows // encoder_ids.shape[0])
    unfinished = torch.ones(rows, dtype=torch.bool, device=device)
    all_scores = []
    # steps taken while a row was unfinished, counted on the device: the output's length without a read per step
    needed = torch.zeros((), dtype=torch.long, device=device) if sync_every > 1 else None
    step = 0
    while tokens.shape[1] < opts.max_length:
        if needed is not None:
            needed += unfinished.any()
        scores = process(processors, tokens, decoder.next_logits(tokens), encoder_ids)
        if opts.do_sample:
            next_tokens = torch.multinomial(F.softmax(scores, dim=-1), 1, generator=opts.generator).squeeze(1)
        else:
            next_tokens = scores.argmax(-1)
        if opts.output_scores:
            all_scores.append(scores.clone())  # scores may be the decoder's buffer
        next_tokens = next_tokens.masked_fill_(~unfinished, opts.pad_token_id)
        tokens = torch.cat([tokens, next_tokens[:, None]], dim=1)
        unfinished &= ~is_eos(next_tokens, opts)
        stop = opts.custom_stop(tokens, tuple(all_scores) if opts.output_scores else None)
        if stop is not None:
            unfinished &= ~stop
        if opts.time_is_up():  # max_time: this step's tokens are the last
            break
        step += 1
        if step % sync_every:  # no read this step: finished rows run on, adding pad tokens
            continue
        if not drop:
            if not bool(unfinished.any()):  # the one host sync per step
                break
            continue
        flags = unfinished.tolist()  # the one host sync per step
        if all(flags) or tokens.shape[1] >= opts.max_length:
            continue
        gone = [i for i, flag in enumerate(flags) if not flag]
        output[[live[i] for i in gone], :tokens.shape[1]] = tokens[gone]
        keep = [i for i, flag in enumerate(flags) if flag]
        if not keep:
            break
        index = torch.tensor(keep, device=device)
        tokens, unfinished, encoder_ids = tokens[index], unfinished[index], encoder_ids[index]
        decoder.keep_sources(keep, index)
        live = [live[i] for i in keep]
    output[live, :tokens.shape[1]] = tokens
    length = tokens.shape[1] if needed is None else opts.prompt_length + int(needed)
    return output[:, :length], None, tuple(all_scores) if opts.output_scores else None
