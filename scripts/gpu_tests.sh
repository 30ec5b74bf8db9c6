#!/usr/bin/env bash
# The engine and model tests on a CUDA GPU, side by side, each stopped after $SECONDS_EACH (290) s:
#   - the engine suites (chains, semi-Markov chains, trees), the models' tests, tests/test_device.py and
#     tests/test_precision.py;
#   - the numerics suite in float32 with TF32 off, with TF32 allowed, and under bfloat16 autocast, one
#     hypothesis example a test ($ZOO_NUMERICS_MAX_EXAMPLES: on the GPU each small DP step is a kernel
#     launch, and the full suite takes ~10 minutes a mode).
# Logs go to $OUT (or ./gpu-test-logs). Usage: scripts/gpu_tests.sh (on a machine that takes at most 64 MiB
# of the checkout, first scripts/device_tree.sh hide: the bundled weights are over it)
set -u
if [ $# -gt 0 ]; then  # it takes no arguments: --help (or anything) prints the comment above
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
out=${OUT:-gpu-test-logs}
mkdir -p "$out"
suite() {  # name, seconds, workers, pytest arguments...
    local name=$1 seconds=$2 workers=$3
    shift 3
    local start=$SECONDS
    # -v: each test's outcome is in the log as it ends, also when the time limit stops the run (-o addopts=:
    # the project's -q would cancel it)
    timeout "$seconds" python3 -m pytest -o addopts= -v -p no:cacheprovider -n "$workers" --device cuda -rfE "$@" \
        >"$out/$name.log" 2>&1
    echo "$name: exit $? in $((SECONDS - start)) s: $(grep -c " PASSED " "$out/$name.log") passed," \
        "$(grep -c " FAILED " "$out/$name.log") failed; $(tail -n 1 "$out/$name.log")"
}
# side by side: the GPU is shared, and most of these tests are launch-bound on small tensors
suite engine "${SECONDS_EACH:-290}" 6 tests/chain tests/semimarkov tests/tree tests/models tests/test_backend.py \
    tests/test_device.py tests/test_precision.py &
export ZOO_NUMERICS_MAX_EXAMPLES=1
suite numerics-fp32 "${SECONDS_EACH:-290}" 3 tests/numerics &
suite numerics-tf32 "${SECONDS_EACH:-290}" 3 tests/numerics --tf32 &
suite numerics-bf16-autocast "${SECONDS_EACH:-290}" 3 tests/numerics --autocast bf16 &
wait
grep -h -o -E " (FAILED|ERROR) tests/[^ ]+" "$out"/*.log | sort | uniq -c | sort -rn | head -60
