#!/usr/bin/env bash
# One call of the serving tier's GPU run on the device machine (docs/testing.md, "The serving
# tier on a GPU"). The prepared set (the serving wheels the GPU image lacks, unpacked and
# zstd-packed, split into pieces of at most 55 MiB in .gpuwh/) travels one piece per call:
#   tests_serving/gpu_call.sh piece N          copy .gpuwh/pN to /tmp/wh (the next calls read it)
#   tests_serving/gpu_call.sh run PROFILE      unpack once, then gpu_run.py for PROFILE (pd or
#                                              aggregated); results and logs under $OUT
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
run)
  if [ ! -f /tmp/site/.done ]; then
    mkdir -p /tmp/site
    if command -v zstd >/dev/null; then
      cat /tmp/wh/p* | zstd -dc | tar -x -C /tmp/site
    else
      python3 -m pip install -q --no-deps --no-index --target /tmp/zst .gpuwh/extra/zstandard-*.whl
      cat /tmp/wh/p* | PYTHONPATH=/tmp/zst python3 -c 'import sys, zstandard; zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer, sys.stdout.buffer)' | tar -x -C /tmp/site
    fi
    touch /tmp/site/.done
  fi
  PYTHONPATH=/tmp/site python3 -c 'import vllm, ray, nixl; print("imports:", vllm.__version__, ray.__version__)' 2>&1 | tail -3
  PYTHONUNBUFFERED=1 python3 -m tests_serving.gpu_run run --apps .gpuwh/apps.json --site /tmp/site \
    --profile "$2" --out "${OUT:-/tmp/out}" 2>&1 | tee "${OUT:-/tmp/out}/$2-driver.log"
  ;;
esac
