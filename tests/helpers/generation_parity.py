"""Token-identity checks of this project's generate against transformers' generate (same weights).

Where transformers 5.x changed a semantic of ``generate``, this project keeps transformers 4.57's
(README, "Generation"): generation keys in the model's config are in effect, beam sampling draws as
4.57 did, an attention mask is inferred from the padding when none is given, and ``forced_eos_token_id``
with the same token in ``suppress_tokens`` is allowed. ``Transformers457`` is the reference for those
calls: the installed transformers where it is 4.x (its outputs checked against the recording), the
outputs transformers 4.57 gave, recorded in ``tests/data/transformers457_generation.json``, where 5.x
is installed. Every other call is compared with the installed transformers, whichever major.
To record again (transformers 4.57 installed, one process):
``BART_RECORD_TRANSFORMERS457=1 python -m pytest -p no:xdist tests/generation/`` (the files that compare with it:
``test_generate_like_transformers.py``, ``test_generation_arguments.py``, ``test_generation_options.py``,
``test_sampling.py``).

Also the tiny models and inputs those tests share: ``tiny_pair`` (ours and transformers' on the same weights),
``tiny_inputs``, ``tiny_model`` and ``ragged_inputs`` (ours alone), and the grids run against transformers.
"""
import json
import os

import torch
import torch.nn.functional as F
import transformers

from bart.configuration import BartConfig
from bart.modeling import BartForConditionalGeneration

TRANSFORMERS_MAJOR = int(transformers.__version__.split(".")[0])
RECORDING = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                         "transformers457_generation.json")


def _describe(settings: dict) -> str:
    """The call's settings as text that does not depend on the transformers version (a GenerationConfig
    by name only)."""
    def plain(value):
        if isinstance(value, transformers.GenerationConfig):
            return type(value).__name__
        return repr(sorted(value.items())) if isinstance(value, dict) else value

    return json.dumps({k: plain(v) for k, v in sorted(settings.items())}, default=str)


class Transformers457:
    """transformers 4.57's ``generate`` for the calls ``differs(settings, attention_mask)`` selects (the
    semantics 5.x changed); the others go to the installed transformers. Calls are recorded per test
    (``PYTEST_CURRENT_TEST``) in order."""

    def __init__(self, hf, differs=lambda settings, attention_mask: True):
        self.hf, self.differs = hf, differs
        self.test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
        self.calls = 0

    def generate(self, ids, attention_mask=None, **settings):
        if not self.differs(settings, attention_mask):
            return self.hf.generate(ids, attention_mask=attention_mask, **settings)
        index, described = self.calls, _describe(dict(settings, attention_mask=attention_mask is not None))
        self.calls += 1
        recording = {}
        if os.path.isfile(RECORDING):
            with open(RECORDING, encoding="utf-8") as f:
                recording = json.load(f)
        calls = recording.get(self.test, [])
        if TRANSFORMERS_MAJOR >= 5:
            assert index < len(calls) and calls[index]["settings"] == described, (
                f"{RECORDING} holds no transformers 4.57 output for call {index} of {self.test} ({described}): "
                f"record it under transformers 4.57 (see tests/helpers/generation_parity.py)")
            return torch.tensor(calls[index]["output"], dtype=torch.long)
        output = self.hf.generate(ids, attention_mask=attention_mask, **settings)
        entry = {"settings": described, "output": output.tolist()}
        if os.environ.get("BART_RECORD_TRANSFORMERS457") == "1":
            recording[self.test] = (calls[:index] + [entry]) if index else [entry]
            with open(RECORDING, "w", encoding="utf-8") as f:  # one call a line
                f.write("{\n" + ",\n".join(f"{json.dumps(test)}: [\n" + ",\n".join(json.dumps(c) for c in calls) + "\n]"
                                          for test, calls in sorted(recording.items())) + "\n}\n")
        elif index < len(calls):  # the recording stays true to transformers 4.57
            assert calls[index] == entry, f"{RECORDING}: call {index} of {self.test} is not what transformers " \
                                          f"{transformers.__version__} gives; record again"
        return output


def pad_to(sequences: torch.Tensor, width: int, pad: int = 1) -> torch.Tensor:
    return F.pad(sequences, (0, width - sequences.shape[1]), value=pad)


def run_both(ours, hf, ids, mask, settings: dict, seed=None, use_generator: bool = False):
    """(ours, transformers) sequences for the same settings. With ``seed``, transformers draws from
    the global generator after ``torch.manual_seed(seed)``; ours draws from the global generator after
    the same seed, or from ``generator=torch.Generator().manual_seed(seed)`` when ``use_generator``."""
    if seed is not None:
        torch.manual_seed(seed)
    expected = hf.generate(ids, attention_mask=mask, **settings)
    if seed is not None and use_generator:
        got = ours.generate(ids, attention_mask=mask, generator=torch.Generator().manual_seed(seed), **settings)
    else:
        if seed is not None:
            torch.manual_seed(seed)
        got = ours.generate(ids, attention_mask=mask, **settings)
    return got, expected


def difference(got: torch.Tensor, expected: torch.Tensor, settings: dict):
    """None when token-identical (same shape, same tokens), else a description."""
    if got.shape == expected.shape and torch.equal(got, expected):
        return None
    return f"{settings}\n  transformers {expected.tolist()}\n  ours         {got.tolist()}"


def report(problems: list, total: int, shown: int = 3) -> str:
    return (f"{len(problems)} of {total} cases differ from transformers; the first {min(shown, len(problems))}:\n"
            + "\n".join(problems[:shown]))


TINY = dict(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
            dropout=0.0, forced_eos_token_id=None)


# The calls whose semantics transformers 5.x changed (above): compared with
# transformers 4.57's outputs, live or recorded.
def beam_sampling(settings, attention_mask):
    return bool(settings.get("do_sample")) and settings.get("num_beams", 1) > 1


def mask_inferred(settings, attention_mask):
    return attention_mask is None and settings.get("pad_token_id", 1) is not None


def forced_eos_suppressed(settings, attention_mask):
    forced = settings.get("forced_eos_token_id")
    return forced is not None and set([forced] if isinstance(forced, int) else forced) <= set(
        settings.get("suppress_tokens") or ())


def tiny_pair(seed: int, init_std: float, pre_ln: bool = False, **generation_config):
    torch.manual_seed(seed)
    config = dict(TINY, init_std=init_std, **generation_config)
    if pre_ln:
        hf = transformers.MBartForConditionalGeneration(transformers.MBartConfig(**config, scale_embedding=False))
    else:
        hf = transformers.BartForConditionalGeneration(transformers.BartConfig(**config))
    ours = BartForConditionalGeneration(BartConfig(**config, pre_ln=pre_ln))
    ours.load_state_dict(hf.state_dict())
    return ours.eval(), hf.eval()


def tiny_inputs(seed: int):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 99, (3, 14), generator=generator)
    ids[:, 0], ids[:, -1] = 0, 2
    ids[1, 9:] = 1  # a padded row
    ids[1, 8] = 2
    return ids, (ids != 1).long()


def grid_against_baseline(ours, hf, ids, mask, max_length: int, grid):
    """Greedy and 4 beams: each of the settings ``grid(baseline, num_beams)`` builds from transformers'
    unconstrained output, compared with transformers. Returns (problems, total, changed), changed
    counting the cases whose output differs from the baseline (the option acted)."""
    problems, total, changed = [], 0, 0
    for num_beams in (1, 4):
        base = dict(num_beams=num_beams, max_length=max_length)
        baseline = hf.generate(ids, attention_mask=mask, **base)
        for case in grid(baseline, num_beams):
            settings = dict(base, **case)
            got, expected = run_both(ours, hf, ids, mask, settings)
            total += 1
            problems += [p for p in [difference(got, expected, settings)] if p]
            changed += expected.shape != baseline.shape or not torch.equal(expected, baseline)
    return problems, total, changed


def sampled_against_transformers(ours, hf, ids, mask, settings_list: list, generator_seed_offset: int):
    """Each sampling setting twice: after torch.manual_seed(i) (the global generator) and with
    generator= seeded with offset + i. Returns (problems, total, distinct outputs)."""
    problems, total, distinct = [], 0, set()
    for index, settings in enumerate(settings_list):
        for seed, use_generator in ((index, False), (generator_seed_offset + index, True)):
            got, expected = run_both(ours, hf, ids, mask, settings, seed=seed, use_generator=use_generator)
            total += 1
            problems += [p for p in [difference(got, expected, dict(settings, seed=seed))] if p]
            distinct.add(tuple(got.flatten().tolist()))
    return problems, total, distinct


def tiny_model(seed: int, eos_bias: float):
    """Ours alone (the reference needs no transformers model); ``eos_bias`` makes eos likely so that
    hypotheses finish at many different steps."""
    torch.manual_seed(seed)
    model = BartForConditionalGeneration(BartConfig(**TINY, init_std=0.3)).eval()
    with torch.no_grad():
        model.final_logits_bias[0, model.config.eos_token_id] = eos_bias
    return model


def ragged_inputs(seed: int, lengths=(12, 8, 5)):
    """Sources of different lengths, right-padded."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 99, (len(lengths), max(lengths)), generator=generator)
    ids[:, 0] = 0
    for row, length in enumerate(lengths):
        ids[row, length - 1], ids[row, length:] = 2, 1
    return ids, (ids != 1).long()
