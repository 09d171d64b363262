#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine (root) or an existing checkout:
#   ./dev.sh demo    install everything, run the default model on the GPU delegate
#   ./dev.sh test    install everything, run the test suite
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

stamp="$VENV/.installed"
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e '.[test]'
  touch "$stamp"
fi

case "${1:-}" in
  demo) shift; exec "$VENV/bin/python" -m gles_delegate.tools.demo "$@" ;;
  test) shift
        status=0
        "$VENV/bin/python" -m pytest -q -n 2 --durations=15 "$@" || status=$?
        if [ $# -eq 0 ]; then  # the kernels again, on a desktop OpenGL 4.3+ core context, whatever the first pass gave
          "$VENV/bin/python" -m pytest -q -n 2 --gl-api gl tests/gpu || status=$?
        fi
        exit "$status" ;;
  *) echo "usage: $0 demo|test [args]" >&2; exit 2 ;;
esac
