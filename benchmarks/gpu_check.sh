#!/usr/bin/env bash
# GPU check, in one go on a CUDA host: the learner under torchrun with nccl and bf16 mixed precision
# (FSDP2, fp32 reduce) on every visible GPU; prints update tokens/s, peak memory and skipped steps.
#
#   bash benchmarks/gpu_check.sh                          # the tiny model, all GPUs
#   MODEL=/path/to/hf/dir NPROC=8 BATCH=64 bash benchmarks/gpu_check.sh
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
MODEL_ARGS=()
if [[ -n "${MODEL:-}" ]]; then MODEL_ARGS=(--model "$MODEL"); fi
OUT="$(mktemp)"
for n in 1 "$NPROC"; do
  python -m torch.distributed.run --standalone --nproc_per_node="$n" \
    benchmarks/learner_throughput.py --worker ours "${MODEL_ARGS[@]}" \
    --batch-size "${BATCH:-64}" --prompt-tokens "${PROMPT_TOKENS:-256}" \
    --completion-tokens "${COMPLETION_TOKENS:-768}" --repeats "${REPEATS:-3}" | tee -a "$OUT"
  if [[ "$n" == "$NPROC" ]]; then break; fi
done

python - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l[len("RESULT "):]) for l in open(sys.argv[1]) if l.startswith("RESULT ")]
print("| procs | device | tokens/update | s/update | update tokens/s | peak GiB/rank | skipped |")
print("|---:|---|---:|---:|---:|---:|---:|")
for r in rows:
    print(f"| {r['procs']} | {r['device']} | {r['tokens_per_update']} | {r['s_per_update']:.3f} "
          f"| {r['tokens_per_s']:.0f} | {r.get('max_mem_gib', '-')} | {r['skipped_steps']:.0f} |")
if not rows or any(r["skipped_steps"] for r in rows) or any(not r["device"].startswith("cuda") for r in rows):
    sys.exit("gpu_check: FAILED (no result, a skipped step, or not on CUDA)")
print("gpu_check: OK")
PY
