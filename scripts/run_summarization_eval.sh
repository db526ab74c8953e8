#!/usr/bin/env bash
# The reference's name for scripts/run_eval_summarization.sh (same arguments; see its --help).
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_eval_summarization.sh" "$@"
