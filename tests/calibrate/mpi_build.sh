# Sourced by bench_mpi_test.sh and exec_mpi_test.sh: builds calibrate/$1 standalone with
# -DSTEPCAST_BENCH_MPI=ON against the machine's Open MPI into $2/build, and sets `mpi` to
# the mpirun command for 2 processes. Exits 77 (skipped) without mpicxx/mpirun or nvcc.
# Usage: mpi_standalone_build SOURCE_DIR SUBDIR OUT
mpi_standalone_build() {
  local src=$1 sub=$2 out=$3 tool nvcc
  for tool in mpicxx mpirun; do
    command -v "$tool" >/dev/null || { echo "$tool not found: skipped"; exit 77; }
  done
  nvcc=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  [[ -x "$nvcc" ]] || { echo "nvcc not found: skipped"; exit 77; }
  cmake -S "$src/calibrate/$sub" -B "$out/build" -DSTEPCAST_BENCH_MPI=ON \
    -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
    >"$out/configure.log" 2>&1 || { cat "$out/configure.log"; exit 1; }
  grep -q "Found MPI" "$out/configure.log" || { echo "configure did not find MPI"; exit 1; }
  cmake --build "$out/build" -j"$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
  mpi=(mpirun --oversubscribe -np 2)
  if [[ $(id -u) -eq 0 ]]; then mpi+=(--allow-run-as-root); fi
}
