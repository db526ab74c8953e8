"""``model.generate``: greedy decoding, sampling, beam search and beam sampling written in this project
(no transformers import), with transformers' options and semantics: transformers 4.57's wherever 5.x
changed them (the model config's generation keys are in effect, beam sampling, the attention mask
inferred from padding, a forced EOS that ``suppress_tokens`` also names; docs/INFERENCE.md).

The options and how they are resolved: :mod:`bart.generation.options`; the decode session (encoder
output, cache, LM head): :mod:`~bart.generation.session`; the processor order:
:mod:`~bart.generation.processing`; the searches: :mod:`~bart.generation.greedy` (greedy, sampling),
:mod:`~bart.generation.beam` (beam search, beam sampling, beam groups).

``compile_generation`` (not an option of transformers): False (the eager step, the default), True or
"default" (the decoder step under ``torch.compile``), "reduce-overhead" (the same, CUDA graphs on GPU);
see :mod:`bart.generation.compiled`. The precision a model decodes with is chosen before the call, with
:func:`bart.generation.precision.prepare_for_decoding`. ``packed`` (not an option of transformers; default
True): an fp32 model in eval mode on CPU decodes, unless compiling or under autocast, with the packed copy
of its linear layers kept beside it (:func:`bart.generation.precision.packed_beside`: the same tokens,
faster; the model, its ``state_dict()`` and training untouched); ``packed=False`` decodes with the model's
own weights.

``sync_every`` (not an option of transformers; default 1): the steps between the searches' host reads of which
rows are done. 1 reads them after every step, and lets beam search's cache reorder copy only the histories it
must (one more read per step, see :class:`~bart.generation.cache.StaticCache`). k > 1 reads them every k-th step:
done rows run on, frozen (their tokens and hypotheses do not change), until the next read, and the cache reorder
then gathers every live row with no read. The tokens are the same for every k; what changes is how often the host
waits for the device, against up to k - 1 steps of finished rows. It applies where finished rows leave the batch
(not with ``do_sample``, ``output_scores`` or the caller's ``logits_processor`` / ``stopping_criteria``, which
see every step as in transformers): there, k > 1 is refused.

Sampling (``do_sample=True``) draws from ``generator=`` (a ``torch.Generator``) or, without one,
from torch's global generator: after ``torch.manual_seed(s)`` the tokens are those of transformers'
``generate(do_sample=True, ...)`` after the same seed.
"""
from __future__ import annotations

import time

import torch

from bart.generation.beam import beam_search
from bart.generation.compiled import compile_mode, make_decoder
from bart.generation.greedy import greedy_search
from bart.generation.options import (
    GenerateOutput,
    GenerationOptionError,
    GenerationOptions,
    resolve,
)
from bart.generation.precision import PackedLinear, decodes_packed, packed_beside
from bart.generation.processing import logits_processors
from bart.generation.session import Decoder, default_attention_mask, drops_finished


def check_generate_options(model, kwargs: dict) -> None:
    """:func:`generate`'s keywords checked against ``model``'s config without generating (an unknown or bad one is a
    :class:`GenerationOptionError`, as generate raises it)."""
    _options(model, dict(kwargs))


def _options(model, kwargs: dict):
    """(compile mode, packed, sync_every, :class:`GenerationOptions`) of ``generate(model, **kwargs)``; ``kwargs``
    is consumed. A bad option is a :class:`GenerationOptionError`."""
    try:
        mode = compile_mode(kwargs.pop("compile_generation", False))
    except ValueError as err:
        raise GenerationOptionError(str(err)) from None
    packed = kwargs.pop("packed", True)
    if not isinstance(packed, bool):
        raise GenerationOptionError(f"generate: packed must be True or False, got {packed!r}")
    sync_every = kwargs.pop("sync_every", 1)
    if isinstance(sync_every, bool) or not isinstance(sync_every, int) or sync_every < 1:
        raise GenerationOptionError(f"generate: sync_every must be an int >= 1 (steps between the host's reads of "
                                    f"which rows are done), got {sync_every!r}")
    opts = resolve(model.config, kwargs)
    if sync_every > 1 and not drops_finished(opts):
        raise GenerationOptionError(f"generate: sync_every={sync_every} with do_sample, output_scores or the "
                                    f"caller's logits_processor/stopping_criteria, which see every step of every row "
                                    f"as in transformers: use sync_every=1 (the default)")
    if mode is not None and not opts.use_cache:
        raise GenerationOptionError("generate: compile_generation needs use_cache=True (the compiled step runs on "
                                    "the preallocated cache)")
    if mode is not None and any(isinstance(m, PackedLinear) for m in model.modules()):
        raise GenerationOptionError("generate: compile_generation cannot compile a packed decoding copy (its oneDNN "
                                    "weights are opaque to torch.compile); compile the model itself, or decode "
                                    "the packed copy without compile_generation")
    return mode, packed, sync_every, opts


@torch.inference_mode()
def generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
    """Summaries (or translations) of ``input_ids`` (B, S).

    Greedy decoding (``num_beams=1``), beam search (``num_beams > 1``), diverse beam search
    (``num_beam_groups > 1``), multinomial sampling (``do_sample=True``) and beam sampling
    (``do_sample=True, num_beams > 1``). Returns a LongTensor (B * num_return_sequences, L) padded
    with pad_token_id, or with ``return_dict_in_generate=True`` a :class:`GenerateOutput`
    (sequences, sequences_scores for beam search, scores per step when ``output_scores``)."""
    start = time.monotonic()
    mode, packed, sync_every, opts = _options(model, kwargs)
    opts.start_time = start
    if input_ids.dim() != 2:
        raise ValueError(f"generate: input_ids must be (batch, length), got shape {tuple(input_ids.shape)}")
    input_ids = input_ids.to(model.device)
    if opts.prompt is not None and opts.prompt.shape[0] != input_ids.shape[0]:
        raise GenerationOptionError(f"generate: decoder_input_ids has {opts.prompt.shape[0]} rows for "
                                    f"{input_ids.shape[0]} sources")
    if attention_mask is None:
        attention_mask = default_attention_mask(input_ids, opts)
    attention_mask = attention_mask.to(model.device)
    opts.prepare(model.device, input_ids.shape[0])
    processors = logits_processors(opts, model.config.vocab_size, model.device)
    # on CPU in fp32 (eval mode, no autocast, not compiling): the packed copy kept beside the model
    runner = None
    if packed and decodes_packed(mode is not None, torch.is_autocast_enabled(model.device.type)):
        runner = packed_beside(model)
    runner = model if runner is None else runner
    was_training = model.training
    model.eval()
    try:
        encoder_hidden = runner.model.encoder(input_ids, attention_mask)
        rows_per_source = opts.num_beams if opts.num_beams > 1 else (opts.num_return_sequences if opts.do_sample else 1)
        if mode is None:
            decoder = Decoder(runner, encoder_hidden, attention_mask, opts.use_cache, rows_per_source, opts.max_length,
                              mapped=sync_every == 1)
        else:
            decoder = make_decoder(model, encoder_hidden, attention_mask, rows_per_source, opts.max_length, mode)
        search = greedy_search if opts.num_beams == 1 else beam_search
        sequences, sequence_scores, scores = search(decoder, opts, input_ids, processors, sync_every)
    finally:
        model.train(was_training)
    if opts.return_dict_in_generate:
        return GenerateOutput(sequences, sequence_scores if opts.output_scores else None, scores)
    return sequences


__all__ = ["generate", "GenerateOutput", "GenerationOptions", "GenerationOptionError"]
