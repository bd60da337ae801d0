#!/usr/bin/env bash
# The GPU checks of docs/benchmarks.md as one prepared command, for a lent GPU machine that has
# Python 3.12 + torch + transformers + peft but no network (and no jsonschema, which training needs).
#
#   bash bench/device_check.sh prepare        # here, with network: wheels + the tokenizer into .device-kit/
#   bash bench/device_check.sh run            # there, from the repository root; $OUT (default
#                                             # .device-kit/out) gets one log per step and summary.txt
#   DEVICE=cpu QUICK=1 bash bench/device_check.sh run   # the same steps, tiny, on a CPU: checks the script
#
# The steps, each under its own time limit so that one slow step cannot eat the others' time:
#   env          nvidia-smi and the Python packages the run uses
#   gpu-check    python -m training gpu-check --model smollm2-shape        (the 135M target)
#   dp           python bench/data_parallel.py --processes 1 (one GPU: one process per GPU, NCCL)
#   gpu-check    python -m training gpu-check --model qwen2.5-1.5b-shape   (the 1.5B target)
# (smollm2-shape, then dp, then the 1.5B shape: 30 + 150 + 100 + 300 s at most, under the 10 minutes
# one command may take there; run it with timeout_s=600).
# Every step runs even when one before it failed; the exit status is 1 when any did.
set -uo pipefail
cd "$(dirname "$0")/.."

KIT=.device-kit
# What training imports that the GPU image lacks (KINDS.md's package list): jsonschema and the
# packages it needs, at the versions deploy/constraints.txt's environment resolved here.
WHEELS=(jsonschema==4.26.0 referencing==0.37.0 jsonschema-specifications==2025.9.1 rpds-py==2026.9.1)

prepare() {
  rm -rf "$KIT" && mkdir -p "$KIT/wheels" "$KIT/data"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$KIT/wheels" "${WHEELS[@]}" || return 1
  # The SmolLM2 tokenizer as a saved folder: the random-weight shapes use it, and the GGUF file it
  # comes from (94 MB) is too big to carry.
  .venv/bin/python -c "from training.models import default_tokenizer; default_tokenizer(data_dir='$KIT/data')" \
    || return 1
  du -sh "$KIT"
  echo "carry .device-kit; command: bash bench/device_check.sh run"
}

step() {  # step NAME SECONDS COMMAND...: run it under a time limit, log to $OUT/NAME.txt, note the outcome
  local name=$1 limit=$2
  shift 2
  local started=$SECONDS
  echo "== $name (limit ${limit}s): $*" | tee "$OUT/$name.txt"
  timeout --kill-after=10 "$limit" "$@" >>"$OUT/$name.txt" 2>&1
  local rc=$?
  tail -n 40 "$OUT/$name.txt"
  local outcome=ok
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && outcome="timed out"
  [ "$rc" -ne 0 ] && [ "$outcome" = ok ] && outcome="failed (exit $rc)"
  [ "$rc" -ne 0 ] && FAILED=1
  printf '%-28s %-18s %5ss\n' "$name" "$outcome" "$((SECONDS - started))" >>"$OUT/summary.txt"
}

run() {
  OUT=${OUT:-$KIT/out}
  mkdir -p "$OUT"
  : >"$OUT/summary.txt"
  FAILED=0
  local device=${DEVICE:-cuda}
  if [ -d "$KIT/wheels" ] && ! python3 -c "import jsonschema" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/device-site \
      "$KIT"/wheels/*.whl || { echo "could not install the carried wheels"; return 1; }
    export PYTHONPATH=/tmp/device-site${PYTHONPATH:+:$PYTHONPATH}
  fi
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
  export CRUCIBLE_DATA_DIR=${CRUCIBLE_DATA_DIR:-$PWD/$KIT/data}
  local sizes=() dp_sizes=() big=qwen2.5-1.5b-shape
  if [ -n "${QUICK:-}" ]; then  # the script's own check: every step, tiny
    sizes=(--prompts 2 --generations 2 --max-new-tokens 8 --eval-tasks 2 --sft-steps 1 --grpo-steps 1 --dpo-steps 1
           --micro-batch-size 2)
    dp_sizes=(--model tiny --steps 2 --prompts 2 --generations 2 --completion 8)
    big=tiny
  else
    dp_sizes=(--model smollm2-shape --steps 4 --prompts 8 --generations 8 --completion 256)
  fi
  step env 30 bash -c "nvidia-smi || echo 'no nvidia-smi'; python3 -c 'import sys, torch, transformers, peft, jsonschema; \
print(sys.version.split()[0], \"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.is_available(), \
\"transformers\", transformers.__version__, \"peft\", peft.__version__)'"
  # Under 10 minutes in all (a lent machine's limit for one command), the 1.5B shape last with the most.
  step gpu-check-smollm2-shape 150 python3 -m training gpu-check --device "$device" --model smollm2-shape \
    --out /tmp/device-gpu-check-small "${sizes[@]}"
  step data-parallel-1-process 100 python3 bench/data_parallel.py --device "$device" --processes 1 "${dp_sizes[@]}"
  step "gpu-check-$big" 300 python3 -m training gpu-check --device "$device" --model "$big" \
    --out /tmp/device-gpu-check-big "${sizes[@]}"
  echo "== summary"
  cat "$OUT/summary.txt"
  return "$FAILED"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: bash bench/device_check.sh prepare|run" >&2; exit 2 ;;
esac
