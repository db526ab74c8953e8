import numpy as np
import pytest
import sacrebleu
from rouge_score import rouge_scorer, scoring

from utils.metrics import calculate_bleu, calculate_rouge

PREDS = ["The cat sat on the mat. It was happy. Then it slept.",
         "Dr. Smith visited the U.S. last year. He liked it."]
REFS = ["A cat was sitting on the mat. The cat was happy. It fell asleep later.",
        "Dr. Smith went to the U.S. in 2019. He enjoyed the trip."]
SPLIT_PREDS = ["The cat sat on the mat.\nIt was happy.\nThen it slept.",
               "Dr. Smith visited the U.S. last year.\nHe liked it."]
SPLIT_REFS = ["A cat was sitting on the mat.\nThe cat was happy.\nIt fell asleep later.",
              "Dr. Smith went to the U.S. in 2019.\nHe enjoyed the trip."]


def test_rouge_equals_rouge_score_with_newline_sentences(punkt_dir):
    ours = calculate_rouge(PREDS, REFS)
    keys = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    scorer = rouge_scorer.RougeScorer(keys, use_stemmer=True)
    aggregator = scoring.BootstrapAggregator()
    for p, r in zip(SPLIT_PREDS, SPLIT_REFS):
        aggregator.add_scores(scorer.score(r, p))
    np.random.seed(0)
    expected = aggregator.aggregate()
    for key in keys:
        assert ours[key] == pytest.approx(expected[key].mid.fmeasure * 100, abs=1e-3)


def test_lsum_differs_from_l_for_multi_sentence_summaries(punkt_dir):
    scores = calculate_rouge(PREDS, REFS)
    assert scores["rougeLsum"] > scores["rougeL"] + 1.0


def test_perfect_and_mismatched(punkt_dir):
    assert calculate_rouge(REFS, REFS, bootstrap=False) == {k: 100.0 for k in ("rouge1", "rouge2", "rougeL", "rougeLsum")}
    with pytest.raises(ValueError, match="2 predictions but 1 references"):
        calculate_rouge(PREDS, REFS[:1])


def test_bleu_equals_sacrebleu():
    ours = calculate_bleu(PREDS, REFS)["bleu"]
    assert ours == pytest.approx(sacrebleu.corpus_bleu(PREDS, [REFS]).score, abs=1e-4)
    assert calculate_bleu(REFS, REFS)["bleu"] == pytest.approx(100.0)
