# Chooses the Python the recipe runs with (sourced from the repository root): $PYTHON when set;
# else .venv/bin/python when a previous run made one; else python3, unless that Python refuses pip
# installs (PEP 668: Debian 12, Ubuntu 24.04 system Pythons), in which case a virtual environment is
# made in .venv (seeing the system's packages, so a preinstalled torch is kept) and used.
if [ -n "${PYTHON:-}" ] && ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "$(basename "$0"): PYTHON (environment) '$PYTHON' is not a command found on PATH; set it to a Python or unset it" >&2
  exit 2
fi
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  if [ -x "$PWD/.venv/bin/python" ]; then
    PYTHON="$PWD/.venv/bin/python"
  elif python3 -c 'import os, sys, sysconfig
managed = os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
sys.exit(0 if managed and sys.prefix == sys.base_prefix else 1)'; then
    echo "[install] python3 refuses pip installs (PEP 668, externally managed): using a virtual environment in .venv"
    python3 -m venv --system-site-packages "$PWD/.venv" || {
      echo "error: python3 -m venv failed; install the venv module (apt-get install python3-venv) or set PYTHON" >&2; exit 2; }
    PYTHON="$PWD/.venv/bin/python"
  fi
fi
export PYTHON
