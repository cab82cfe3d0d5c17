// One ROOT / Q-Root step of one weight matrix on the GPU (optim/root.h: root_step), queued on a stream:
//   g = grad * clip_coef (the global clipping, StepControl);  M' = mu M + g;  U = g + mu M' (Nesterov) or M';
//   eps = the clip_quantile of |U| (exact: a radix sort of |U|'s bits, then the CPU's interpolation in
//   double);  B = clamp(U, -eps, eps);  X = NS(B) (optim/cuda/newton_schulz_cuda.h);
//   W <- W - lr (update_scale sqrt(max(r, c)) X + wd W),  M <- M'.
// The elementwise arithmetic is the CPU's, unfused, so M', U, eps and B are the CPU's bits; X differs by
// the GEMMs' summation order only. Failures are found on the device: a non-finite NS input or a diverged
// NS (|X|_F^2 > 4 min(r, c)) records a RootFault, sets control->skip (so nothing after it in the step
// updates) and leaves this matrix's W and M unchanged; a step whose control->skip is already set
// (non-finite gradient or loss) changes nothing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "optim/cuda/adamw_cuda.h"
#include "optim/cuda/newton_schulz_cuda.h"
#include "optim/root.h"

namespace fp4::cuda {

// Per matrix and step, on the device (zero it before the step).
struct RootDeviceStats {
  float clip_eps = 0;              // the clipping threshold used
  unsigned long long clipped = 0;  // elements of U with |U| > eps
  NsDeviceResult ns;               // sum of squares of B, |X|_F^2
};

enum RootFaultKind : int32_t { kRootNoFault = 0, kRootNonFiniteNsInput = 1, kRootNsDiverged = 2 };

// The first failure of a step (device; kind kRootNoFault when none).
struct RootFault {
  int32_t matrix = -1;
  int32_t kind = kRootNoFault;
  double value = 0;  // the sum of squares (kRootNonFiniteNsInput) or |X|_F^2 (kRootNsDiverged)
};

class RootStepCuda {
 public:
  // Workspace for matrices of up to max_numel elements, NS at `precision` (RootOptions::precision).
  RootStepCuda(int64_t max_numel, NsPrecision precision);

  // Queues the step of one matrix in two calls on the same stream, queue_commit right after queue_update
  // (the workspace holds M' and X in between): queue_update forms M', U, eps, B and X = NS(B) from g and m
  // (device [rows x cols]); queue_commit checks the NS input and output of matrix `index` and, unless the
  // step is skipped, writes W, w_bf16 (may be null) and M. Between the two a caller may order the checks of
  // several workspaces (DeviceRoot's lanes). Hyper-parameters are checked on the host as root_step checks
  // them (fp4::Error naming `name`). `sr` seeds Q-Root's stochastic rounding. control supplies clip_coef and
  // skip; stats and fault are device pointers.
  void queue_update(const float* g, const float* m, int64_t rows, int64_t cols, const RootOptions& opt,
                    const std::string& name, RngStream sr, const StepControl* control, RootDeviceStats* stats,
                    cudaStream_t stream, NsTrace* trace = nullptr);
  void queue_commit(float* w, bf16* w_bf16, float* m, int64_t rows, int64_t cols, float lr,
                    float weight_decay, const RootOptions& opt, const std::string& name, int index,
                    StepControl* control, RootDeviceStats* stats, RootFault* fault, cudaStream_t stream);

 private:
  void check_fits(int64_t rows, int64_t cols, const std::string& name) const;  // fp4::Error if not

  int64_t max_numel_;
  NewtonSchulzCuda ns_;
  DeviceBuffer<float> m_new_, u_;
  DeviceBuffer<uint32_t> keys_, sorted_;
  DeviceBuffer<uint8_t> sort_temp_;
};

}  // namespace fp4::cuda
