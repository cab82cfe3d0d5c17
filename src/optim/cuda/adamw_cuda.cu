#include <cmath>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "optim/cuda/adamw_cuda.h"

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void chunk_sumsq_kernel(const float* __restrict__ grads, const ParamChunk* __restrict__ chunks,
                                   double* __restrict__ partials) {
  __shared__ double sh[kThreads];
  const ParamChunk c = chunks[blockIdx.x];
  double s = 0.0;
  for (int i = threadIdx.x; i < c.count; i += kThreads) {
    const double g = grads[c.begin + i];
    s += g * g;
  }
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

__global__ void norm_clip_kernel(const double* __restrict__ partials, const int32_t* __restrict__ first_chunk,
                                 int n_params, double* __restrict__ param_sumsq, const double* loss_sums,
                                 float max_norm, StepControl* control) {
  for (int p = threadIdx.x; p < n_params; p += blockDim.x) {
    double s = 0.0;
    for (int c = first_chunk[p]; c < first_chunk[p + 1]; ++c) s += partials[c];
    param_sumsq[p] = s;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0.0;
  for (int p = 0; p < n_params; ++p) total += param_sumsq[p];
  const double norm = sqrt(total);
  StepControl ctl;
  ctl.grad_norm = norm;
  ctl.clip_coef = 1.0f;
  if (max_norm > 0.0f) {
    const double coef = static_cast<double>(max_norm) / (norm + 1e-6);
    if (coef < 1.0) ctl.clip_coef = static_cast<float>(coef);
  }
  ctl.skip = (isfinite(norm) && (loss_sums == nullptr || isfinite(loss_sums[0]))) ? 0 : 1;
  *control = ctl;
}

// The arithmetic of cpu::adamw_update, without FMA contraction, so both give the same bits.
__global__ void adamw_kernel(float* __restrict__ values, float* __restrict__ m, float* __restrict__ v,
                             const float* __restrict__ grads, bf16* __restrict__ values_bf16,
                             const ParamChunk* __restrict__ chunks, const uint8_t* __restrict__ decay_flags,
                             float decay_on, float step_size, float bc2_sqrt, float beta1, float beta2,
                             float one_minus_beta1, float one_minus_beta2, float eps,
                             const StepControl* __restrict__ control) {
  if (control->skip) return;
  const float clip = control->clip_coef;
  const ParamChunk c = chunks[blockIdx.x];
  const float decay = decay_flags[c.param] ? decay_on : 1.0f;
  for (int j = threadIdx.x; j < c.count; j += kThreads) {
    const int64_t i = c.begin + j;
    const float g = clip == 1.0f ? grads[i] : __fmul_rn(grads[i], clip);
    const float mi = __fadd_rn(__fmul_rn(m[i], beta1), __fmul_rn(g, one_minus_beta1));
    const float vi = __fadd_rn(__fmul_rn(v[i], beta2), __fmul_rn(__fmul_rn(g, g), one_minus_beta2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
    const float p = __fsub_rn(__fmul_rn(values[i], decay), __fmul_rn(step_size, __fdiv_rn(mi, denom)));
    m[i] = mi;
    v[i] = vi;
    values[i] = p;
    if (values_bf16 != nullptr) values_bf16[i] = __float2bfloat16_rn(p);
  }
}

// scalars[0] = sum of this rank's piece sums (fixed order), scalars[1] = its non-finite flag.
__global__ void local_norm_kernel(const double* piece_sumsq, int n_pieces, const StepControl* control,
                                  double* scalars) {
  double s = 0;
  for (int i = 0; i < n_pieces; ++i) s += piece_sumsq[i];
  scalars[0] = s;
  scalars[1] = control->skip ? 1.0 : 0.0;
}

// clip_grad_norm's rule over the ranks' summed squares (grad_norm_and_clip's, for a sharded step).
__global__ void global_control_kernel(const double* scalars, float max_norm, StepControl* control) {
  const double norm = sqrt(scalars[0]);
  control->grad_norm = norm;
  control->clip_coef = 1.0f;
  if (max_norm > 0.0f) {
    const double coef = static_cast<double>(max_norm) / (norm + 1e-6);
    if (coef < 1.0) control->clip_coef = static_cast<float>(coef);
  }
  control->skip = scalars[1] > 0 || !isfinite(norm) ? 1 : 0;
}

}  // namespace

std::vector<ParamChunk> make_param_chunks(const std::vector<int64_t>& offsets,
                                          const std::vector<int64_t>& sizes,
                                          std::vector<int32_t>& first_chunk) {
  FP4_CHECK(offsets.size() == sizes.size(), "make_param_chunks: ", offsets.size(), " offsets for ",
            sizes.size(), " sizes");
  std::vector<ParamChunk> chunks;
  first_chunk.assign(1, 0);
  for (size_t p = 0; p < sizes.size(); ++p) {
    for (int64_t done = 0; done < sizes[p]; done += kParamChunkElements) {
      ParamChunk c;
      c.begin = offsets[p] + done;
      c.count = static_cast<int32_t>(std::min<int64_t>(kParamChunkElements, sizes[p] - done));
      c.param = static_cast<int32_t>(p);
      chunks.push_back(c);
    }
    first_chunk.push_back(static_cast<int32_t>(chunks.size()));
  }
  return chunks;
}

void grad_norm_and_clip(const float* grads, const ParamChunk* chunks, int n_chunks,
                        const int32_t* first_chunk, int n_params, double* chunk_partials, double* param_sumsq,
                        const double* loss_sums, float max_norm, StepControl* control, cudaStream_t stream) {
  FP4_CHECK(n_chunks >= 0 && n_params >= 0, "grad_norm_and_clip: negative counts");
  if (n_chunks > 0) {
    chunk_sumsq_kernel<<<n_chunks, kThreads, 0, stream>>>(grads, chunks, chunk_partials);
    FP4_CUDA_CHECK_LAUNCH("chunk_sumsq_kernel");
  }
  norm_clip_kernel<<<1, kThreads, 0, stream>>>(chunk_partials, first_chunk, n_params, param_sumsq, loss_sums,
                                               max_norm, control);
  FP4_CUDA_CHECK_LAUNCH("norm_clip_kernel");
}

void all_reduce_norm_and_clip(const double* param_sumsq, int n_params, double* scalars, float max_norm,
                              StepControl* control, Communicator& comm, cudaStream_t stream) {
  local_norm_kernel<<<1, 1, 0, stream>>>(param_sumsq, n_params, control, scalars);
  FP4_CUDA_CHECK_LAUNCH("local_norm_kernel");
  comm.all_reduce_sum(scalars, 2, CommType::kF64, stream);
  global_control_kernel<<<1, 1, 0, stream>>>(scalars, max_norm, control);
  FP4_CUDA_CHECK_LAUNCH("global_control_kernel");
}

void adamw_step(float* values, float* m, float* v, const float* grads, bf16* values_bf16,
                const ParamChunk* chunks, int n_chunks, const uint8_t* decay_flags, const cpu::AdamWArgs& a,
                const StepControl* control, cudaStream_t stream) {
  if (n_chunks <= 0) return;
  // Host-side constants formed exactly as cpu::adamw_update forms them.
  const float decay_on = 1.0f - a.lr * a.weight_decay;
  const float step_size = a.lr / a.bias_correction1;
  const float bc2_sqrt = std::sqrt(a.bias_correction2);
  adamw_kernel<<<n_chunks, kThreads, 0, stream>>>(values, m, v, grads, values_bf16, chunks, decay_flags,
                                                  decay_on, step_size, bc2_sqrt, a.beta1, a.beta2,
                                                  1.0f - a.beta1, 1.0f - a.beta2, a.eps, control);
  FP4_CUDA_CHECK_LAUNCH("adamw_kernel");
}

}  // namespace fp4::cuda
