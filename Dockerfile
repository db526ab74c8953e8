# BART recipe image on the NGC PyTorch container. The container's torch (CUDA build) is kept:
# scripts/install.sh installs torch only where none is importable.
# NGC PyTorch 26.09: torch 2.14.0a0+b2c75dd062.nv26.09, CUDA 13.4, Python 3.12 (README, Setup).
# Before: NGC PyTorch 25.10 (torch 2.9).
ARG FROM_IMAGE_NAME=nvcr.io/nvidia/pytorch:26.09-py3
FROM ${FROM_IMAGE_NAME}

# Offline assets live outside /workspace/bart, so mounting the repository there (launch.sh) does not
# hide them. BART_DEFAULT_TOKENIZER, the baked GPT-2-vocabulary folder, is the default for pretraining
# (or fine-tuning) from scratch only: a model's own tokenizer always wins, and TOKENIZER / --tokenizer
# stay the user's explicit choice (unset here). HF_HOME holds a hub cache with facebook/bart-large's
# tokenizer files, so public weights (the hub id, NGC's .ckpt files, fairseq's model.pt) find their
# tokenizer offline. (DL3064 takes the TOKEN in TOKENIZER for a secret; no secret is set here.)
# hadolint ignore=DL3064
ENV PYTHONUNBUFFERED=1 \
    BART_NLTK_DATA=/opt/bart_assets/nltk_data \
    BART_DEFAULT_TOKENIZER=/opt/bart_assets/tokenizer \
    HF_HOME=/opt/bart_assets/huggingface \
    BART_USE_SYSTEM_MPI=1
WORKDIR /workspace/bart

# Python dependencies first (cached layer), exactly as a bare-metal setup installs them.
COPY requirements.txt requirements-nodeps.txt requirements-transformers4.txt ./
COPY scripts/install.sh scripts/install.sh
RUN bash scripts/install.sh

# NVIDIA dllogger from its repository, pinned to a release tag (PyPI has only a placeholder).
RUN pip install --no-cache-dir "git+https://github.com/NVIDIA/dllogger@v1.0.0#egg=dllogger"

# apex's fused LAMB is used when importable; the project's own multi-tensor LAMB otherwise.
# Building apex takes a while; it is attempted and a failed build leaves the image usable.
ARG BUILD_APEX=1
# apex pinned to its master of 2026-07-08 (no release tag follows 25.09; this commit carries the C++20
# fix, #1985, that extensions built against torch 2.14 need; FusedLAMB and its kernels unchanged since
# 25.09 but for formatting); override with --build-arg APEX_COMMIT=... Before: 25.09's release commit 4bdecd06.
ARG APEX_COMMIT=6424da3b4faa6c8f062da4a48c424fff3f02d42d
RUN if [ "$BUILD_APEX" = "1" ] && ! python -c "import apex.optimizers" 2>/dev/null; then \
      APEX_CPP_EXT=1 APEX_CUDA_EXT=1 pip install --no-cache-dir --no-build-isolation -v \
        "git+https://github.com/NVIDIA/apex.git@${APEX_COMMIT}" \
      || echo "apex did not build: the project's multi-tensor LAMB will be used"; \
    fi

COPY . .
# Offline assets the recipe builds once: sentence-split data and a BART-style tokenizer folder.
RUN python -m bart.scoring.nltk_data && python -m bart.tokenization.build_tokenizer /opt/bart_assets/tokenizer
# facebook/bart-large's tokenizer (and config) into $HF_HOME's hub cache, as huggingface_hub downloads it:
# the files bart.hub fetches for a tokenizer, so resolving the hub id works offline in the container.
RUN python -c "from huggingface_hub import snapshot_download; from bart.hub import TOKENIZER_FILES; \
snapshot_download('facebook/bart-large', allow_patterns=TOKENIZER_FILES + ['config.json'])"
