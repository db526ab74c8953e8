# Shared checks and launcher for the fine-tuning and evaluation scripts (sourced, not run).
split_positional() {  # MAX args...: POSITIONAL = the first MAX values before any --flag; PASS = the rest
  local max=$1; shift
  POSITIONAL=(); PASS=()
  for arg in "$@"; do
    if [ ${#PASS[@]} -gt 0 ] || [ ${#POSITIONAL[@]} -ge "$max" ] || [[ "$arg" == --* ]]; then PASS+=("$arg")
    else POSITIONAL+=("$arg"); fi
  done
}
gpus_present() {  # the number of GPUs a training process here would see, without starting Python
  # nvidia-smi -L lists the GPUs; CUDA_VISIBLE_DEVICES, when set, limits them to its entries up to the
  # first invalid one (as CUDA counts them: "" and "-1" hide all). No nvidia-smi: torch is asked when
  # /dev/nvidia* devices exist, else there is no GPU.
  local listed visible=0 entry entries
  if command -v nvidia-smi >/dev/null 2>&1; then
    listed=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  elif compgen -G "/dev/nvidia[0-9]*" >/dev/null; then
    "${PYTHON:-python3}" -c "import torch; print(torch.cuda.device_count())"; return
  else
    echo 0; return
  fi
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    IFS=, read -r -a entries <<< "$CUDA_VISIBLE_DEVICES"
    for entry in "${entries[@]}"; do
      entry=${entry// /}
      [[ -n "$entry" && "$entry" != -* ]] || break
      visible=$((visible + 1))
    done
    [ "$visible" -lt "$listed" ] && listed=$visible
  fi
  echo "${listed:-0}"
}

check_inputs() {  # DATA_DIR CONFIG_PATH NUM_GPU PREC PRELN splits...
  local data=$1 config=$2 gpus=$3 prec=$4 preln=$5; shift 5
  [ -d "$data" ] || { echo "error: data folder $data not found (scripts/get_data.sh prepares it)" >&2; exit 2; }
  for split in "$@"; do
    for side in source target; do
      [ -f "$data/$split.$side" ] || { echo "error: $data/$split.$side not found" >&2; exit 2; }
    done
  done
  [ -f "$config" ] || { echo "error: config file $config not found" >&2; exit 2; }
  [[ "$gpus" =~ ^[1-9][0-9]*$ ]] || { echo "error: NUM_GPU must be a positive whole number, got '$gpus'" >&2; exit 2; }
  case "$prec" in
    fp16) PREC_FLAGS=(--fp16) ;; bf16) PREC_FLAGS=(--bf16) ;; tf32) PREC_FLAGS=(--tf32) ;; fp32) PREC_FLAGS=(--no-tf32) ;;
    *) echo "error: precision must be fp16, bf16, tf32 or fp32, got '$prec'" >&2; exit 2 ;;
  esac
  case "$preln" in
    true) PRELN_FLAG=--pre_ln ;; false) PRELN_FLAG=--no-pre_ln ;;
    *) echo "error: PRELN must be true or false, got '$preln'" >&2; exit 2 ;;
  esac
  local present
  present=$(gpus_present)
  GPUS_PRESENT=$present
  if [ "$present" -gt 0 ] && [ "$gpus" -gt "$present" ]; then
    echo "error: $gpus GPUs requested, this machine has $present" >&2; exit 2
  fi
}

require_int() {  # SCRIPT NAME VALUE MIN: a whole number >= MIN, else one line and exit 2
  [[ "$3" =~ ^[0-9]+$ ]] && [ "$3" -ge "$4" ] || { echo "$1: $2 must be a whole number >= $4, got '$3'" >&2; exit 2; }
}

require_number() {  # SCRIPT NAME VALUE: a positive number (1e-4, 0.001), else one line and exit 2
  [[ "$3" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] && [[ ! "$3" =~ ^[0.]+([eE].*)?$ ]] || {
    echo "$1: $2 must be a positive number, got '$3'" >&2; exit 2; }
}

# Stop signals reach the training processes: SIGTERM (SLURM, Kubernetes, docker stop) and SIGUSR1
# (SLURM's --signal warning) are passed on as SIGTERM, which torchrun forwards to every worker; the
# workers finish their update, write a checkpoint and exit (pretrain.py/finetune.py: exit code 75).
# bash alone would not pass them on (and as a container's PID 1 would ignore SIGTERM). The command runs
# in its own process group (set -m), so Ctrl-C reaches it once, through this shell: the first makes it
# checkpoint and stop, a second stops it at once. torchrun waits TORCH_ELASTIC_SHUTDOWN_TIMEOUT seconds for
# the checkpoint before it kills the workers.
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=${TORCH_ELASTIC_SHUTDOWN_TIMEOUT:-120}
STOPPED_BY=""
run_forwarding_signals() {  # command...: its exit code; STOPPED_BY names a stop signal that arrived
  set -m; "$@" & local child=$! rc=0; set +m
  trap 'STOPPED_BY=SIGTERM; kill -TERM '"$child"' 2>/dev/null || true' TERM
  trap 'STOPPED_BY=SIGUSR1; kill -TERM '"$child"' 2>/dev/null || true' USR1
  trap 'STOPPED_BY=SIGINT; kill -INT '"$child"' 2>/dev/null || true' INT
  while true; do
    wait "$child" && rc=0 || rc=$?
    if [ "$rc" -gt 128 ] && kill -0 "$child" 2>/dev/null; then continue; fi  # wait was cut short by a signal
    break
  done
  trap - TERM USR1 INT
  return "$rc"
}

stopped_exit() {  # SCRIPT RC: after a stop signal, one line and exit 75 (resume by running the script again)
  if [ -n "$STOPPED_BY" ]; then
    echo "$1: stopped by $STOPPED_BY after writing a checkpoint (exit $2); run the same command again to resume" >&2
    exit 75
  fi
}

free_port() {  # a TCP port nobody listens on now (single-node runs: two runs on one machine never collide)
  "${PYTHON:-python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

rendezvous_port() {  # MASTER_PORT, else 29500 across nodes (every node must agree), else a free port
  if [ -n "${MASTER_PORT:-}" ]; then echo "$MASTER_PORT"
  elif [ "${NNODES:-1}" -gt 1 ]; then echo 29500
  else free_port; fi
}

launch_command() {  # N: LAUNCH = the command that starts N processes per node (NNODES, NODE_RANK, MASTER_ADDR,
  # MASTER_PORT: multi-node): torchrun, or the interpreter alone for one process on one node (torchrun's agent
  # would only add a second torch import and its own error report; the script runs as one process either way)
  [[ "${NNODES:-1}" =~ ^[1-9][0-9]*$ ]] || { echo "error: NNODES must be a positive whole number, got '${NNODES}'" >&2; exit 2; }
  if [ "$1" -gt 1 ] || [ "${NNODES:-1}" -gt 1 ]; then
    LAUNCH=("${PYTHON:-python3}" -m torch.distributed.run --nnodes="${NNODES:-1}" --node_rank="${NODE_RANK:-0}"
            --nproc_per_node="$1" --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="$(rendezvous_port)")
  else
    LAUNCH=("${PYTHON:-python3}")
  fi
}

launcher() {  # NUM_PROCESSES_PER_NODE script args...; NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT: multi-node
  local n=$1; shift
  if [ "${GPUS_PRESENT:-1}" = "0" ] && [ -n "${CPU_PROCESSES:-}" ]; then n=$CPU_PROCESSES; fi  # CPU-only machines
  launch_command "$n"
  local rc=0
  run_forwarding_signals "${LAUNCH[@]}" "$@" || rc=$?
  [ "$rc" -eq 0 ] || stopped_exit "launcher" "$rc"
  return "$rc"
}

check_model() {  # SCRIPT WHAT VALUE: a local file/folder, or a Hugging Face hub id (org/name) resolved by Python
  local script=$1 what=$2 value=$3
  [ -e "$value" ] && return 0
  if [[ "$value" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$ ]] && [[ "$value" != ./* ]] && [[ "$value" != data/* ]] && [[ "$value" != results/* ]]; then
    return 0  # a hub id: downloaded with huggingface_hub, or read from its cache when HF_HUB_OFFLINE=1
  fi
  echo "$script: $what $value does not exist (a .ckpt, a folder, or a Hugging Face hub id such as facebook/bart-large)" >&2
  exit 2
}
