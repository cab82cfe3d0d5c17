// LinearCuda: the GPU form of fp4::Linear (nn/linear.h), Y = X W^T for the four block linears, built
// from the layer's LinearPolicy. Activations are BF16; the weight is the engine's FP32 master with a BF16
// copy (refreshed after every optimizer step) and an FP32 gradient that accumulates across micro-batches.
//
// make_linear_cuda returns the BF16 (unquantized) layer for an unquantized policy (three cuBLASLt GEMMs
// with FP32 accumulation), and the NVFP4 layer of quant_linear_cuda.h for a quantized one; that layer
// needs spec.layer_id and spec.quant_ctx (the engine's seed and per-forward call index), and refuses the
// policies it cannot run with fp4::Error. Both implement this interface.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "nn/linear.h"
#include "ops/cuda/gemm_cublaslt.h"

namespace fp4::cuda {

// A weight [out][in] in device memory (owned by the engine's parameter store).
struct DeviceWeight {
  const float* master = nullptr;  // FP32
  const bf16* value = nullptr;    // BF16 copy of master, what the GEMMs read
  float* grad = nullptr;          // FP32, accumulated into (beta = 1)
};

// Where the backward writes dX [n][in]: exactly one of bf16_out / f32_out. With f32_out, `add` (may be
// null, may alias f32_out) is added: dX = dY W + add (the residual stream's gradient in one GEMM).
struct LinearGradOut {
  bf16* bf16_out = nullptr;
  float* f32_out = nullptr;
  const float* add = nullptr;
};

class LinearCuda {
 public:
  virtual ~LinearCuda() = default;
  const LinearSpec& spec() const { return spec_; }

  // y [n][out] = x [n][in] W^T in BF16. The layer keeps what its backward needs (the BF16 layer keeps
  // the pointer x, which must stay valid and unchanged until backward).
  virtual void forward(const bf16* x, bf16* y, int n) = 0;
  // dX from dY [n][out] for the last forward; W.grad += dY^T X.
  virtual void backward(const bf16* dy, const LinearGradOut& dx, int n) = 0;

  // Whether backward() reads the x given to forward(). When false (the NVFP4 layer keeps its own packed
  // X^T), the caller may overwrite x as soon as forward() returns: the engine then keeps no copy of it.
  virtual bool backward_reads_input() const = 0;
  // Device bytes the layer holds itself from forward to backward (the NVFP4 layer's packed operands).
  virtual size_t kept_bytes() const = 0;
  // Transient device bytes that one forward() or backward() over n rows uses (0: none). Nothing in them
  // outlives the call.
  virtual size_t workspace_bytes(int n) const = 0;

  // Lends the layer [p, p + bytes) (256-byte aligned) for those transients: any forward() or backward()
  // may overwrite it, so the caller may overlay it on data that is dead during linear layers. Without a
  // lent workspace the layer uses one of its own; with one too small for n rows, forward/backward throw.
  void lend_workspace(void* p, size_t bytes) {
    workspace_ = static_cast<uint8_t*>(p);
    workspace_size_ = p != nullptr ? bytes : 0;
  }

 protected:
  explicit LinearCuda(LinearSpec spec) : spec_(std::move(spec)) {}
  LinearSpec spec_;
  uint8_t* workspace_ = nullptr;
  size_t workspace_size_ = 0;
};

// All work is queued on `stream`; `gemm` must outlive the layer.
std::unique_ptr<LinearCuda> make_linear_cuda(const LinearSpec& spec, const DeviceWeight& weight,
                                             GemmRunner& gemm, cudaStream_t stream);

}  // namespace fp4::cuda
