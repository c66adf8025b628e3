#!/usr/bin/env bash
# Everything the GPU issues need, in one device call (see ../shared/device/README.md):
#   bash ../shared/device/get-wheels.sh        # once, here
#   run: bash benchmarks/gpu_session.sh [quick|tables|scaling]   (carry .whl)
# Results land in $OUT (gpu_tests.txt, throughput.jsonl, scaling JSON + PNG).
# Note --backend cuda on every throughput call: without it distshap runs on the CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
source .whl/prelude.sh
export DISTSHAP_BENCH_DEVICE=cuda
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
what=${1:-quick}
tp() { python3 -m benchmarks.throughput --backend cuda --json "$OUT/throughput.jsonl" "$@"; }

# CatBoost has no wheel on the GPU machine: its models travel as JSON fixtures written here by
#   python tests/test_catboost_gpu.py tests/.catboost_fixtures   (carry tests/.catboost_fixtures)
# LightGBM and shap: copy their py3.12 wheels into .whl (about 4 MB) to run their GPU tests too.
export DISTSHAP_CATBOOST_FIXTURES=tests/.catboost_fixtures
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider > "$OUT/gpu_tests.txt" 2>&1
tail -4 "$OUT/gpu_tests.txt"
case "$what" in
  quick)
    tp --shapes cal_housing-med,adult-med --rows 1000000 --peers xgboost-gpu
    tp --shapes fashion_mnist-med --rows 100000 --peers xgboost-gpu ;;
  tables)
    tp --table 6 --sizes small,med --cpu-peer-rows 2000
    tp --table 7 --sizes small,med --repeats 1 --cpu-peer-rows 4
    tp --shapes cal_housing-large,adult-large --rows 10000 --peers xgboost-gpu --repeats 1 ;;
  scaling)
    python3 benchmarks/scaling.py --workers 1,2,4 --rows 24000000 --repeats 2 --xgb-repeats 1 \
      --out "$OUT" ;;
esac
