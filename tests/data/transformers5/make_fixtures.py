"""Writes the folders next to this file with transformers 5.x's own ``save_pretrained``.

The test suite runs on transformers 4.57, so these tiny folders (random weights, 99-token vocabulary)
were written once by running this script in a virtual environment with transformers 5.x:

    python -m venv --system-site-packages /tmp/tf5 && /tmp/tf5/bin/pip install "transformers==5.23.0"
    /tmp/tf5/bin/python tests/data/transformers5/make_fixtures.py

bart/: post-LN, with generation settings (num_beams 4, max_length 30, no_repeat_ngram_size 3) that
5.x writes to generation_config.json; bart_sharded/: the same model in 4 safetensors shards with
model.safetensors.index.json; mbart/: an mBART (Pre-LN) model, config with "decoder_start_token_id": null.
"""
import os

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = dict(vocab_size=99, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)

assert transformers.__version__.startswith("5."), transformers.__version__
torch.manual_seed(0)
bart = transformers.BartForConditionalGeneration(transformers.BartConfig(**TINY))
bart.generation_config.num_beams = 4
bart.generation_config.max_length = 30
bart.generation_config.no_repeat_ngram_size = 3
bart.save_pretrained(os.path.join(HERE, "bart"))
bart.save_pretrained(os.path.join(HERE, "bart_sharded"), max_shard_size="20KB")
torch.manual_seed(1)
transformers.MBartForConditionalGeneration(transformers.MBartConfig(**TINY)).save_pretrained(os.path.join(HERE, "mbart"))
