#!/usr/bin/env bash
# tests/gpu on a real GPU: the lent NVIDIA machine of the `device` tool (docs/reliability.md, "The
# GPU tests on a real GPU"). CI runs tests/gpu on llvmpipe, which computes mediump in float32, so
# half math (precision 'fp16') and a driver's own rounding are only seen here.
#
# Here, once per checkout (fills the git-ignored .gl, .whl and .models, about 51 MB to carry):
#   ../shared/device/prepare.sh tflite==2.18.0 pytest-xdist==3.6.1 execnet==2.1.1 \
#       hypothesis==6.112.0 sortedcontainers==2.4.0
#   tests/gpu_on_device.sh --stage
# Then with the device tool: carry [".gl", ".whl", ".models"], command
#   bash tests/gpu_on_device.sh [pytest args, default: -n 8 tests/gpu]
# (the machine has no network: the MediaPipe models come from .models, the wheels from .whl).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--stage" ]; then
  grep -qxF "/.models/" .git/info/exclude 2>/dev/null || echo "/.models/" >> .git/info/exclude
  python=${PYTHON:-.venv/bin/python}  # the checkout's venv (./dev.sh makes it)
  GLES_DELEGATE_CACHE=$PWD/.models "$python" -c \
    "from gles_delegate.tools.fetch_models import fetch_models; print(len(fetch_models()), 'MediaPipe models in .models')"
  exit 0
fi

for deb in .gl/*.deb; do dpkg -x "$deb" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 GLES_DELEGATE_CACHE=$PWD/.models
ln -sfn "$PWD/tools" gles_delegate/tools  # the package's tools as setup.cfg maps them (no install there)
if [ $# -eq 0 ]; then set -- -n 8 tests/gpu; fi
exec python3 -m pytest -q -p no:cacheprovider "$@"
