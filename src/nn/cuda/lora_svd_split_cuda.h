// The subspace-constrained weight-gradient split of a LoRA-SVD layer (RECIPES.md section 8.1,
// nn/lora_svd_linear.h) on the device. After the recipe's wgrad dW [out x in] of one micro-batch:
//   U = cholesky_qr2(L2)        on the host from a copy of L2 (the CPU function: U is the CPU's bit for bit);
//   P = U (U^T dW)              FP32 GEMMs, as project_onto_columns;
//   grad_L2 += beta P L1^T, grad_L1 += beta L2^T P, grad_W_res += dW - P.
// The GEMMs are those of the CPU layer (same operands, FP32 accumulation, no TF32); results differ from the
// CPU only by the order of the FP32 sums. LoraSvdBases computes the U of every layer of a model together, so
// a micro-batch waits for the host once instead of twice per layer.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_stream.h"
#include "ops/cuda/gemm_f32_cublaslt.h"

namespace fp4::cuda {

// U [out x r], U^T dW [r x in] and P [out x in], sized on demand.
struct LoraSvdSplitWorkspace {
  int out = 0, in = 0, r = 0;
  DeviceBuffer<float> u, c, p;
  void ensure(int out, int in, int r);
};

// Page-locked host floats (asynchronous copies need them).
class PinnedFloats {
 public:
  PinnedFloats() = default;
  explicit PinnedFloats(size_t count);
  ~PinnedFloats();
  PinnedFloats(PinnedFloats&& o) noexcept;
  PinnedFloats& operator=(PinnedFloats&& o) noexcept;
  PinnedFloats(const PinnedFloats&) = delete;
  float* data() { return data_; }

 private:
  float* data_ = nullptr;
};

// The bases U = cholesky_qr2(L2) of all LoRA-SVD layers of an engine. Each layer's forward queues a copy of
// its L2 master to page-locked memory (queue_download, no wait); the first basis() after such copies waits
// once, for the last copy only (an event recorded after it, so the GPU goes on with the work queued after
// it: the rest of the forward, the loss and the backward up to this layer's split, while the host computes),
// computes the U of every layer whose copy is queued and queues their uploads, then returns the layer's
// device U. L2 changes only between optimizer steps and each backward follows its forward, so U is always
// that of the current L2; a micro-batch synchronizes once, not twice per layer.
class LoraSvdBases {
 public:
  int add_layer(int out, int r);  // a slot for a layer with L2 [out x r]
  void queue_download(int slot, const float* l2_device, cudaStream_t stream);
  // The device U [out x r] of the slot; throws fp4::Error for a slot whose L2 was never downloaded.
  const float* basis(int slot, cudaStream_t stream);
  size_t bytes() const;

 private:
  struct Slot {
    int out = 0, r = 0;
    PinnedFloats l2_host, u_host;
    DeviceBuffer<float> u;
    bool queued = false, ready = false;
  };
  std::vector<Slot> slots_;
  bool pending_ = false;
  std::unique_ptr<Event> downloaded_;  // recorded after each queued copy (made on first use, on its device)
};

// Device pointers, row-major FP32: dw [out x in], l1 [r x in], l2 [out x r]; the three gradients are added
// to (not overwritten). Throws fp4::Error when r is not in [1, min(out, in)). This form computes U itself
// (two host synchronizations); the engine's layers pass the U of LoraSvdBases to the second.
void lora_svd_split_gradient(const float* dw, const float* l1, const float* l2, int out, int in, int r,
                             float beta, float* grad_w_res, float* grad_l1, float* grad_l2,
                             LoraSvdSplitWorkspace& ws, GemmF32Runner& gemm, cudaStream_t stream);
// The same with U [out x r] = cholesky_qr2(L2) given on the device (ws.u is not used).
void lora_svd_split_gradient_with_basis(const float* dw, const float* u, const float* l1, const float* l2,
                                        int out, int in, int r, float beta, float* grad_w_res, float* grad_l1,
                                        float* grad_l2, LoraSvdSplitWorkspace& ws, GemmF32Runner& gemm,
                                        cudaStream_t stream);

}  // namespace fp4::cuda
