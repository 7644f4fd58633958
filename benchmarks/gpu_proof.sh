#!/usr/bin/env bash
# The GPU proof: probe's first measured numbers on a GPU, in one prepared script.
#
# Runs on a GPU machine without network, from the repository root, with its own python3 (CUDA PyTorch,
# transformers, accelerate, safetensors, tokenizers). What it lacks travels in CARRY (default .gpu/):
#   whl/*.whl         lm-eval, dill, gguf (pip install --no-index --no-deps)
#   data.tgz          data/{bbq,hbb,bharatbbq}: the BBQ, HBB and ImplicitBBQ workloads (PROBE_DATA)
#   tokenizer.tgz     SmolLM2's tokenizer files (no weights): tokenizes the random-weight 8B workload
#   smollm2.gguf.partNN, gguf.sha256   SmolLM2-135M-Instruct's GGUF in pieces (the pieces of one call may not
#                     hold the whole file; pieces are kept in $KEEP across calls on one machine)
#
#   bash benchmarks/gpu_proof.sh shape   # (1) Llama-3.1-8B shape in bf16: probe vs lm-eval HF, TFLOP/s share,
#                                        #     memory, --batch-size auto, capture, HBB projection, (3) OOM
#                                        #     back-off, (4) parse_exact vs K = 20 sampling
#   bash benchmarks/gpu_proof.sh real    # (2) SmolLM2 real weights bf16 vs fp32 (+ lm-eval, parse_exact)
#   bash benchmarks/gpu_proof.sh all     # engine, then shape in bf16 (lm-eval, HBB projection, capture,
#                                        #     parse_exact at T = 0.1 and 0.7), each under its own time limit
#   bash benchmarks/gpu_proof.sh engine  # old (level-by-level) vs new (packed) engine, 8B shape, bf16, one call
#                                        #     < 6 min: time, passes, share of peak, busy share (device events
#                                        #     only), syncs per call, max |delta|, OOM back-off (gpu_engine.py)
#   bash benchmarks/gpu_proof.sh hbb-check  # `probe validate sampling hbb` at the authors' 2048-token answers on
#                                        #     SmolLM2 (the GGUF above, or MODEL=...), seeds in SEEDS (default
#                                        #     "0 1"), 100 questions, K = 20, 64 prompts a generate call; each
#                                        #     seed under CHECK_TIMEOUT (default 280 s): $OUT/hbb_check_s<seed>/
#
# Every figure goes to $OUT (default ./gpu-proof-out): <part>.json, <part>.log, env.txt.
set -uo pipefail
PART=${1:-shape}
CARRY=${CARRY:-.gpu}
KEEP=${KEEP:-/root/probe-keep}
OUT=${OUT:-$PWD/gpu-proof-out}
DEVICE=${DEVICE:-cuda}  # cpu with EXTRA="--shape tiny --limit 4 ..." for a dry run here
EXTRA=${EXTRA:-}
mkdir -p "$OUT" "$KEEP"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export PROBE_CACHE=$KEEP/cache

# what this call carried is kept for the next call on the same machine
[ -d "$CARRY" ] && cp -rn "$CARRY"/. "$KEEP"/ 2>/dev/null

if [ ! -d /tmp/site/lm_eval ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$KEEP"/whl/*.whl \
    || echo "wheels not installed: lm-eval comparisons will be skipped"
fi
# probe itself from the working tree, no dependencies (the machine's own torch/transformers are used)
if [ -n "${PROBE_FROM_TREE:-}" ]; then  # saves the wheel build when device time is short
  export PYTHONPATH=$PWD:/tmp/site
else
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target /tmp/probe-site . \
    >/dev/null 2>&1 || echo "probe not installed as a package: importing it from the tree"
  export PYTHONPATH=/tmp/probe-site:/tmp/site
fi
[ -d "$KEEP/data" ] || tar -C "$KEEP" -xzf "$KEEP/data.tgz"
[ -d "$KEEP/tokenizer" ] || tar -C "$KEEP" -xzf "$KEEP/tokenizer.tgz"
export PROBE_DATA=$KEEP/data

{
  date -u; echo "commit ${COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 || true
  python3 - <<'EOF'
import importlib, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "device",
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")
for m in ("transformers", "accelerate", "tokenizers", "safetensors", "lm_eval", "gguf", "probe"):
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "?"), getattr(mod, "__file__", ""))
    except Exception as exc:  # noqa: BLE001
        print(m, "not importable:", type(exc).__name__, exc)
EOF
} > "$OUT/env-$PART.txt" 2>&1
cat "$OUT/env-$PART.txt"

# SmolLM2's GGUF, put together from the pieces carried so far ($GG); fails when they are not all here
smollm2_gguf() {
  GG="$KEEP/SmolLM2-135M-Instruct.Q4_1.gguf"
  [ -f "$GG" ] && return 0
  cat "$KEEP"/smollm2.gguf.part* > "$GG.tmp" 2>/dev/null
  if (cd "$KEEP" && echo "$(cut -d' ' -f1 gguf.sha256 2>/dev/null)  $GG.tmp" | sha256sum -c --quiet - 2>/dev/null); then
    mv "$GG.tmp" "$GG"
  else
    echo "SmolLM2's GGUF is incomplete here (pieces: $(ls "$KEEP" | grep -c part)): real-weight part skipped"
    return 1
  fi
}

case "$PART" in
  hbb-check)
    if [ -z "${MODEL:-}" ]; then smollm2_gguf || exit 3; MODEL=$GG; fi
    for seed in ${SEEDS:-0 1}; do
      # float32: the two sides' forwards differ by float rounding only, far below 20 samples' noise
      timeout "${CHECK_TIMEOUT:-280}" python3 -m probe validate sampling hbb --model "$MODEL" --device "$DEVICE" \
        --dtype float32 --n-prompts 100 --k 20 --seed "$seed" --prompts-per-call "${PROMPTS_PER_CALL:-64}" \
        --output "$OUT/hbb_check_s$seed" $EXTRA 2>&1 | tee "$OUT/hbb_check_s$seed.log"
    done
    ;;
  shape)
    timeout "${SHAPE_TIMEOUT:-400}" python3 benchmarks/gpu.py --device "$DEVICE" --dtypes bfloat16 --real none \
      --tokenizer "$KEEP/tokenizer" ${SHAPE_FLAGS:---oom --parse-exact} --json "$OUT/shape.json" $EXTRA 2>&1 | tee "$OUT/shape.log"
    ;;
  real)
    smollm2_gguf || exit 3
    timeout "${REAL_TIMEOUT:-240}" python3 benchmarks/gpu.py --device "$DEVICE" --skip-shape --real "$GG" \
      --tokenizer "$KEEP/tokenizer" --parse-exact --skip-quantized --json "$OUT/real.json" $EXTRA 2>&1 | tee "$OUT/real.log"
    ;;
  engine)
    timeout "${ENGINE_TIMEOUT:-330}" python3 benchmarks/gpu_engine.py --device "$DEVICE" --tokenizer "$KEEP/tokenizer" \
      --json "$OUT/engine.json" $EXTRA 2>&1 | tee "$OUT/engine.log"
    ;;
  all)
    timeout "${ENGINE_TIMEOUT:-210}" python3 benchmarks/gpu_engine.py --device "$DEVICE" --tokenizer "$KEEP/tokenizer" \
      --json "$OUT/engine.json" $EXTRA 2>&1 | tee "$OUT/engine.log"
    timeout "${SHAPE_TIMEOUT:-240}" python3 benchmarks/gpu.py --device "$DEVICE" --dtypes bfloat16 --real none \
      --tokenizer "$KEEP/tokenizer" --repeats 1 --parse-exact --parse-prompts 12 --parse-max-nodes 200 \
      --parse-settings 0.1:1.0:20,0.7:0.9:20 --json "$OUT/shape.json" ${SHAPE_EXTRA:-} 2>&1 | tee "$OUT/shape.log"
    ;;
  *) echo "unknown part $PART (shape | real | engine | all | hbb-check)"; exit 2 ;;
esac
