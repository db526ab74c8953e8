# Shared checks and launcher of the scripts (sourced, not run).
# - Value checks: one checker per kind (value_ok / value_problem); check_inputs for positional values (with the
#   shifted-value hint), check_env, check_list, check_data_dir, check_launch_env; checks_done ends a script's
#   checks (CHECK_ONLY=1 stops there).
# - gpus_present: nvidia-smi and CUDA_VISIBLE_DEVICES (torch only where there is no nvidia-smi).
# - launch_command: utils.launch (torchrun), or the interpreter alone for one process on one node without
#   restarts; rendezvous_port; run_forwarding_signals passes stop signals on.
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

# Every value a script is given (its positional values and the environment variables it reads) is checked
# here before anything is started: a bad one is one line on stderr naming the value, where it came from and
# what it must be, and exit 2. One checker per kind of value (value_ok/value_problem), used by every script.
# CHECK_ONLY=1: a script ends after its checks (exit 0) without starting anything; the SLURM scripts use it.
ME=$(basename "$0")
PRESET_ERROR=__bad_preset_value__  # what a preset of scripts/params/ prints after its own error line
die() { echo "$ME: $*" >&2; exit 2; }  # one line, exit 2

ordinal() {  # 1 -> 1st, 2 -> 2nd, 11 -> 11th, 23 -> 23rd
  case "$1" in *1[0-9]) echo "${1}th" ;; *1) echo "${1}st" ;; *2) echo "${1}nd" ;; *3) echo "${1}rd" ;; *) echo "${1}th" ;; esac
}

is_hub_id() {  # org/name as the Hugging Face hub spells it (resolved by Python: online, or the cache offline)
  [[ "$1" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$ ]] && [[ "$1" != ./* ]] &&
    [[ "$1" != data/* ]] && [[ "$1" != results/* ]] && [[ "$1" != configs/* ]]
}

value_ok() {  # KIND VALUE: is VALUE a KIND?
  local v=$2
  case "$1" in
    count) [[ "$v" =~ ^[0-9]{1,15}$ ]] && [ "$v" -ge 1 ] ;;            # a whole number >= 1
    count0) [[ "$v" =~ ^[0-9]{1,15}$ ]] ;;                            # a whole number >= 0
    count_list) [[ "$v" =~ ^[[:space:],]*[0-9]{1,15}([[:space:],]+[0-9]{1,15})*[[:space:],]*$ ]] &&
      [[ ! "$v" =~ (^|[^0-9])0+([^0-9]|$) ]] ;;                       # whole numbers >= 1: "1 4 8" or 1,4,8
    count_all) [[ "$v" =~ ^([0-9]{1,15}|-1)$ ]] ;;                    # >= 0, or -1 for all
    count_or_all) [[ "$v" =~ ^([0-9]{1,15}|-1)$ ]] && [ "$v" != 0 ] ;; # >= 1, or -1 for all
    number) [[ "$v" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] && [[ ! "$v" =~ ^[0.]+([eE].*)?$ ]] ;;
    number0) [[ "$v" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] ;;
    precision) [[ "$v" =~ ^(fp16|bf16|tf32|fp32)$ ]] ;;
    train_precision) [[ "$v" =~ ^(fp8|fp16|bf16|tf32|fp32)$ ]] ;;  # fp8: a training precision (evaluated in bf16)
    bool) [[ "$v" =~ ^(true|false)$ ]] ;;
    preln) [[ "$v" =~ ^(true|false|auto)$ ]] ;;
    binary) [[ "$v" =~ ^(0|1)$ ]] ;;
    phase) [[ "$v" =~ ^(1|2)$ ]] ;;
    corpus) [[ "$v" =~ ^(wikipedia|common_crawl|openwebtext)$ ]] ;;
    port) [[ "$v" =~ ^[0-9]{1,5}$ ]] && [ "$v" -ge 1 ] && [ "$v" -le 65535 ] ;;
    date) [[ "$v" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}$ ]] && date -d "$v" >/dev/null 2>&1 ;;
    word) [[ "$v" =~ ^[^[:space:]]+$ ]] ;;                            # one word (a split name, a host)
    url) [[ "$v" =~ ^(https?|file|s3|ftp)://[^[:space:]]+$ ]] ;;
    folder) [ -d "$v" ] ;;
    file) [ -f "$v" ] ;;
    path) [ -e "$v" ] ;;                                              # a file or a folder
    outdir) [ -n "$v" ] && { [ -d "$v" ] || [ ! -e "$v" ]; } ;;       # a folder, or a name free for one
    model) [ -e "$v" ] || is_hub_id "$v" ;;                           # a file, a folder or a hub id
    command) command -v "$v" >/dev/null 2>&1 ;;
    *) echo "common.sh: unknown kind of value '$1'" >&2; exit 2 ;;
  esac
}

value_problem() {  # KIND LABEL VALUE: the sentence saying why VALUE is not a KIND
  local label=$2 v=$3
  case "$1" in
    count) echo "$label '$v' is not a whole number >= 1" ;;
    count0) echo "$label '$v' is not a whole number >= 0" ;;
    count_list) echo "$label '$v' is not a whole number >= 1 or a list of them (\"1 4 8\" or 1,4,8)" ;;
    count_all) echo "$label '$v' is not a whole number >= 0 (or -1 for all)" ;;
    count_or_all) echo "$label '$v' is not a whole number >= 1 (or -1 for all)" ;;
    number) echo "$label '$v' is not a positive number (such as 1e-4 or 0.001)" ;;
    number0) echo "$label '$v' is not a number >= 0" ;;
    precision) echo "$label '$v' is not a precision: fp16, bf16, tf32 or fp32" ;;
    train_precision) echo "$label '$v' is not a precision: fp8, fp16, bf16, tf32 or fp32" ;;
    bool) echo "$label '$v' is not true or false" ;;
    preln) echo "$label '$v' is not true, false or auto" ;;
    binary) echo "$label '$v' is not 0 or 1" ;;
    phase) echo "$label '$v' is not a phase: 1 or 2" ;;
    corpus) echo "$label '$v' is not a corpus: wikipedia, common_crawl or openwebtext" ;;
    port) echo "$label '$v' is not a TCP port (1-65535)" ;;
    date) echo "$label '$v' is not a date YYYY-MM-DD" ;;
    word) echo "$label '$v' is not one word (empty, or with spaces)" ;;
    url) echo "$label '$v' is not a URL (https://..., file://...)" ;;
    folder) echo "$label: $v not found (no such folder)" ;;
    file) echo "$label: $v not found (no such file)" ;;
    path) echo "$label: $v not found (no such file or folder)" ;;
    outdir) echo "$label: $v is a file, not a folder to write into" ;;
    model) echo "$label: $v does not exist (a .ckpt, a folder, or a Hugging Face hub id such as facebook/bart-large)" ;;
    command) echo "$label '$v' is not a command found on PATH" ;;
  esac
}

check_value() {  # KIND LABEL VALUE [HINT]: VALUE must be a KIND, else one line (with HINT) and exit 2
  value_ok "$1" "$3" || die "$(value_problem "$1" "$2" "$3")${4:+; $4}"
}

check_env() {  # KIND NAME [HINT]: the environment variable NAME, when set and not empty, must be a KIND
  local value=${!2:-}
  [ -z "$value" ] || check_value "$1" "$2 (environment)" "$value" "${3:-}"
}

check_list() {  # KIND NAME: each word of the environment variable NAME (when set) must be a KIND
  local word
  [ -n "${!2+set}" ] || return 0
  [ -n "${!2//[[:space:]]/}" ] || die "$2 (environment) is empty; give at least one value or unset it"
  for word in ${!2}; do check_value "$1" "$2 (environment) entry" "$word"; done
}

check_inputs() {  # GIVEN VALUE...: the script's values, in order, against ARG_NAMES and ARG_KINDS (arrays the
  # script sets); the first GIVEN were typed, the rest are defaults. A typed value that is not its kind but is
  # the next one's is most likely shifted by a value left out before it: the line says so.
  local given=$1 i pass value label hint kind; shift
  for pass in words paths; do  # the values' form first (no file system), then the files and folders named
  i=0
  for value in "$@"; do
    i=$((i + 1)); kind=${ARG_KINDS[i-1]}
    case "$kind" in folder|file|path|outdir|model|command) [ "$pass" = paths ] || continue ;;
                    *) [ "$pass" = words ] || continue ;; esac
    value_ok "$kind" "$value" && continue
    if [ "$i" -le "$given" ]; then label="${ARG_NAMES[i-1]} ($(ordinal "$i"))"
    else label="${ARG_NAMES[i-1]} ($(ordinal "$i"), not given: the default)"; fi
    hint=""
    if [ "$i" -le "$given" ] && [ "$i" -lt "${#ARG_NAMES[@]}" ] && value_ok "${ARG_KINDS[i]}" "$value"; then
      hint="the $(ordinal $((i + 1))) value is ${ARG_NAMES[i]}: did you leave out ${ARG_NAMES[i-1]} (or a value before it)?"
    fi
    check_value "$kind" "$label" "$value" "$hint"
  done
  done
}

check_no_extra_values() {  # MAX WHERE: after split_positional, a value that is not a --flag beyond the MAX
  # positional ones would reach WHERE as a stray argument
  if [ ${#PASS[@]} -gt 0 ] && [[ "${PASS[0]}" != -* ]]; then
    die "'${PASS[0]}' is a value beyond the $1 this script takes; what follows them goes to $2 and must start with -- (a flag)"
  fi
}

check_data_dir() {  # LABEL DIR SPLIT...: DIR holds SPLIT.source and SPLIT.target for each SPLIT
  local label=$1 data=$2 split side; shift 2
  [ -d "$data" ] || die "$label: data folder $data not found (scripts/get_data.sh prepares it)"
  for split in "$@"; do
    check_value word "$label split" "$split"
    for side in source target; do
      [ -f "$data/$split.$side" ] || die "$label: $data/$split.$side not found (each split needs .source and .target)"
    done
  done
}

check_gpus() {  # N LABEL: N processes fit the GPUs present (any number on a CPU-only machine); sets GPUS_PRESENT
  GPUS_PRESENT=$(gpus_present)
  if [ "$GPUS_PRESENT" -gt 0 ] && [ "$1" -gt "$GPUS_PRESENT" ]; then
    die "$2 asks for $1 GPUs, this machine has $GPUS_PRESENT"
  fi
}

check_launch_env() {  # the environment of launch_command and launcher, and the interpreter
  check_env count NNODES
  check_env count0 NODE_RANK
  if [ "${NODE_RANK:-0}" -ge "${NNODES:-1}" ]; then
    die "NODE_RANK (environment) '${NODE_RANK:-0}' is not below NNODES '${NNODES:-1}' (ranks count from 0)"
  fi
  check_env word MASTER_ADDR
  check_env port MASTER_PORT
  check_env count CPU_PROCESSES
  check_env count TORCH_ELASTIC_SHUTDOWN_TIMEOUT
  check_env count0 MAX_RESTARTS
  check_value command "PYTHON (environment, default python3)" "${PYTHON:-python3}"
}

precision_flags() {  # PREC: PREC_FLAGS for training, EVAL_PREC_FLAGS for evaluation: the same flags (fp32 turns TF32
  # off: fp32 means fp32), but fp8, a training precision (float8 linear layers under bf16 autocast), evaluates in bf16
  case "$1" in
    fp16) PREC_FLAGS=(--fp16) ;; bf16) PREC_FLAGS=(--bf16) ;; tf32) PREC_FLAGS=(--tf32) ;; fp32) PREC_FLAGS=(--no-tf32) ;;
    fp8) PREC_FLAGS=(--fp8) ;;
  esac
  EVAL_PREC_FLAGS=("${PREC_FLAGS[@]}")
  [ "$1" != fp8 ] || EVAL_PREC_FLAGS=(--bf16)
}

preln_flag() {  # true|false|auto: PRELN_FLAG, the flag array (empty for auto: the checkpoint decides)
  case "$1" in true) PRELN_FLAG=(--pre_ln) ;; false) PRELN_FLAG=(--no-pre_ln) ;; *) PRELN_FLAG=() ;; esac
}

flag_value() {  # FLAG ARGS...: the last value ARGS give FLAG (--flag value or --flag=value); status 1 when not given
  local flag=$1 found="" given=1; shift
  while [ $# -gt 0 ]; do
    case "$1" in
      "$flag") found=${2:-}; given=0; shift ;;
      "$flag"=*) found=${1#*=}; given=0 ;;
    esac
    shift
  done
  [ "$given" = 0 ] && echo "$found"
}

has_flag() {  # FLAG ARGS...: whether ARGS hold the switch FLAG
  local flag=$1 arg; shift
  for arg in "$@"; do [ "$arg" = "$flag" ] && return 0; done
  return 1
}

check_extra_args() {  # WHERE ARGS...: a training script's extra flags (EXTRA_ARGS and the flags after its values) against
  # what the script sets itself: the output folder is OUTPUT_DIR (the script reads the run there afterwards), and
  # the values its own checks would refuse (the same checkers)
  local where=$1 value; shift
  if value=$(flag_value --output_dir "$@"); then
    die "--output_dir $value in $where: the run's folder is OUTPUT_DIR (the script reads the run from there after training); set OUTPUT_DIR=$value instead"
  fi
  if value=$(flag_value --seed "$@"); then check_value count0 "--seed in $where" "$value"; fi
  if has_flag --overwrite_output_dir "$@" && [ "${MAX_RESTARTS:-0}" != 0 ]; then
    die "--overwrite_output_dir in $where with MAX_RESTARTS (environment) '$MAX_RESTARTS': every torchrun restart would remove the run and start over instead of resuming; give one"
  fi
}

# A script's command as typed (captured when common.sh is sourced: the script's own arguments) and the environment
# values it reads that were set (RESUME_ENV), for the line that says how to resume it: the same command with the
# same values, so that nothing the run was started with drifts on a resume
SCRIPT_COMMAND=("$(pwd)/scripts/$(basename "$0")" "$@")
RESUME_ENV=(RESULTS_DIR PHASES TOKENIZER BART_DEFAULT_TOKENIZER SEED N_VAL VAL_CHECK_INTERVAL NUM_WORKERS LOG_FREQ
            EVAL_CHECKPOINT EVAL_EXTRA_ARGS CPU_PROCESSES NNODES NODE_RANK MASTER_ADDR MASTER_PORT MAX_RESTARTS RDZV_ID)
SCRIPT_ENV=()
for _name in "${RESUME_ENV[@]}"; do [ -z "${!_name+set}" ] || SCRIPT_ENV+=("$_name"); done
unset _name

resume_command() {  # the command that resumes a stopped training script: the same one in the same OUTPUT_DIR (the
  # scripts resume with --resume_from_checkpoint auto) with the same environment values (SCRIPT_ENV, EXTRA_ARGS),
  # without --overwrite_output_dir (which would start over)
  local args=() arg extra=() name
  for arg in "${SCRIPT_COMMAND[@]:1}"; do [ "$arg" = --overwrite_output_dir ] || args+=("$arg"); done
  read -r -a extra <<< "${EXTRA_ARGS:-}"
  local kept=()
  for arg in "${extra[@]+"${extra[@]}"}"; do [ "$arg" = --overwrite_output_dir ] || kept+=("$arg"); done
  [ ${#kept[@]} -eq 0 ] || printf 'EXTRA_ARGS=%q ' "${kept[*]}"
  for name in "${SCRIPT_ENV[@]+"${SCRIPT_ENV[@]}"}"; do printf '%s=%q ' "$name" "${!name}"; done
  [ -z "${OUTPUT_DIR:-}" ] || printf 'OUTPUT_DIR=%q ' "$OUTPUT_DIR"
  printf 'bash %q' "${SCRIPT_COMMAND[0]}"
  [ ${#args[@]} -eq 0 ] || printf ' %q' "${args[@]}"
}

checks_done() {  # the end of a script's checks: CHECK_ONLY=1 stops here
  check_env binary CHECK_ONLY
  if [ "${CHECK_ONLY:-0}" = 1 ]; then echo "$ME: every value checked (CHECK_ONLY=1: nothing started)"; exit 0; fi
}

# Stop signals reach the training processes: SIGTERM (SLURM, Kubernetes, docker stop) and SIGUSR1
# (SLURM's --signal warning) are passed on as SIGTERM, which the launcher (utils.launch) forwards to every worker; the
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

stopped_exit() {  # SCRIPT RC [RUN_DIR]: after a stop signal, one line and exit 75 (resume by running the script again;
  # RUN_DIR, the stopped run's folder, default OUTPUT_DIR, says whether it wrote a checkpoint);
  # 130 stays 130 (a second Ctrl-C: stopped at once, without a checkpoint)
  if [ -n "$STOPPED_BY" ] && [ "$2" = 130 ]; then
    echo "$1: stopped at once by a second Ctrl-C, without writing a checkpoint (exit 130)" >&2
    exit 130
  fi
  if [ -n "$STOPPED_BY" ]; then
    local saved="after writing a checkpoint" how="to resume, run"
    local run_dir=${3:-${OUTPUT_DIR:-}}
    if [ -n "$run_dir" ] && ! compgen -G "$run_dir/*_step*.ckpt" >/dev/null; then
      saved="before its first checkpoint" how="to start it again (its log is kept), run"
    fi
    echo "$1: stopped by $STOPPED_BY $saved (exit $2); $how: $(resume_command)" >&2
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
  # would only add a second torch import and its own error report; the script runs as one process either way).
  # MAX_RESTARTS (default 0): torchrun starts the processes again after one fails, that many times; the
  # training scripts resume from the newest checkpoint (--resume_from_checkpoint auto). Across nodes the
  # restarts use c10d rendezvous: a node whose processes restart brings every node's back (under static
  # rendezvous the other nodes' processes would sit in a collective until --dist_timeout); node ranks then
  # follow the order the nodes join (rank 0, which writes the checkpoints, may be on any node).
  check_env count NNODES
  check_env count0 MAX_RESTARTS
  local restarts=${MAX_RESTARTS:-0}
  if [ "$1" -gt 1 ] || [ "${NNODES:-1}" -gt 1 ] || [ "$restarts" -gt 0 ]; then
    # utils.launch: torchrun (its flags) ending with the workers' code (75, 130, 4, ...) in one line after a stop
    # signal, instead of exit 1 and torchrun's SignalException traceback
    LAUNCH=("${PYTHON:-python3}" -m utils.launch --nnodes="${NNODES:-1}" --nproc_per_node="$1")
    if [ "$restarts" -gt 0 ] && [ "${NNODES:-1}" -gt 1 ]; then
      LAUNCH+=(--max_restarts="$restarts" --rdzv_backend=c10d --rdzv_endpoint="${MASTER_ADDR:-127.0.0.1}:$(rendezvous_port)"
               --rdzv_id="${RDZV_ID:-${SLURM_JOB_ID:-bart}}")
    else
      LAUNCH+=(--node_rank="${NODE_RANK:-0}" --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="$(rendezvous_port)")
      [ "$restarts" -eq 0 ] || LAUNCH+=(--max_restarts="$restarts")
    fi
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
  check_value model "$2" "$3"
}
