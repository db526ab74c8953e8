from __future__ import annotations


class DataError(ValueError):
    """The data cannot serve what the flags ask for (the entry scripts print it as one line)."""


def changes(saved: dict | None, ours: dict) -> str:
    """``name saved → ours`` for each entry of this run's ``ours`` that a checkpoint's record ``saved`` holds
    otherwise (every entry where it holds none), comma-separated: what a refused data position names."""
    return ", ".join(f"{k} {(saved or {}).get(k)} → {v}" for k, v in ours.items() if not saved or saved.get(k) != v)
