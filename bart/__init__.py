"""BART pretraining, summarization fine-tuning and evaluation (docs/ARCHITECTURE.md is the map)."""
from bart.utils.foreign_noise import drop_known_noise

drop_known_noise()  # torchao's import lines that transformers' model loading brings (bart/utils/foreign_noise.py)
