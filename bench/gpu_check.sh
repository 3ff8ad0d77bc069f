#!/usr/bin/env bash
# The ONE prepared check a session with a lent GPU runs first (issue 32), from the repository
# root of a fresh checkout:
#
#   bash bench/gpu_check.sh            # about 8 minutes on an H200, each step under its own limit
#
# (device tool: command "bash bench/gpu_check.sh", timeout_s 600, carry the nats_bench copy below)
#
# Steps, in the order of what a session most needs (the 2026-11-27 H200 session's timings in
# brackets; everything goes to $OUT/gpu_check.log, $OUT set by the device tool, /tmp/gpu_check else):
# 1. the machine: nvidia-smi, python, torch, CUDA, cuDNN [10 s];
# 2. the CUDA-only tests (every test file that skips without CUDA, its tests named cuda/gpu) [30 s];
# 3. bench/gpu_profile_inference.py: one network's forward pass in each memory layout, cuDNN
#    autotuning and TF32, images/s and TFLOP/s, widest and narrowest of each space [40 s];
# 4. bench/gpu_cpu_agreement.py: CPU against CUDA stage by stage, fit, transform, metrics [10 s];
# 5. bench/bench_gpu_workflow.py, the workflow's own infer and measure jobs at real
#    evaluation-set sizes, 16 networks per space, lambda and mu fixed (no search), figures to
#    $OUT/bench_gpu_workflow.json [build 48 s, then until its time limit];
# 6. the same for the lambda, mu search alone: SSS, CIFAR-100, 16 networks, 5 folds, a 3 x 3
#    grid (per fit ms, scaled in the projection), to $OUT/bench_gpu_search.json. The real 6 x 6
#    grid on 16 networks did not finish in 145 s on the H200.
#
# Without CUDA (this project's CPU machines) the same script is the smoke test: the GPU tests
# and the CUDA-only diagnostics skip and the benchmark runs its --cpu-smoke size.
#
# Set-up on the GPU machine (no network there): its python3 holds torch; calibench runs from
# src/ (PYTHONPATH, no install). The one dependency the jobs need that the machine's image
# lacks is nats_bench (pure Python, the official archive reader): carry it with the call,
# either the venv's copy
#     carry: [".venv/lib/python3.11/site-packages/nats_bench"]
# or as a wheel (`echo /.whl/ >> .git/info/exclude; pip download --no-deps -d .whl
# nats_bench==1.8`, carry: [".whl"]). The script finds either; without it the benchmark
# stops at once saying so (exit 2), and the other steps still run.
# Environment knobs: GPU_CHECK_NETWORKS (16), GPU_CHECK_TIME_LIMIT (140 s: step 5 starts no new
# job after it), GPU_CHECK_BENCH_ARGS (more flags for step 5).

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
$PY -m pytest --help 2>/dev/null | grep -q -- "--timeout=" && timeout_flag="--timeout 60"
# shellcheck disable=SC2086
timeout -k 10 80 $PY -m pytest -q -p no:cacheprovider -k "cuda or gpu" $timeout_flag $files
rc=$?
echo "tests: exit $rc$([ $rc = 124 ] && echo ' (timed out)')"
[ $rc = 0 ] || status=1

# ---------------------------------------------------------------- layouts of the forward pass
step "bench/gpu_profile_inference.py"
if [ "$CUDA" = 1 ]; then
    timeout -k 5 45 $PY bench/gpu_profile_inference.py --device cuda || status=1
else
    echo "(no CUDA: skipped; it times CUDA kernels)"
fi

# ---------------------------------------------------------------- CPU against CUDA, stage by stage
step "bench/gpu_cpu_agreement.py"
if [ "$CUDA" = 1 ]; then
    PYTHONPATH="$PYTHONPATH:$PWD/tests" timeout -k 5 45 $PY bench/gpu_cpu_agreement.py || status=1
else
    echo "(no CUDA: skipped; it compares the CPU with CUDA)"
fi

# ---------------------------------------------------------------- the workflow's jobs, timed
step "bench/bench_gpu_workflow.py: inference and measurement (lambda, mu fixed)"
if [ "$CUDA" = 1 ]; then
    args="--device cuda --networks ${GPU_CHECK_NETWORKS:-16} --time-limit ${GPU_CHECK_TIME_LIMIT:-140} --odir 1,1"
    limit=190
else
    args="--cpu-smoke --odir 1,1"
    limit=240
fi
# shellcheck disable=SC2086
timeout -k 20 $limit $PY bench/bench_gpu_workflow.py $args --out "$OUT/bench_gpu_workflow.json" ${GPU_CHECK_BENCH_ARGS:-}
rc=$?
echo "bench_gpu_workflow: exit $rc$([ $rc = 124 ] && echo ' (timed out: the JSON holds what was measured)')"
[ $rc = 0 ] || status=1

step "bench/bench_gpu_workflow.py: the lambda, mu search (sss, cifar100, 3 x 3 grid)"
if [ "$CUDA" = 1 ]; then
    args="--device cuda --networks 16 --spaces sss --datasets cifar100 --search-grid 1e-7,1e-3,10 --time-limit 60"
    limit=130
else
    args="--cpu-smoke --spaces sss --datasets cifar100"
    limit=120
fi
# shellcheck disable=SC2086
timeout -k 10 $limit $PY bench/bench_gpu_workflow.py $args --out "$OUT/bench_gpu_search.json"
rc=$?
echo "search: exit $rc$([ $rc = 124 ] && echo ' (timed out: the JSON holds what was measured)')"
[ $rc = 0 ] || status=1

step "done: exit $status; log $LOG"
exit $status
