#!/usr/bin/env bash
# Proof that the emulated GPU is not a no-op: plants one-line bugs in the CUDA sources, one at a
# time, in a copy of the tree, and shows that each makes a test on the emulated GPU fail
# (docs/emulated_gpu.md). Prints one line per bug, caught or MISSED, and exits 1 if any was
# missed. The bugs include the defects issue 23 fixed, each put back, so each fix is shown to be
# what its test needs. Takes about 30 minutes on 2 cores (one build, then a rebuild and a test
# per bug). ONLY=<text> plants only the bugs whose name contains it.
#   ./scripts/checks/mutation_check.sh [scratch folder]     # default /tmp/ted-mutations
#   ONLY="16-bit gradients" ./scripts/checks/mutation_check.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
scratch=${1:-/tmp/ted-mutations}
source "$root/scripts/common.sh"
ted_install_missing || exit 2
ted_mpi_env
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1 TED_EMU_DELAY_US=20

# name | file | the text as it is (\n: a line break) | as the bug has it | the test that must fail
mutations=(
  "cuBLAS operands swapped (A for B)|lib/ted/kernels/cuda/gemm.cu|&alpha, b, cuda_type<In>(), ldb,\n                                  a, cuda_type<In>(), lda,|&alpha, a, cuda_type<In>(), lda,\n                                  b, cuda_type<In>(), ldb,|backend [linear]"
  "off-by-one in a kernel's index (dispatch)|lib/ted/kernels/cuda/moe.cu|T* to = buffer + (static_cast<std::size_t>(expert[c]) * capacity + slot[c]) * h;|T* to = buffer + (static_cast<std::size_t>(expert[c]) * capacity + slot[c] + 1) * h;|backend [permutation]"
  "__syncthreads removed (block reductions)|lib/ted/kernels/cuda/common.cuh|  if (lane == 0) shared[warp] = v;\n  __syncthreads();\n  float total|  if (lane == 0) shared[warp] = v;\n  float total|backend [layernorm]"
  "__syncthreads removed (fused attention)|lib/ted/kernels/cuda/flash_attention.cuh|    __syncthreads();  // the previous tile's k, v and s are used up|    // (barrier removed)|backend [attention]"
  "synchronisation before a host read removed|lib/ted/backend/cuda/cuda_device.cu|cudaMemcpyDeviceToHost, stream_));\n    TED_CHECK_CUDA(cudaStreamSynchronize(stream_));|cudaMemcpyDeviceToHost, stream_));|comm mpi 2"
  "wrong NCCL count (all-gather)|lib/ted/comm/nccl/nccl_communicator.cpp|ncclAllGather(send, recv, count, |ncclAllGather(send, recv, count - (count > 1), |comm nccl 2"
  "defect: sums of squares back to one atomic add|lib/ted/kernels/cuda/optimizer.cu|  if (threadIdx.x == 0) partials[blockIdx.x] = block;|  if (threadIdx.x == 0) atomicAdd(partials, block);|backend [optimizer]"
  "the GeLU gradient left out of the experts' backward|lib/ted/kernels/cuda/gemm.cu|out.v[q] = store<T>(v[q] * gelu_grad(load(x.v[q])));|out.v[q] = store<T>(v[q]);|backend [experts]"
  "the bias left out of the fused GEMM epilogue (cuBLASLt)|lib/ted/kernels/cuda/gemm.cu|      return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;|      return CUBLASLT_EPILOGUE_DEFAULT;|backend [linear]"
  "defect: collective timed with the compute queued before it|lib/ted/comm/communicator.cpp|  synchronize();\n  auto start = std::chrono::steady_clock::now();\n  call();|  auto start = std::chrono::steady_clock::now();\n  call();|comm mpi 2"
  "defect: the pool's memory kept when cuBLAS sets up|lib/ted/kernels/cuda/gemm.cu|  ted::cuda::release_cached_memory(device);\n|\n|comm mpi 2"
  "defect: a failed NCCL group left open|lib/ted/comm/nccl/nccl_communicator.cpp|    if (open_) ncclGroupEnd();|    (void)open_;|comm nccl 2"
  "defect: staged all-to-all pins new buffers each start|lib/ted/comm/staged_mpi_communicator.cpp|  for (auto it = spare_pairs_.begin(); it != spare_pairs_.end(); ++it)|  for (auto it = spare_pairs_.end(); it != spare_pairs_.end(); ++it)|comm mpi 2"
  "defect: a grid's y limit ignored (column reductions)|lib/ted/kernels/cuda/common.cuh|  return needed > kRowChunk ? needed : kRowChunk;|  return kRowChunk + 0 * needed;|backend [large]"
  "dynamic shared memory: LayerNorm's backward asks for half of what it uses|lib/ted/kernels/cuda/layernorm.cu|2 * h * sizeof(float), stream(ctx), x, gamma,|h * sizeof(float), stream(ctx), x, gamma,|backend [layernorm]"
  "static __shared__ read before written (block sums add all 32 slots)|lib/ted/kernels/cuda/common.cuh|  for (int w = 0; w < warps; ++w) total += shared[w];|  for (int w = 0; w < 32; ++w) total += shared[w];|backend [layernorm]"
  "dropout: the fused attention's backward takes dP without the mask|lib/ted/kernels/cuda/flash_attention.cuh|grad = prob * (mask * dprob - row_delta[r]) * scale;|grad = prob * (dprob - row_delta[r]) * scale;|backend [dropout]"
  "vocabulary-parallel cross-entropy: a gradient in the padding columns|lib/ted/kernels/cuda/vocabulary.cu|    if (j >= words) {|    if (j >= words && false) {|backend [vocab]"
  "lanes exit before a full-mask shuffle (LayerNorm threads without a pack)|lib/ted/kernels/cuda/layernorm.cu|  float s = 0;\n  for (int j = threadIdx.x * P; j < h; j += blockDim.x * P) {\n    const Pack<T> p = load_pack(x + base + j);|  float s = 0;\n  if (static_cast<int>(threadIdx.x) * P >= h) return;\n  for (int j = threadIdx.x * P; j < h; j += blockDim.x * P) {\n    const Pack<T> p = load_pack(x + base + j);|backend [layernorm]"
  "16-bit gradients: the weight GEMM overwrites the gradient (beta 0)|lib/ted/kernels/cuda/linear.cu|gemm<T>(ctx, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c.low, ldc);|gemm<T>(ctx, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c.low, ldc);|backend [grad16]"
  "16-bit gradients: a bias's fp32 sums never added in|lib/ted/kernels/cuda/elementwise.cu|  accumulate<T>(ctx, sums.data(), db.low, count);|  (void)count;|backend [grad16]"
  "16-bit gradients: every row of a word adds the word's sum (the embedding)|lib/ted/kernels/cuda/vocabulary.cu|(at > 0 && keys[at - 1] == word)) continue;|(at > 0 && false)) continue;|backend [grad16]"
)

echo "== copying the tree to $scratch"
mkdir -p "$scratch"
rm -rf "$scratch/src" && mkdir -p "$scratch/src"
# The working tree as git sees it (tracked files and new ones it does not ignore).
git -C "$root" ls-files -co --exclude-standard -z | tar -C "$root" --null -T - -cf - | tar -C "$scratch/src" -xf -
build="$scratch/build"
targets=(test_backend_emulated test_comm_emulated)
echo "== building the emulated tests (once)"
cmake -S "$scratch/src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTED_ENABLE_CUDA=OFF \
  >"$scratch/configure.log" 2>&1 || { echo "configure failed: $scratch/configure.log"; exit 2; }
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$scratch/build.log" 2>&1 ||
  { echo "build failed: $scratch/build.log"; exit 2; }

run_test() {  # <backend|comm> <catch filter or comm> [ranks]; the settings of their CTests
  case $1 in
    backend) timeout 900 "$build/tests/test_backend_emulated" --device cuda "$2" ;;
    comm) TED_EMU_MEMORY=256M timeout 600 mpirun -n "$3" --oversubscribe "$build/tests/test_comm_emulated" \
      --device cuda --backend "$2" ;;
  esac
}

echo "== the tests pass on the sources as they are"
for test in "backend [linear]" "backend [permutation]" "backend [layernorm]" "backend [attention]" \
  "backend [optimizer]" "backend [experts]" "backend [large]" "backend [dropout]" "backend [vocab]" \
  "backend [grad16]" "comm mpi 2" "comm nccl 2"; do
  # shellcheck disable=SC2086
  run_test $test >"$scratch/baseline.log" 2>&1 || { echo "baseline failed: $test ($scratch/baseline.log)"; exit 2; }
done

missed=0 planted=0
for entry in "${mutations[@]}"; do
  IFS='|' read -r name file before after test <<<"$entry"
  [[ -z ${ONLY:-} || $name == *"$ONLY"* ]] || continue
  planted=$((planted + 1))
  cp "$scratch/src/$file" "$scratch/original"
  if ! /usr/bin/python3 - "$scratch/src/$file" "$before" "$after" <<'PY'; then
import sys
path, before, after = sys.argv[1], sys.argv[2].replace("\\n", "\n"), sys.argv[3].replace("\\n", "\n")
text = open(path).read()
if text.count(before) != 1:
    sys.exit(f"the text to change occurs {text.count(before)} times")
open(path, "w").write(text.replace(before, after))
PY
    echo "NOT PLANTED  $name ($file: the text to change was not found)"
    missed=$((missed + 1))
    continue
  fi
  if ! cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$scratch/rebuild.log" 2>&1; then
    echo "NOT BUILT    $name (the planted bug does not compile: $scratch/rebuild.log)"
    missed=$((missed + 1))
  else
    # shellcheck disable=SC2086
    if run_test $test >"$scratch/mutant.log" 2>&1; then
      echo "MISSED       $name: '$test' still passes"
      missed=$((missed + 1))
    else
      reason=$(grep -m1 -E "FAILED|failed|error|Error" "$scratch/mutant.log" | cut -c1-120)
      echo "caught       $name: '$test' fails ($reason)"
    fi
  fi
  cp "$scratch/original" "$scratch/src/$file"
done
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >/dev/null 2>&1
echo "== $((planted - missed)) of $planted planted bugs caught"
[ "$missed" -eq 0 ]
