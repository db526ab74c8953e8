"""Summarization and translation metrics: ROUGE as the papers report it, and sacreBLEU.

ROUGE-Lsum (the "RL" of the BART paper) is summary-level LCS over sentences, and rouge-score splits
summaries into sentences only at newlines. Both predictions and references are therefore split with
Punkt (offline data, :mod:`bart.scoring.nltk_data`) and joined with newlines before scoring; without that,
Lsum silently equals sentence-less ROUGE-L. Line breaks already in a text (raw CNN/DM highlights,
multi-line predictions) are kept: each line is split into sentences on its own, as rouge-score is
used on such texts (``"\\n".join(sent_tokenize(line))`` per line), so unpunctuated lines never merge.
"""
from __future__ import annotations

from collections.abc import Sequence

ROUGE_KEYS = ("rouge1", "rouge2", "rougeL", "rougeLsum")


def _check_lengths(predictions: Sequence[str], references: Sequence[str]) -> None:
    if len(predictions) != len(references):
        raise ValueError(f"metrics: {len(predictions)} predictions but {len(references)} references")


def add_sentence_newlines(text: str) -> str:
    """One sentence per line, as rouge-score's rougeLsum expects: the existing lines are kept and each
    is split into sentences with Punkt (blank lines, which rouge-score ignores, are dropped)."""
    from bart.scoring.nltk_data import sent_tokenize

    return "\n".join(sentence for line in text.split("\n") for sentence in sent_tokenize(line))


def calculate_rouge(predictions: Sequence[str], references: Sequence[str], rouge_keys=ROUGE_KEYS,
                    use_stemmer: bool = True, bootstrap: bool = True, seed: int = 0) -> dict[str, float]:
    """F1 x 100 per ROUGE type (bootstrap mid value when ``bootstrap``), rounded to 4 decimals."""
    import numpy as np

    from bart.runtime.lazy_package import defer_package_init
    defer_package_init("nltk", "nltk.stem")  # rouge-score needs nltk.stem.porter, not nltk's scipy (~1.4 s)
    from rouge_score import rouge_scorer, scoring

    _check_lengths(predictions, references)
    scorer = rouge_scorer.RougeScorer(list(rouge_keys), use_stemmer=use_stemmer)
    aggregator = scoring.BootstrapAggregator()
    sums = {key: 0.0 for key in rouge_keys}
    needs_lines = "rougeLsum" in rouge_keys
    for prediction, reference in zip(predictions, references):
        if needs_lines:
            prediction, reference = add_sentence_newlines(prediction), add_sentence_newlines(reference)
        scores = scorer.score(reference, prediction)
        aggregator.add_scores(scores)
        for key in rouge_keys:
            sums[key] += scores[key].fmeasure
    if bootstrap and predictions:
        state = np.random.get_state()
        np.random.seed(seed)  # rouge-score resamples with numpy's global generator
        try:
            result = aggregator.aggregate()
        finally:
            np.random.set_state(state)
        return {key: round(result[key].mid.fmeasure * 100, 4) for key in rouge_keys}
    count = max(len(predictions), 1)
    return {key: round(sums[key] / count * 100, 4) for key in rouge_keys}


def calculate_bleu(predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Corpus BLEU with sacreBLEU's default tokenisation."""
    import sacrebleu

    _check_lengths(predictions, references)
    return {"bleu": round(sacrebleu.corpus_bleu(list(predictions), [list(references)]).score, 4)}
