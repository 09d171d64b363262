#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine (root) or an existing checkout:
#   ./dev.sh demo    install everything, run the default model on the GPU delegate
#   ./dev.sh test    install everything, run the test suite
#   ./dev.sh test-lower-bounds   the suite again with every dependency at its lowest allowed version
# It installs Debian's Python venv and Mesa EGL packages when they are missing, makes .venv,
# and installs this package with its test extras from PyPI.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-.venv}

need_debs=()
command -v python3 >/dev/null || need_debs+=(python3)
python3 -c 'import ensurepip, venv' 2>/dev/null || need_debs+=(python3-venv)
for pkg in libegl1 libegl-mesa0 libgl1-mesa-dri libgles2; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_debs+=("$pkg")
done
if [ ${#need_debs[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need_debs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_debs[@]}" >/dev/null
fi

# install VENV [pip args]: make the venv and install the package with its test extras, once
# (again when setup.cfg or the constraints change).
install() {
  local venv=$1; shift
  if [ ! -f "$venv/.installed" ] || [ setup.cfg -nt "$venv/.installed" ] \
     || [ tests/lower-bounds.txt -nt "$venv/.installed" ]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q "$@" -e '.[test]'
    touch "$venv/.installed"
  fi
}

# run_tests VENV [pytest args]: the suite (or the given tests), then with no arguments the
# kernels again on a desktop OpenGL 4.3+ core context; both run, and either failing fails.
run_tests() {
  local venv=$1; shift
  local status=0
  "$venv/bin/python" -m pytest -q -n 2 --durations=15 "$@" || status=$?
  if [ $# -eq 0 ]; then
    "$venv/bin/python" -m pytest -q -n 2 --gl-api gl tests/gpu || status=$?
  fi
  return "$status"
}

case "${1:-}" in
  demo) shift; install "$VENV"; exec "$VENV/bin/python" -m gles_delegate.tools.demo "$@" ;;
  test) shift; install "$VENV"; run_tests "$VENV" "$@" ;;
  # The same suite with every dependency at the lowest version setup.cfg allows (CI runs both).
  test-lower-bounds) shift; install "${VENV_LOWER:-.venv-lower-bounds}" -c tests/lower-bounds.txt
                     run_tests "${VENV_LOWER:-.venv-lower-bounds}" "$@" ;;
  *) echo "usage: $0 demo|test|test-lower-bounds [pytest args]" >&2; exit 2 ;;
esac
