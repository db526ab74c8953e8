"""A small learnable summarization set: the summary is the source's first sentence (its home:
benchmarks/corpora.py, which the configuration matrix's GPU run uses too)."""
from benchmarks.corpora import SUMMARY_WORDS as WORDS  # noqa: F401
from benchmarks.corpora import write_summarization_data  # noqa: F401
