// The executor's own CUDA kernels (kernels.cu): the hold kernel that keeps a GPU idle until
// the host has queued its work, and the memory-bound tasks' kernels, which do the arithmetic
// their task stands for over the task's bytes.
#pragma once

#include <cstddef>
#include <string>

#include <cuda_runtime.h>

namespace stepcast::exec {

// Spins (sleeping 1 us per poll) until *release != 0 or `timeout_ns` of GPU time passed;
// sets *timed_out = 1 in the second case. Queued first on every stream's path (the zero
// event waits for it), so that the tasks' start events fire on a GPU whose queue is full,
// not as the host submits them: an idle stream's start event would otherwise be recorded
// before the kernel behind it was even launched, adding launch latency to every task.
// `release` and `timed_out` are host-mapped (cudaHostAllocMapped) device pointers.
void launch_hold(const volatile int* release, int* timed_out, unsigned long long timeout_ns,
                 cudaStream_t s);

// What a memory-bound task computes, from its Program `what` (the model's op names,
// model/workload.cc memory_op):
//  - kNorm (ln1, ln2, final_ln): RMS normalisation of bf16 rows: one block per row reads
//    it, reduces its sum of squares, writes x * rsqrt(mean(x^2) + eps);
//  - kSoftmax (softmax_ce): a row's max, exp(x - max) and their sum, then the quotient;
//  - kAdam (adam, sgd): fp32 Adam over param, grad, m, v (4 reads), writing param, m, v;
//  - kElementwise (everything else: activations, residual adds, embeddings, permutes, copies,
//    zero_grad): each output element is the sum of the inputs read for it.
// Rows are kRowElems bf16 elements (the Program gives bytes, not shapes; a row only sets
// how much one block reduces, not the bytes moved).
enum class MemOp { kNorm, kSoftmax, kAdam, kElementwise };
MemOp mem_op_of(const std::string& what);
const char* mem_op_name(MemOp op);
inline constexpr int kRowElems = 4096;

// One launch reading `read` bytes from `src` and writing `written` bytes to `dst` (16-byte
// aligned, holding at least that many bytes), computing `op`.
void launch_memory_op(MemOp op, const void* src, void* dst, std::size_t read, std::size_t written,
                      cudaStream_t s);

}  // namespace stepcast::exec
