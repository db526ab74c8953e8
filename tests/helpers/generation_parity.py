"""Token-identity checks of this project's generate against transformers' generate (same weights).

Where transformers 5.x changed a semantic of ``generate``, this project keeps transformers 4.57's
(README, "Generation"): generation keys in the model's config are in effect, beam sampling draws as
4.57 did, an attention mask is inferred from the padding when none is given, and ``forced_eos_token_id``
with the same token in ``suppress_tokens`` is allowed. ``Transformers457`` is the reference for those
calls: the installed transformers where it is 4.x (its outputs checked against the recording), the
outputs transformers 4.57 gave, recorded in ``tests/data/transformers457_generation.json``, where 5.x
is installed. Every other call is compared with the installed transformers, whichever major.
To record again (transformers 4.57 installed, one process):
``BART_RECORD_TRANSFORMERS457=1 python -m pytest -p no:xdist tests/generation/test_generation.py``.
"""
import json
import os

import torch
import torch.nn.functional as F
import transformers

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
