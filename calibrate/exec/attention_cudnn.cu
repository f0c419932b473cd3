// Fused attention through cuDNN's backend graph API (attention_cudnn.h: what the graphs
// are and where they come from). Every descriptor is built as cudnn-frontend builds it for
// its sdpa and sdpa_backward nodes: 4-d tensors [batch, heads, rows, columns] with 16-byte
// alignment and unique ids, fp32 intermediates (virtual tensors), fp32 matmul and pointwise
// compute, the scalars (scale, -inf, 1) passed by value; cuDNN's heuristics (mode A, then
// fallback) give the engine configurations and the first that finalizes is used.
#include "attention_cudnn.h"

#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_error.h"
#include "check.h"
#include "gemm_runner.h"

#if defined(STEPCAST_EXEC_CUDNN)
#include <cudnn.h>
#if CUDNN_MAJOR < 9
#undef STEPCAST_EXEC_CUDNN  // the graph API used here (error strings, reshape) is cuDNN 9's
#define STEPCAST_EXEC_CUDNN_TOO_OLD
#endif
#endif

namespace stepcast::exec {

bool SdpaShape::operator<(const SdpaShape& o) const {
  return std::tie(batch, heads, kv_heads, seq_q, seq_kv, head_dim, causal, backward, fp16) <
         std::tie(o.batch, o.heads, o.kv_heads, o.seq_q, o.seq_kv, o.head_dim, o.causal, o.backward,
                  o.fp16);
}

#if !defined(STEPCAST_EXEC_CUDNN)

struct SdpaRank::Impl {};
SdpaRank::SdpaRank() = default;
SdpaRank::~SdpaRank() = default;
std::string SdpaRank::library() {
#if defined(STEPCAST_EXEC_CUDNN_TOO_OLD)
  return "none: the cuDNN found is older than 9";
#else
  return "none: built without cuDNN (cudnn.h and libcudnn not found)";
#endif
}
bool SdpaRank::available() { return false; }
bool SdpaRank::open(std::string& why) {
  why = library();
  return false;
}
Sdpa* SdpaRank::plan(const SdpaShape&, std::string& why) {
  why = library();
  return nullptr;
}
void SdpaRank::bind(cudaStream_t) {}
std::string SdpaRank::failure(const Sdpa*) const { return library(); }
void SdpaRank::close() {}

#else

namespace {

using bench::BenchError;

class CudnnError : public BenchError {
 public:
  using BenchError::BenchError;
};

std::string status_text(cudnnStatus_t st) {
  char last[2048] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  std::string s = cudnnGetErrorString(st);
  if (last[0]) s += std::string(" (") + last + ")";
  return s;
}

#define STEPCAST_CUDNN_CHECK(call)                                                  \
  do {                                                                              \
    const cudnnStatus_t st_ = (call);                                               \
    if (st_ != CUDNN_STATUS_SUCCESS)                                                \
      throw CudnnError(std::string(#call).substr(0, 48) + ": " + status_text(st_)); \
  } while (0)

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t t) {
    STEPCAST_CUDNN_CHECK(cudnnBackendCreateDescriptor(t, &d_));
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc& set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, std::int64_t n,
            const void* v) {
    STEPCAST_CUDNN_CHECK(cudnnBackendSetAttribute(d_, a, t, n, v));
    return *this;
  }
  Desc& set(cudnnBackendAttributeName_t a, cudnnBackendDescriptor_t d) {
    return set(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
  }
  void finalize() { STEPCAST_CUDNN_CHECK(cudnnBackendFinalize(d_)); }
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<std::int64_t, 4>;
using TensorDesc = cudnnBackendDescriptor_t;

Dims packed(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;

// An operation graph, its execution plan and its variant pack.
class Graph {
 public:
  explicit Graph(cudnnHandle_t h) : handle_(h) {}

  TensorDesc tensor(std::int64_t uid, const Dims& dims, const Dims& strides, cudnnDataType_t dt,
                    bool is_virtual, bool by_value = false) {
    Desc& d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const std::int64_t align = 16;
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align)
        .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    d.finalize();
    return d.get();
  }
  TensorDesc virt(const Dims& dims, cudnnDataType_t dt) { return virt(dims, packed(dims), dt); }
  TensorDesc virt(const Dims& dims, const Dims& strides, cudnnDataType_t dt) {
    return tensor(next_uid_++, dims, strides, dt, true);
  }
  TensorDesc scalar(std::int64_t uid) {  // a float passed by value
    return tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, kF32, false, true);
  }

  void matmul(TensorDesc a, TensorDesc b, TensorDesc c) {
    Desc& m = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    m.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &kF32).finalize();
    Desc& op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
        .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
        .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
        .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, m.get())
        .finalize();
    ops_.push_back(op.get());
  }
  // y = mode(x[, b[, t]]) computed in `prec`; axis for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, TensorDesc x, TensorDesc b,
                 TensorDesc y, TensorDesc t = nullptr, std::int64_t axis = -1) {
    Desc& p = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    p.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) p.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    p.finalize();
    Desc& op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p.get())
        .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    if (t) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    op.finalize();
    ops_.push_back(op.get());
  }
  void reduction(cudnnReduceTensorOp_t mode, TensorDesc x, TensorDesc y) {
    Desc& r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode)
        .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &kF32)
        .finalize();
    Desc& op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
        .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
        .set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r.get())
        .finalize();
    ops_.push_back(op.get());
  }
  void reshape(TensorDesc x, TensorDesc y) {  // a view with other dims/strides (a transpose)
    Desc& op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x).set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    op.finalize();
    ops_.push_back(op.get());
  }

  // The operation graph and the first engine configuration of cuDNN's heuristics (mode A,
  // then fallback) whose execution plan finalizes. Throws CudnnError when none does.
  void finalize() {
    Desc& g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    g.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
          static_cast<std::int64_t>(ops_.size()), ops_.data())
        .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_)
        .finalize();
    std::string last = "the heuristics returned no engine";
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      try {
        Desc& heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, g.get())
            .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode)
            .finalize();
        std::int64_t count = 0;
        STEPCAST_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                                      nullptr));
        std::vector<cudnnBackendDescriptor_t> cfgs;
        for (std::int64_t i = 0; i < count; ++i)
          cfgs.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
        std::int64_t got = 0;
        STEPCAST_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                                      cfgs.data()));
        for (std::int64_t i = 0; i < got; ++i) {
          try {
            auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_)
                .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[static_cast<size_t>(i)])
                .finalize();
            std::int64_t n = 0;
            STEPCAST_CUDNN_CHECK(cudnnBackendGetAttribute(plan->get(),
                                                          CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                          CUDNN_TYPE_INT64, 1, &n, &workspace_));
            plan_ = std::move(plan);
            return;
          } catch (const CudnnError& e) {
            last = e.what();
          }
        }
      } catch (const CudnnError& e) {
        last = e.what();
      }
    }
    throw CudnnError("no cuDNN engine runs this graph (" + last + ")");
  }
  std::int64_t workspace() const { return workspace_; }

  // The data of every non-virtual tensor by id (device pointers; host pointers for the
  // by-value scalars) and the workspace.
  void bind(const std::vector<std::pair<std::int64_t, void*> >& data, void* workspace) {
    std::vector<std::int64_t> uids;
    std::vector<void*> ptrs;
    for (const auto& [u, p] : data) {
      uids.push_back(u);
      ptrs.push_back(p);
    }
    pack_ = std::make_unique<Desc>(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack_
        ->set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
              static_cast<std::int64_t>(uids.size()), uids.data())
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
             static_cast<std::int64_t>(ptrs.size()), ptrs.data())
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)
        .finalize();
  }
  void execute(cudaStream_t s) {
    STEPCAST_CUDNN_CHECK(cudnnSetStream(handle_, s));
    STEPCAST_CUDNN_CHECK(cudnnBackendExecute(handle_, plan_->get(), pack_->get()));
  }

 private:
  Desc& make(cudnnBackendDescriptorType_t t) {
    keep_.push_back(std::make_unique<Desc>(t));
    return *keep_.back();
  }
  cudnnHandle_t handle_;
  std::vector<std::unique_ptr<Desc> > keep_;  // every descriptor the graph refers to
  std::vector<cudnnBackendDescriptor_t> ops_;
  std::unique_ptr<Desc> plan_, pack_;
  std::int64_t next_uid_ = 100, workspace_ = 0;
};

// The non-virtual tensors' ids.
enum Uid : std::int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegInf,
  kDO,
  kDQ,
  kDK,
  kDV,
  kOne,
  kRowSum
};

// The rank's buffers, shared by every graph (sized for the largest shape).
struct Buffers {
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *dout = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr, *stats = nullptr, *rowsum = nullptr;
  void* workspace = nullptr;
};

class SdpaGraph final : public Sdpa {
 public:
  SdpaGraph(cudnnHandle_t h, const SdpaShape& s, bool grouped)
      : g_(h), s_(s), grouped_(grouped), scale_(1.0f / std::sqrt(static_cast<float>(s.head_dim))) {
    if (s.backward)
      build_backward();
    else
      build_forward();
    g_.finalize();
  }
  void launch(cudaStream_t st) override { g_.execute(st); }
  bool grouped() const override { return grouped_; }
  std::int64_t workspace() const { return g_.workspace(); }
  void bind(const Buffers& b) {
    std::vector<std::pair<std::int64_t, void*> > data = {
        {kQ, b.q}, {kK, b.k}, {kV, b.v}, {kO, b.o}, {kStats, b.stats}, {kScale, &scale_}};
    if (s_.causal) data.push_back({kNegInf, &neg_inf_});
    if (s_.backward) {
      for (const auto& e : std::vector<std::pair<std::int64_t, void*> >{{kDO, b.dout},
                                                                        {kDQ, b.dq},
                                                                        {kDK, b.dk},
                                                                        {kDV, b.dv},
                                                                        {kOne, &one_},
                                                                        {kRowSum, b.rowsum}})
        data.push_back(e);
    }
    g_.bind(data, b.workspace);
  }

 private:
  cudnnDataType_t io() const { return s_.fp16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }
  std::int64_t kv_heads() const { return grouped_ ? s_.kv_heads : s_.heads; }

  // Rows at or below the diagonal kept, the others set to the lowest float (cudnn-frontend's
  // causal mask: GEN_INDEX of rows and columns in int32, CMP_GE to a boolean, BINARY_SELECT).
  TensorDesc causal(TensorDesc x, const Dims& sd) {
    if (!s_.causal) return x;
    TensorDesc row = g_.virt(sd, CUDNN_DATA_INT32), col = g_.virt(sd, CUDNN_DATA_INT32);
    g_.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, nullptr, row, nullptr, 2);
    g_.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, nullptr, col, nullptr, 3);
    TensorDesc keep = g_.virt(sd, CUDNN_DATA_BOOLEAN);
    g_.pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, keep);
    TensorDesc y = g_.virt(sd, kF32);
    g_.pointwise(CUDNN_POINTWISE_BINARY_SELECT, kF32, x, g_.scalar(kNegInf), y, keep);
    return y;
  }

  void build_forward() {
    const std::int64_t b = s_.batch, h = s_.heads, hk = kv_heads(), sq = s_.seq_q, skv = s_.seq_kv,
                       d = s_.head_dim;
    const Dims sd{b, h, sq, skv}, rd{b, h, sq, 1}, rs{h * sq, sq, 1, 1};
    TensorDesc q = g_.tensor(kQ, {b, h, sq, d}, packed({b, h, sq, d}), io(), false);
    // K is stored [b, hk, skv, d]; the first matmul reads it as K^T [b, hk, d, skv].
    TensorDesc kt = g_.tensor(kK, {b, hk, d, skv}, {hk * skv * d, skv * d, 1, d}, io(), false);
    TensorDesc v = g_.tensor(kV, {b, hk, skv, d}, packed({b, hk, skv, d}), io(), false);
    TensorDesc o = g_.tensor(kO, {b, h, sq, d}, packed({b, h, sq, d}), io(), false);
    TensorDesc stats = g_.tensor(kStats, rd, rs, kF32, false);
    TensorDesc s1 = g_.virt(sd, kF32), s2 = g_.virt(sd, kF32);
    g_.matmul(q, kt, s1);
    g_.pointwise(CUDNN_POINTWISE_MUL, kF32, s1, g_.scalar(kScale), s2);
    TensorDesc s3 = causal(s2, sd);
    // Softmax with its statistics (cudnn-frontend softmax.h, has_stats).
    TensorDesc mx = g_.virt(rd, rs, kF32), sub = g_.virt(sd, kF32), ex = g_.virt(sd, kF32);
    g_.reduction(CUDNN_REDUCE_TENSOR_MAX, s3, mx);
    g_.pointwise(CUDNN_POINTWISE_SUB, kF32, s3, mx, sub);
    g_.pointwise(CUDNN_POINTWISE_EXP, kF32, sub, nullptr, ex);
    TensorDesc sum = g_.virt(rd, rs, kF32), lg = g_.virt(rd, rs, kF32);
    g_.reduction(CUDNN_REDUCE_TENSOR_ADD, ex, sum);
    g_.pointwise(CUDNN_POINTWISE_LOG, kF32, sum, nullptr, lg);
    g_.pointwise(CUDNN_POINTWISE_ADD, kF32, mx, lg, stats);
    TensorDesc p = g_.virt(sd, io());  // the second matmul takes P in the i/o type
    g_.pointwise(CUDNN_POINTWISE_DIV, kF32, ex, sum, p);
    g_.matmul(p, v, o);
  }

  void build_backward() {
    const std::int64_t b = s_.batch, h = s_.heads, sq = s_.seq_q, skv = s_.seq_kv, d = s_.head_dim;
    const Dims sd{b, h, sq, skv}, rd{b, h, sq, 1}, rs{h * sq, sq, 1, 1};
    const Dims qd{b, h, sq, d}, kd{b, h, skv, d};
    const Dims td{b, h, skv, sq}, ts{h * sq * skv, sq * skv, 1, skv};  // [sq, skv] transposed
    const Dims kts{h * skv * d, skv * d, 1, d};                        // K, V read transposed
    TensorDesc q = g_.tensor(kQ, qd, packed(qd), io(), false);
    TensorDesc kt = g_.tensor(kK, {b, h, d, skv}, kts, io(), false);
    TensorDesc vt = g_.tensor(kV, {b, h, d, skv}, kts, io(), false);
    TensorDesc o = g_.tensor(kO, qd, packed(qd), io(), false);
    TensorDesc dout = g_.tensor(kDO, qd, packed(qd), io(), false);
    TensorDesc stats = g_.tensor(kStats, rd, rs, kF32, false);
    TensorDesc dq = g_.tensor(kDQ, qd, packed(qd), io(), false);
    TensorDesc dk = g_.tensor(kDK, kd, packed(kd), io(), false);
    TensorDesc dv = g_.tensor(kDV, kd, packed(kd), io(), false);
    TensorDesc one = g_.scalar(kOne), scale = g_.scalar(kScale);
    // Row sums of dO * O (softmax_sum, kept in a buffer of its own as cudnn-frontend keeps it
    // in its workspace).
    TensorDesc doo = g_.virt(qd, kF32), red = g_.virt(rd, rs, kF32);
    TensorDesc rowsum = g_.tensor(kRowSum, rd, rs, kF32, false);
    g_.pointwise(CUDNN_POINTWISE_MUL, kF32, dout, o, doo);
    g_.reduction(CUDNN_REDUCE_TENSOR_ADD, doo, red);
    g_.pointwise(CUDNN_POINTWISE_MUL, kF32, red, one, rowsum);
    // P again from the forward's statistics.
    TensorDesc s1 = g_.virt(sd, kF32), s2 = g_.virt(sd, kF32);
    g_.matmul(q, kt, s1);
    g_.pointwise(CUDNN_POINTWISE_MUL, kF32, s1, scale, s2);
    TensorDesc s3 = causal(s2, sd);
    TensorDesc s4 = g_.virt(sd, kF32), ex = g_.virt(sd, kF32), pd = g_.virt(sd, kF32);
    g_.pointwise(CUDNN_POINTWISE_SUB, kF32, s3, stats, s4);
    g_.pointwise(CUDNN_POINTWISE_EXP, kF32, s4, nullptr, ex);
    g_.pointwise(CUDNN_POINTWISE_MUL, kF32, ex, one, pd);  // dropout's scale: 1
    // dV = P^T dO
    TensorDesc pt = g_.virt(td, ts, io());
    g_.reshape(pd, pt);
    g_.matmul(pt, dout, dv);
    // dS = P (dO V^T - rowsum) * scale
    TensorDesc dp = g_.virt(sd, kF32), dp2 = g_.virt(sd, kF32), dp3 = g_.virt(sd, kF32);
    g_.matmul(dout, vt, dp);
    g_.pointwise(CUDNN_POINTWISE_SUB, kF32, dp, rowsum, dp2);
    g_.pointwise(CUDNN_POINTWISE_MUL, kF32, dp2, ex, dp3);
    TensorDesc ds = g_.virt(sd, kF32);
    g_.pointwise(CUDNN_POINTWISE_MUL, kF32, dp3, scale, ds);
    // dK = dS^T Q
    TensorDesc dst = g_.virt(td, ts, io());
    g_.reshape(ds, dst);
    g_.matmul(dst, q, dk);
    // dQ = dS K (K^T read back as K)
    TensorDesc k = g_.virt(kd, packed(kd), io());
    g_.reshape(kt, k);
    g_.matmul(ds, k, dq);
  }

  Graph g_;
  SdpaShape s_;
  bool grouped_;
  float scale_, neg_inf_ = std::numeric_limits<float>::lowest(), one_ = 1.0f;
};

}  // namespace

struct SdpaRank::Impl {
  cudnnHandle_t handle = nullptr;
  std::map<SdpaShape, std::unique_ptr<SdpaGraph> > graphs;
  std::map<SdpaShape, std::string> failed;    // shapes cuDNN cannot run, and why
  std::map<const Sdpa*, std::string> broken;  // planned, but their first run was refused
  Buffers buf;
};

SdpaRank::SdpaRank() : impl_(std::make_unique<Impl>()) {}
SdpaRank::~SdpaRank() { close(); }

std::string SdpaRank::library() {
  const std::size_t v = cudnnGetVersion();  // e.g. 91900 for 9.19.0
  return "cudnn " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}
bool SdpaRank::available() { return true; }

bool SdpaRank::open(std::string& why) {
  if (impl_->handle) return true;
  const cudnnStatus_t st = cudnnCreate(&impl_->handle);
  if (st == CUDNN_STATUS_SUCCESS) return true;
  impl_->handle = nullptr;
  why = "cudnnCreate: " + status_text(st);
  return false;
}

Sdpa* SdpaRank::plan(const SdpaShape& shape, std::string& why) {
  if (!impl_->handle) {
    why = "no cuDNN handle";
    return nullptr;
  }
  if (auto it = impl_->graphs.find(shape); it != impl_->graphs.end()) return it->second.get();
  if (auto it = impl_->failed.find(shape); it != impl_->failed.end()) {
    why = it->second;
    return nullptr;
  }
  // Grouped where cuDNN runs it (the forward), else K and V repeated per query head.
  std::string err;
  for (bool grouped : {true, false}) {
    if (grouped && (shape.backward || shape.kv_heads == shape.heads)) continue;
    try {
      auto g = std::make_unique<SdpaGraph>(impl_->handle, shape, grouped);
      Sdpa* out = g.get();
      impl_->graphs.emplace(shape, std::move(g));
      if (shape.backward) {  // its forward fills O and Stats before the first backward
        SdpaShape fwd = shape;
        fwd.backward = false;
        std::string ignored;
        plan(fwd, ignored);
      }
      return out;
    } catch (const BenchError& e) {
      err = e.what();
    }
  }
  why = err;
  impl_->failed.emplace(shape, err);
  return nullptr;
}

void SdpaRank::bind(cudaStream_t s) {
  if (impl_->graphs.empty()) return;
  std::size_t q = 16, kv = 16, rows = 16, ws = 16;
  bool fp16 = false;
  for (const auto& [sh, g] : impl_->graphs) {
    fp16 = fp16 || sh.fp16;
    const auto bh = static_cast<std::size_t>(sh.batch * sh.heads);
    q = std::max(q, bh * static_cast<std::size_t>(sh.seq_q * sh.head_dim));
    kv = std::max(kv, bh * static_cast<std::size_t>(sh.seq_kv * sh.head_dim));  // heads: MHA
    rows = std::max(rows, bh * static_cast<std::size_t>(sh.seq_q));
    ws = std::max(ws, static_cast<std::size_t>(g->workspace()));
  }
  Buffers& b = impl_->buf;
  auto alloc = [&](void*& p, std::size_t bytes, bool values) {
    STEPCAST_CUDA_CHECK(cudaMalloc(&p, bytes));
    if (values)
      bench::fill_values(p, bytes / 2, fp16 ? "fp16" : "bf16", static_cast<unsigned>(bytes % 9973),
                         s);
    else
      STEPCAST_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, s));
  };
  alloc(b.q, 2 * q, true);
  alloc(b.k, 2 * kv, true);
  alloc(b.v, 2 * kv, true);
  alloc(b.o, 2 * q, true);
  alloc(b.dout, 2 * q, true);
  alloc(b.dq, 2 * q, false);
  alloc(b.dk, 2 * kv, false);
  alloc(b.dv, 2 * kv, false);
  alloc(b.stats, 4 * rows, false);
  alloc(b.rowsum, 4 * rows, false);
  alloc(b.workspace, ws, false);
  // Each graph once, the forwards first (finite O and Stats before any backward reads
  // them): a run cuDNN refuses drops the graph, whose tasks then run unfused.
  for (bool backward : {false, true})
    for (auto& [sh, g] : impl_->graphs) {
      if (sh.backward != backward) continue;
      try {
        g->bind(b);
        g->launch(s);
      } catch (const CudnnError& e) {
        impl_->broken.emplace(g.get(), e.what());
      }
    }
  STEPCAST_CUDA_CHECK(cudaStreamSynchronize(s));
}

std::string SdpaRank::failure(const Sdpa* g) const {
  auto it = impl_->broken.find(g);
  return it == impl_->broken.end() ? std::string() : "cuDNN refused its first run: " + it->second;
}

void SdpaRank::close() {
  if (!impl_) return;
  impl_->graphs.clear();
  Buffers& b = impl_->buf;
  for (void* p : {b.q, b.k, b.v, b.o, b.dout, b.dq, b.dk, b.dv, b.stats, b.rowsum, b.workspace})
    if (p) cudaFree(p);
  b = Buffers{};
  if (impl_->handle) cudnnDestroy(impl_->handle);
  impl_->handle = nullptr;
}

#endif  // STEPCAST_EXEC_CUDNN

}  // namespace stepcast::exec
