#!/usr/bin/env bash
# The numeric tests under every oneDNN instruction-set cap this CPU supports: each cap
# gives matrix products other blockings, hence other summation orders, so a tolerance
# tuned on one CPU shows here whether it holds on the others.
#
#   tests/cpu_matrix.sh [LEVEL ...]        (from anywhere; default: every level this CPU runs)
#
# LEVEL              what runs                                          needs (/proc/cpuinfo)
#   AVX512_CORE_AMX  Intel AMX: bfloat16 products in tiles               amx_bf16
#   AVX512_CORE_BF16 AVX-512 with bfloat16 dot products                  avx512_bf16
#   AVX512_CORE      AVX-512, bfloat16 converted in software             avx512f
#   AVX2             AVX2 only, bfloat16 emulated                         avx2
#   SSE41            narrower vectors still: yet another blocking         sse4_1
#   OFF              TF_ENABLE_ONEDNN_OPTS=0: TensorFlow's own kernels   -
#                    (its float32 matrix products still call oneDNN's sgemm, uncapped)
# The first five set ONEDNN_MAX_CPU_ISA, which can only take instructions away: a level
# richer than the CPU cannot be tried, and is listed as such.
#
# Under AVX2 or SSE41 on a CPU with bfloat16 instructions the tests marked bfloat16 are
# deselected: TensorFlow picks oneDNN's bfloat16 kernels from the CPU's flags, not from
# the cap, and they fail when the cap forbids them (a TensorFlow defect, seen on AMX).
#
# Tests: the files that compare numbers, without the slow end-to-end runs, plus
# test_multi_replica.py (two script runs, about a minute). Environment: PYTHON (default
# .venv/bin/python), WORKERS (pytest -n, default 2). Prints a table: level, result,
# tests, and the largest error / bound of helpers.assert_close (under 1 passes; its
# distance from 1 is the margin).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
WORKERS=${WORKERS:-2}
FILES=(tests/test_ablations.py tests/test_checkpoints.py tests/test_classifier.py
       tests/test_conversion.py tests/test_encoder.py tests/test_extract_features.py
       tests/test_gradients.py tests/test_heads.py tests/test_ltr.py tests/test_messages.py
       tests/test_metrics.py tests/test_mixed_precision.py tests/test_ner.py
       tests/test_optimization.py tests/test_pipeline.py tests/test_prediction.py
       tests/test_squad.py tests/test_swag.py tests/test_training.py tests/test_xla.py)
ALL=(AVX512_CORE_AMX AVX512_CORE_BF16 AVX512_CORE AVX2 SSE41 OFF)
declare -A NEEDS=([AVX512_CORE_AMX]=amx_bf16 [AVX512_CORE_BF16]=avx512_bf16
                  [AVX512_CORE]=avx512f [AVX2]=avx2 [SSE41]=sse4_1 [OFF]=)

flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { [[ -z $1 || $flags == *" $1 "* ]]; }
has_bf16=$( (has amx_bf16 || has avx512_bf16) && echo yes)

levels=("$@")
if ((${#levels[@]} == 0)); then
  for level in "${ALL[@]}"; do
    if has "${NEEDS[$level]}"; then
      levels+=("$level")
    else
      echo "$level: not tried: this CPU lacks ${NEEDS[$level]}, and a cap cannot add instructions."
    fi
  done
fi

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
declare -A result detail ratio
for level in "${levels[@]}"; do
  if [[ -z ${NEEDS[$level]+x} ]]; then
    echo "error: unknown level $level; expected one of: ${ALL[*]}" >&2
    exit 2
  fi
  if ! has "${NEEDS[$level]}"; then
    result[$level]="not tried"
    detail[$level]="the CPU lacks ${NEEDS[$level]}"
    continue
  fi
  env=(TF_CPP_MIN_LOG_LEVEL=2 TOLERANCE_LOG="$logs/$level.tsv")
  if [[ $level == OFF ]]; then
    env+=(TF_ENABLE_ONEDNN_OPTS=0)
  else
    env+=(ONEDNN_MAX_CPU_ISA="$level")
  fi
  marks="not slow"
  note=""
  if [[ $has_bf16 && ($level == AVX2 || $level == SSE41) ]]; then
    marks="not slow and not bfloat16"
    note=", bfloat16 tests deselected"
  fi
  echo "== $level (${env[*]:2}; -m '$marks')"
  failed=0
  summary=""
  for run in "files" "multi_replica"; do
    if [[ $run == files ]]; then
      args=(-m "$marks" "${FILES[@]}")
    else
      args=(tests/test_multi_replica.py)
    fi
    out=$(env "${env[@]}" "$PYTHON" -m pytest -q -n "$WORKERS" "${args[@]}" 2>&1)
    status=$?
    last=$(tail -n 1 <<<"$out")
    echo "   $run: $last"
    ((status != 0)) && { failed=1; grep -E '^(FAILED|ERROR)' <<<"$out" | sed 's/^/     /'; }
    summary+="${summary:+; }${last//=/}"
  done
  result[$level]=$( ((failed)) && echo FAILED || echo passed)
  detail[$level]="$(sed 's/  */ /g; s/^ //; s/ $//' <<<"$summary")$note"
  ratio[$level]=$(awk -F'\t' '$5 > 0 && $4 / $5 > m {m = $4 / $5; w = $1} END {
      printf "%.2f (%s)", m, substr(w, 1, 24)}' "$logs/$level.tsv" 2>/dev/null)
done

echo
printf '%-17s %-10s %-34s %s\n' level result "largest error / bound" tests
for level in "${levels[@]}"; do
  printf '%-17s %-10s %-34s %s\n' "$level" "${result[$level]}" "${ratio[$level]:--}" \
    "${detail[$level]}"
done
for level in "${levels[@]}"; do
  [[ ${result[$level]} == FAILED ]] && exit 1
done
exit 0
