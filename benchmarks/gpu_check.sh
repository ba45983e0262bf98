#!/usr/bin/env bash
# GPU check, in one go on a CUDA host: the learner under torchrun (FSDP2, nccl) with bf16 mixed
# precision (fp32 reduce) on every visible GPU, first on the project's tiny model, then on a
# randomly initialised model of a published Qwen3 shape (built here, nothing downloaded). Prints
# update tokens/s, model TFLOP/s, peak memory and skipped steps, beside a bare fwd+bwd+AdamW floor
# on the same tokens (single process only).
#
#   bash benchmarks/gpu_check.sh                          # tiny + qwen3-0.6b shape, all GPUs
#   SHAPES="qwen3-0.6b qwen3-1.7b" bash benchmarks/gpu_check.sh
#   MODEL=/path/to/hf/dir NPROC=8 BATCH=64 bash benchmarks/gpu_check.sh
#   MEMORY_CHECK=0 bash benchmarks/gpu_check.sh           # skip the long-trajectory memory table
#
# Then (unless MEMORY_CHECK=0) benchmarks/learner_memory.py on one GPU: one GSPO update of a single
# trajectory of MEMORY_TOKENS (default 16384 65536) tokens on a random-init qwen3-1.7b shape
# (MEMORY_SHAPE), today's full-logits path beside the chunked one: peak memory, tokens/s, MFU.
#
# Exits non-zero if there is no CUDA device, a run fails, or an optimizer step was skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

python - <<'PY'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("gpu_check: no CUDA device visible (torch %s)" % torch.__version__)
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"cuda:{i} {p.name} {p.total_memory / 2**30:.0f} GiB, bf16={torch.cuda.is_bf16_supported()}")
PY

NPROC="${NPROC:-$(python -c 'import torch; print(torch.cuda.device_count())')}"
MODELS=()
if [[ -n "${MODEL:-}" ]]; then
  MODELS=("$MODEL")
else
  MODELS=("")  # the tiny model
  for shape in ${SHAPES-qwen3-0.6b}; do
    echo "gpu_check: writing a random-init $shape"
    MODELS+=("$(python benchmarks/learner_throughput.py --random-model "$shape" | tail -1)")
  done
fi
OUT="$(mktemp)"
for model in "${MODELS[@]}"; do
  MODEL_ARGS=()
  if [[ -n "$model" ]]; then MODEL_ARGS=(--model "$model"); fi
  echo "gpu_check: model ${model:-tiny}"
  for n in 1 "$NPROC"; do
    python -m torch.distributed.run --standalone --nproc_per_node="$n" \
      benchmarks/learner_throughput.py --worker ours "${MODEL_ARGS[@]}" \
      --batch-size "${BATCH:-64}" --prompt-tokens "${PROMPT_TOKENS:-256}" \
      --completion-tokens "${COMPLETION_TOKENS:-768}" --repeats "${REPEATS:-3}" \
      --micro-batch-tokens "${MICRO_BATCH_TOKENS:-0}" | tee -a "$OUT"
    if [[ "$n" == "$NPROC" ]]; then break; fi
  done
done

if [[ "${MEMORY_CHECK:-1}" == 1 ]]; then
  # shellcheck disable=SC2086
  python benchmarks/learner_memory.py \
    --device cuda --shape "${MEMORY_SHAPE:-qwen3-1.7b}" --tokens ${MEMORY_TOKENS:-16384 65536} \
    --timeout-s "${MEMORY_TIMEOUT_S:-900}"
fi

python - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l[len("RESULT "):]) for l in open(sys.argv[1]) if l.startswith("RESULT ")]
ours = [r for r in rows if "skipped_steps" in r]
print("| run | params | procs | device | tokens/update | s/update | update tokens/s | model TFLOP/s | peak GiB/rank | skipped |")
print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    params = f"{r['params'] / 1e6:.1f}M" if "params" in r else "same"
    print(f"| {r['run']} | {params} | {r['procs']} | {r.get('device', '-')} | {r['tokens_per_update']} "
          f"| {r['s_per_update']:.3f} | {r['tokens_per_s']:.0f} | {r.get('model_tflops', '-')} "
          f"| {r.get('max_mem_gib', '-')} | {r.get('skipped_steps', '-')} |")
if not ours or any(r["skipped_steps"] for r in ours) or any(not r["device"].startswith("cuda") for r in ours):
    sys.exit("gpu_check: FAILED (no result, a skipped step, or not on CUDA)")
print("gpu_check: OK")
PY
