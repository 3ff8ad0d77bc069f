#!/usr/bin/env bash
# The ONE prepared check a session with a lent GPU runs first (issue 32), from the repository
# root of a fresh checkout:
#
#   bash bench/gpu_check.sh            # about 6 minutes on an H100/H200, at most about 9
#
# (device tool: command "bash bench/gpu_check.sh", timeout_s 600, carry the nats_bench copy below)
#
# 1. the machine: nvidia-smi, python, torch, CUDA, cuDNN;
# 2. the CUDA-only tests (every test file that skips without CUDA, its tests named cuda/gpu),
#    each test limited to 100 s where pytest-timeout is installed, the step to 120 s;
# 3. bench/bench_gpu_workflow.py: the workflow's own jobs (inference, lambda-mu search,
#    measurement) at real evaluation-set sizes, 16 networks per space, figures to
#    $OUT/bench_gpu_workflow.json and the whole-population projection line; then, if time is
#    left, the inference jobs again with networks_per_pass=1 (the stacked passes against one network at a time);
# 4. bench/bench_gpu.py --quick (logit error of TF32 against float32, quick sizes).
#
# Each step runs under `timeout`, so a hang costs that step only; everything goes to
# $OUT/gpu_check.log ($OUT is set by the device tool; /tmp/gpu_check elsewhere).
# Without CUDA (this project's CPU machines) the same script is the smoke test: the GPU tests
# skip and the benchmark runs its --cpu-smoke size (under 2 minutes on 2 cores).
#
# Set-up on the GPU machine (no network there): its python3 holds torch; calibench runs from
# src/ (PYTHONPATH, no install). The one dependency the jobs need that the machine's image
# lacks is nats_bench (pure Python, the official archive reader): carry it with the call,
# either the venv's copy
#     carry: [".venv/lib/python3.11/site-packages/nats_bench"]
# or as a wheel (`echo /.whl/ >> .git/info/exclude; pip download --no-deps -d .whl
# nats_bench==1.8`, carry: [".whl"]). The script finds either; without it the benchmark
# stops at once saying so (exit 2), and the tests and bench_gpu.py still run.
# Environment knobs: GPU_CHECK_NETWORKS (16), GPU_CHECK_TIME_LIMIT (190 s: the benchmark
# starts no new job after it), GPU_CHECK_BENCH_ARGS (more flags for the benchmark).

set -u
cd "$(dirname "$0")/.." || exit 1
OUT="${OUT:-/tmp/gpu_check}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: > "$LOG"
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE
START=$(date +%s)
step() { echo; echo "=== [$(( $(date +%s) - START ))s] $*"; }
status=0

# ---------------------------------------------------------------- python and what it lacks
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
SITE=/tmp/gpu_check_site
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if ! $PY -c "import nats_bench" 2>/dev/null; then
    if ls .whl/*.whl >/dev/null 2>&1; then
        $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
            && export PYTHONPATH="$PYTHONPATH:$SITE"
    else
        carried=$(ls -d .venv/lib/python3*/site-packages/nats_bench 2>/dev/null | head -n 1)
        if [ -n "$carried" ]; then
            mkdir -p "$SITE" && ln -sfn "$PWD/$carried" "$SITE/nats_bench" && export PYTHONPATH="$PYTHONPATH:$SITE"
        fi
    fi
fi

step "machine"
date -u
nvidia-smi 2>&1 || echo "nvidia-smi: not available"
$PY - <<'EOF'
import platform, sys
import torch
print(f"python {platform.python_version()} ({sys.executable}), torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"cuDNN {torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}, "
      f"CUDA available: {torch.cuda.is_available()}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"device 0: {torch.cuda.get_device_name(0)}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs")
for name in ("nats_bench", "numpy", "scipy", "pandas", "pyarrow", "yaml", "pytest", "pytest_timeout", "hypothesis",
             "pynvml"):
    try:
        module = __import__(name)
        print(f"  {name} {getattr(module, '__version__', '')}")
    except ImportError:
        print(f"  {name}: MISSING")
EOF
CUDA=$($PY -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null || echo 0)

# ---------------------------------------------------------------- the CUDA-only tests
step "CUDA-only tests"
files=$(grep -l "cuda.is_available" tests/test_*.py | tr '\n' ' ')
echo "files with CUDA-only tests: $files"
timeout_flag=""
# pytest-timeout, where installed, is loaded by its entry point; its flag only where pytest knows it
$PY -m pytest --help 2>/dev/null | grep -q -- "--timeout=" && timeout_flag="--timeout 100"
# shellcheck disable=SC2086
timeout -k 10 120 $PY -m pytest -q -p no:cacheprovider -k "cuda or gpu" $timeout_flag $files
rc=$?
echo "tests: exit $rc$([ $rc = 124 ] && echo ' (timed out)')"
[ $rc = 0 ] || status=1

# ---------------------------------------------------------------- the workflow's jobs, timed
step "bench/bench_gpu_workflow.py"
if [ "$CUDA" = 1 ]; then
    args="--device cuda --networks ${GPU_CHECK_NETWORKS:-16} --time-limit ${GPU_CHECK_TIME_LIMIT:-190}"
    args="$args --also-infer networks_per_pass=1"   # last, if time is left: the stacked passes against one at a time
    limit=270
else
    args="--cpu-smoke"
    limit=240
fi
# shellcheck disable=SC2086
timeout -k 20 $limit $PY bench/bench_gpu_workflow.py $args --out "$OUT/bench_gpu_workflow.json" ${GPU_CHECK_BENCH_ARGS:-}
rc=$?
echo "bench_gpu_workflow: exit $rc$([ $rc = 124 ] && echo ' (timed out: the JSON holds what was measured)')"
[ $rc = 0 ] || status=1

# ---------------------------------------------------------------- bench_gpu.py's quick mode
step "bench/bench_gpu.py --quick"
if [ "$CUDA" = 1 ]; then qargs="--device cuda"; else qargs="--device cpu --archs 1 --measure-batch 2"; fi
# shellcheck disable=SC2086
timeout -k 10 90 $PY bench/bench_gpu.py --quick $qargs
rc=$?
echo "bench_gpu --quick: exit $rc$([ $rc = 124 ] && echo ' (timed out)')"
[ $rc = 0 ] || status=1

step "done: exit $status; log $LOG"
exit $status
