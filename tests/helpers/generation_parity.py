"""Token-identity checks of this project's generate against transformers' generate (same weights)."""
import torch
import torch.nn.functional as F


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
