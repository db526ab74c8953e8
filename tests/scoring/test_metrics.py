import numpy as np
import pytest
import sacrebleu
from rouge_score import rouge_scorer, scoring

from bart.scoring.metrics import calculate_bleu, calculate_rouge

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


# multi-line texts with unpunctuated lines (raw CNN/DM highlights, multi-line predictions), a blank
# line and a line holding two sentences
MULTILINE_PREDS = ["the storm closed the harbor\nthe mayor opened the new museum. Schools stay shut\n\nmarket prices rose",
                   "Farmers began the harvest early\nthe bridge reopened after repairs\ntrain service resumes friday"]
MULTILINE_REFS = ["The storm closed the harbor on Monday\nthe new museum was opened by the mayor\nschools stay shut. "
                  "Market prices rose sharply",
                  "the harvest began early for farmers. The bridge reopened\ntrains run again from friday"]


def _rouge_score_standard(predictions, references, split):
    """rouge-score used the standard way, each text prepared by ``split``; bootstrap with seed 0."""
    keys = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    scorer = rouge_scorer.RougeScorer(keys, use_stemmer=True)
    aggregator = scoring.BootstrapAggregator()
    for p, r in zip(predictions, references):
        aggregator.add_scores(scorer.score(split(r), split(p)))
    np.random.seed(0)
    return {key: value.mid.fmeasure * 100 for key, value in aggregator.aggregate().items()}


def test_rouge_lsum_keeps_existing_lines_and_splits_sentences_inside_them(punkt_dir):
    import nltk

    def per_line(text):
        return "\n".join("\n".join(nltk.sent_tokenize(line)) for line in text.split("\n"))

    def merged(text):  # what the scorer did before: line breaks replaced by spaces
        return "\n".join(nltk.sent_tokenize(text.replace("\n", " ")))

    ours = calculate_rouge(MULTILINE_PREDS, MULTILINE_REFS)
    expected = _rouge_score_standard(MULTILINE_PREDS, MULTILINE_REFS, per_line)
    for key in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        assert ours[key] == pytest.approx(expected[key], abs=1e-3), key
    # the existing lines matter: merging them gives another Lsum (and the same R1/R2/RL)
    before = _rouge_score_standard(MULTILINE_PREDS, MULTILINE_REFS, merged)
    assert abs(before["rougeLsum"] - expected["rougeLsum"]) > 1.0
    assert before["rouge1"] == pytest.approx(expected["rouge1"])
    # and the sentences inside a line are split too
    from bart.scoring.metrics import add_sentence_newlines
    assert add_sentence_newlines(MULTILINE_PREDS[0]).split("\n") == [
        "the storm closed the harbor", "the mayor opened the new museum.", "Schools stay shut", "market prices rose"]
    # without bootstrap: the plain mean of rouge-score's F1 over the pairs
    scorer = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True)
    mean = np.mean([scorer.score(per_line(r), per_line(p))["rougeLsum"].fmeasure
                    for p, r in zip(MULTILINE_PREDS, MULTILINE_REFS)]) * 100
    assert calculate_rouge(MULTILINE_PREDS, MULTILINE_REFS, bootstrap=False)["rougeLsum"] == pytest.approx(mean, abs=1e-3)


def test_each_validation_metric_ranks_in_its_own_direction(monkeypatch):
    """The loss improves downwards, the tasks' scores upwards; a task whose scores fall as they improve (an error
    rate) says so on its TaskMetric and best-k and early stopping follow."""
    from bart import evaluation
    assert evaluation.lower_is_better("loss")
    assert not any(evaluation.lower_is_better(key) for key in ("rouge1", "rouge2", "rougeL", "rougeLsum", "bleu"))
    error_rate = evaluation.TaskMetric("wer", lambda p, r: {"wer": 0.0}, "wer", ("wer",), higher_is_better=False)
    monkeypatch.setitem(evaluation.TASK_METRICS, "speech", error_rate)
    assert evaluation.lower_is_better("wer")
