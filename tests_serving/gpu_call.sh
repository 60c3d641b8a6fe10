#!/usr/bin/env bash
# One call of the serving tier's GPU run on the device machine (docs/testing.md, "The serving
# tier on a GPU"). The prepared set (the serving wheels the GPU image lacks, unpacked and
# zstd-packed, split into pieces of at most 55 MiB in .gpuwh/) travels one piece per call:
#   tests_serving/gpu_call.sh piece N          copy .gpuwh/pN to /tmp/wh (the next calls read it)
#   tests_serving/gpu_call.sh run PROFILE      unpack once, then gpu_run.py for PROFILE (pd or
#                                              aggregated); results and logs under $OUT
#   tests_serving/gpu_call.sh rehearse         unpack once, then `ray-pd-eks rehearse --device
#                                              cuda` on cdk.out/rendered (carry it), as a user
# The wheels in .gpuwh/extra (packages the set was missing, built for the image's Python 3.12)
# go beside the set; extra/cli-deps.tar.gz holds botocore without its service models, which
# the CLI imports and the image lacks.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/wh "${OUT:-/tmp/out}"
case "$1" in
piece)
  cp ".gpuwh/p$2" /tmp/wh/ && ls -la /tmp/wh
  if [ "$2" = 0 ]; then
    nvidia-smi -L; python3 -V; command -v zstd || echo "no zstd binary"
    python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))'
  fi
  ;;
run|rehearse)
  [ "$1" = rehearse ] && set -- run rehearse
  profile=$2
  if [ ! -f /tmp/site/.done ]; then
    mkdir -p /tmp/site
    if command -v zstd >/dev/null; then
      cat /tmp/wh/p* | zstd -dc | tar -x -C /tmp/site
    else
      python3 -m pip install -q --no-deps --no-index --target /tmp/zst .gpuwh/extra/zstandard-*.whl
      cat /tmp/wh/p* | PYTHONPATH=/tmp/zst python3 -c 'import sys, zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)' | tar -x -C /tmp/site
    fi
    ls .gpuwh/extra/*.whl | grep -v zstandard | xargs python3 -m pip install -q --no-deps \
      --no-index --no-compile --target /tmp/site
    mkdir -p /tmp/cli && tar -xzf .gpuwh/extra/cli-deps.tar.gz -C /tmp/cli
    touch /tmp/site/.done
  fi
  PYTHONPATH=/tmp/site python3 -c 'import vllm, ray, nixl; print("imports:", vllm.__version__, ray.__version__)' 2>&1 | tail -3
  if [ "$2" = rehearse ]; then
    python3 -c 'import sys; sys.path.insert(0, "."); from pathlib import Path
from tests_serving.gpu_run import make_venv; make_venv(Path("/tmp/site"), Path("/tmp/serving-venv"))'
    RAY_PD_EKS_SERVING_VENV=/tmp/serving-venv PYTHONPATH=/tmp/cli PYTHONUNBUFFERED=1 python3 -c \
      'import sys; from ray_pd_eks.cli.main import main; sys.exit(main(sys.argv[1:]))' rehearse \
      --device cuda --timeout-minutes 8 --workdir /tmp/rehearse 2>&1 | tee "${OUT:-/tmp/out}/rehearse.log"
    for f in /tmp/rehearse/plane.log /tmp/rehearse/ray-logs/serve/*.log /tmp/rehearse/ray-logs/worker-*.err; do
      [ -f "$f" ] && { echo "==> $f"; tail -n 80 "$f"; }
    done >"${OUT:-/tmp/out}/rehearse-logs.txt" 2>&1
    exit 0
  fi
  shift 2
  PYTHONUNBUFFERED=1 timeout -s TERM "${RUN_LIMIT:-540}" python3 -m tests_serving.gpu_run run \
    --apps .gpuwh/apps.json --site /tmp/site --profile "$profile" --out "${OUT:-/tmp/out}" "$@" 2>&1 | tee "${OUT:-/tmp/out}/$profile-driver.log"
  ;;
esac
