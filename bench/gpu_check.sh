#!/usr/bin/env bash
# The ONE prepared check a session with a lent GPU runs first (issue 32), from the repository
# root of a fresh checkout:
#
#   bash bench/gpu_check.sh            # about 9 minutes on an H100, each step under its own limit
#
# (device tool: command "bash bench/gpu_check.sh", timeout_s 600, carry the nats_bench copy below)
#
# Steps, in the order of what a session most needs (session 47's H100 timings in brackets;
# everything goes to $OUT/gpu_check.log, $OUT set by the device tool, /tmp/gpu_check else):
# 1. the machine: nvidia-smi, python, torch, CUDA, cuDNN [12 s];
# 2. the CUDA-only tests (every test file that skips without CUDA, its tests named cuda/gpu) [35 s];
# 3. bench/gpu_cpu_agreement.py: CPU against CUDA stage by stage, fit, transform, metrics [9 s];
# 4. bench/bench_gpu_measure_groups.py: measurement per network at 16, 64 and 200 networks per
#    call (ms and dir at CIFAR-100's size), to $OUT/bench_gpu_measure_groups.json [28 s];
# 5. bench/bench_gpu_workflow.py, SSS and TSS CIFAR-10 inference through the job (16 networks
#    each, CIFAR-10 with its OoD sets: 46,032 images a network) in float32, then again in
#    precision tf32x3 (compensated TF32 on the tensor cores), to $OUT/bench_gpu_precision.json
#    [new, never run on a GPU; estimated 100-140 s: tf32x3 ran 2.8-3.3x float32's time on the CPU];
# 6. bench/bench_gpu_workflow.py on SSS CIFAR-100 through the workflow's own jobs at a real
#    chunk's size: inference of 200 networks, the lambda, mu search at the config's 64 networks
#    (5 folds, a 2 x 2 grid; per fit ms, scaled in the projection), measurement of the
#    200-network chunk in one call (measure_group auto), as a real job runs it, and the host
#    synchronisations per L-BFGS iteration, to $OUT/bench_gpu_search.json; it starts no job
#    after GPU_CHECK_BUDGET (540 s) from the check's start [new at 200 networks; at 16
#    networks: 185 s, of which the build 26 s, inference 17 s, search 80 s, measurement 18 s];
#    SSS and TSS inference with stacked passes (networks_per_pass 64) against one network per
#    pass (auto for SSS on CUDA since session 47: 3,166 against 814 ms per network on the H100;
#    TSS's auto is still 64, from before one network ahead overlapped host and GPU, session 51)
#    only with GPU_CHECK_PASSES=1, to $OUT/bench_gpu_{sss,tss}_passes.json [SSS 92 s];
#    SSS inference at one network per pass with 1,000 images per forward pass against 4,096 and
#    16,384 (fewer, larger launches: does the GPU's idle time at one network per pass come from
#    the forward's own launches?) only with GPU_CHECK_BATCH=1, to $OUT/bench_gpu_sss_batch.json [new];
# 7. only with GPU_CHECK_WORKFLOW=1: every table's infer and measure jobs at real
#    evaluation-set sizes, 16 networks per space, lambda and mu fixed, to
#    $OUT/bench_gpu_workflow.json [build 52 s, then its time limit; 157 s];
# 8. only with GPU_CHECK_PROFILE=1: bench/gpu_profile_inference.py, one network's forward pass in
#    each memory layout, cuDNN autotuning and TF32 [40 s; the same figures in both H200 sessions].
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
# Steps by name (GPU_CHECK_STEPS=passes,batch runs those only, after the machine step: a second call
# within the session's device time): tests, agreement, groups, precision, chunk (the defaults,
# steps 2-6), passes, batch, workflow, profile.
# Environment knobs: GPU_CHECK_NETWORKS (16), GPU_CHECK_TIME_LIMIT (140 s: step 7 starts no new
# job after it), GPU_CHECK_BENCH_ARGS (more flags for step 7).

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
# wants NAME [KNOB]: run step NAME? With GPU_CHECK_STEPS (names, comma-separated) the steps named
# only; otherwise the default steps, and an optional one where its KNOB variable is 1
wants() {
    if [ -n "${GPU_CHECK_STEPS:-}" ]; then
        case ",$GPU_CHECK_STEPS," in *",$1,"*) return 0 ;; *) return 1 ;; esac
    fi
    [ -z "${2:-}" ] || [ "${!2:-0}" = 1 ]
}
# timed NAME LIMIT COMMAND...: COMMAND under `timeout LIMIT`, its exit told; a failure fails the check
timed() {
    local name=$1 limit=$2 rc
    shift 2
    timeout -k 10 "$limit" "$@"
    rc=$?
    echo "$name: exit $rc$([ $rc = 124 ] && echo ' (timed out: the JSON holds what was measured)')"
    [ $rc = 0 ] || status=1
}
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
if wants tests; then
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
fi

# ---------------------------------------------------------------- CPU against CUDA, stage by stage
if wants agreement; then
    step "bench/gpu_cpu_agreement.py"
    if [ "$CUDA" = 1 ]; then
        PYTHONPATH="$PYTHONPATH:$PWD/tests" timeout -k 5 45 $PY bench/gpu_cpu_agreement.py || status=1
    else
        echo "(no CUDA: skipped; it compares the CPU with CUDA)"
    fi
fi

# ---------------------------------------------------------------- measurement per group size
if wants groups; then
    step "bench/bench_gpu_measure_groups.py: ms and dir at 16, 64, 200 networks per call"
    if [ "$CUDA" = 1 ]; then
        args="--device cuda --groups 16,64,200 --stages ms,dir --no-all --time-limit 60"
    else
        args="--cpu-smoke --stages ms,dir --no-all"
    fi
    # shellcheck disable=SC2086
    timed "bench_gpu_measure_groups" 100 $PY bench/bench_gpu_measure_groups.py $args --out "$OUT/bench_gpu_measure_groups.json"
fi

# ---------------------------------------------------------------- the search, measurement, syncs
if wants precision; then
    step "bench/bench_gpu_workflow.py: SSS and TSS CIFAR-10 inference, float32 against tf32x3"
    if [ "$CUDA" = 1 ]; then
        args="--device cuda --networks 16 --spaces sss,tss --datasets cifar10 --odir 1,1 --stages pre"
        args="$args --also-infer precision=tf32x3 --time-limit 140"
        limit=180
    else
        args="--cpu-smoke --spaces sss,tss --datasets cifar10 --odir 1,1 --stages pre --also-infer precision=tf32x3"
        limit=300  # 146-150 s on this project's 2-core VM on a slow day (session 56)
    fi
    # shellcheck disable=SC2086
    timed "precision" $limit $PY bench/bench_gpu_workflow.py $args --out "$OUT/bench_gpu_precision.json"
fi

# ---------------------------------------------------------------- a real chunk: search, measurement, syncs
if wants chunk; then
    step "bench/bench_gpu_workflow.py: SSS CIFAR-100 through the jobs at a real chunk (200 networks): the lambda, mu search, measurement in one call, host syncs"
    left=$(( ${GPU_CHECK_BUDGET:-540} - ($(date +%s) - START) ))
    [ $left -lt 60 ] && left=60
    if [ "$CUDA" = 1 ]; then
        args="--device cuda --networks 200 --spaces sss --datasets cifar100 --search-grid 1e-7,10 --sync-networks 16"
        args="$args --time-limit $left"
        limit=$(( left + 40 ))
    else
        args="--cpu-smoke --spaces sss --datasets cifar100"
        limit=240
    fi
    # shellcheck disable=SC2086
    timed "chunk" $limit $PY bench/bench_gpu_workflow.py $args --out "$OUT/bench_gpu_search.json"
fi

# ---------------------------------------------------------------- CIFAR-10 inference, two ways
# cifar10_inference NAME JSON SPACE GPU-FLAGS CPU-FLAGS: through the job, 16 networks of SPACE (the
# CPU smoke's 3), the main run's settings against --also-infer's
cifar10_inference() {
    local name=$1 json=$2 space=$3 flags limit
    if [ "$CUDA" = 1 ]; then flags="--device cuda --networks 16 $4 --time-limit 130"; limit=170
    else flags="--cpu-smoke $5"; limit=120; fi
    # shellcheck disable=SC2086
    timed "$name" $limit $PY bench/bench_gpu_workflow.py --spaces "$space" --datasets cifar10 --odir 1,1 --stages pre \
        $flags --out "$OUT/$json"
}
if wants passes GPU_CHECK_PASSES; then
    step "bench/bench_gpu_workflow.py: CIFAR-10 inference, stacked passes (64) against one network per pass, SSS and TSS"
    both="--runtime networks_per_pass=64 --also-infer networks_per_pass=1"
    cifar10_inference "sss passes" bench_gpu_sss_passes.json sss "$both" "$both"
    cifar10_inference "tss passes" bench_gpu_tss_passes.json tss "$both" "$both"
fi
if wants batch GPU_CHECK_BATCH; then
    step "bench/bench_gpu_workflow.py: SSS CIFAR-10 inference at one network per pass, batch_size 1000 against 4096 and 16384"
    cifar10_inference "sss batch" bench_gpu_sss_batch.json sss \
        "--batch-size 1000 --also-infer batch_size=4096 --also-infer batch_size=16384" \
        "--batch-size 100 --also-infer batch_size=400"
fi

# ---------------------------------------------------------------- every table's jobs, timed
if wants workflow GPU_CHECK_WORKFLOW; then
    step "bench/bench_gpu_workflow.py: inference and measurement of every table (lambda, mu fixed)"
    if [ "$CUDA" = 1 ]; then
        args="--device cuda --networks ${GPU_CHECK_NETWORKS:-16} --time-limit ${GPU_CHECK_TIME_LIMIT:-140} --odir 1,1"
        limit=190
    else
        args="--cpu-smoke --odir 1,1"
        limit=240
    fi
    # shellcheck disable=SC2086
    timed "bench_gpu_workflow" $limit $PY bench/bench_gpu_workflow.py $args --out "$OUT/bench_gpu_workflow.json" ${GPU_CHECK_BENCH_ARGS:-}
fi

# ---------------------------------------------------------------- layouts of the forward pass
if wants profile GPU_CHECK_PROFILE; then
    step "bench/gpu_profile_inference.py"
    if [ "$CUDA" = 1 ]; then
        timeout -k 5 45 $PY bench/gpu_profile_inference.py --device cuda || status=1
    else
        echo "(no CUDA: skipped; it times CUDA kernels)"
    fi
fi

step "done: exit $status; log $LOG"
exit $status
