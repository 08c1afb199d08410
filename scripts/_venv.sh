# Shared by scripts/run and scripts/test: a .venv with the locked dependencies, reinstalled
# only when the lock file changes.
ensure_venv() {
  local lock="$1"
  local python="${PYTHON:-python3}"
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "Airlock needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)." >&2
    exit 1
  fi
  [ -x .venv/bin/python ] || "$python" -m venv .venv
  local stamp=".venv/.installed-$(basename "$lock")"
  if [ ! -f "$stamp" ] || ! cmp -s "$lock" "$stamp"; then
    .venv/bin/python -m pip install -q --upgrade pip
    # Every file's sha256 is in the lock (scripts/lock): a package that differs from what was locked is refused.
    .venv/bin/python -m pip install -q --require-hashes -r "$lock"
    cp "$lock" "$stamp"
  fi
}
