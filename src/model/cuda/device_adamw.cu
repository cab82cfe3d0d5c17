#include <cmath>

#include "core/error.h"
#include "model/cuda/device_adamw.h"

namespace fp4::cuda {

DeviceAdamW::DeviceAdamW(const DeviceParams& params, cudaStream_t stream)
    : stream_(stream),
      n_params_(params.size()),
      m_(static_cast<size_t>(params.numel())),
      v_(static_cast<size_t>(params.numel())),
      param_sumsq_(static_cast<size_t>(params.size())),
      control_(1) {
  std::vector<int64_t> offsets, sizes;
  std::vector<uint8_t> flags;
  for (int i = 0; i < params.size(); ++i) {
    offsets.push_back(params.at(i).offset);
    sizes.push_back(params.at(i).info.numel());
    flags.push_back(params.at(i).info.weight_decay ? 1 : 0);
  }
  std::vector<int32_t> first;
  const std::vector<ParamChunk> chunks = make_param_chunks(offsets, sizes, first);
  n_chunks_ = static_cast<int>(chunks.size());
  chunks_ = DeviceBuffer<ParamChunk>(chunks.size());
  first_chunk_ = DeviceBuffer<int32_t>(first.size());
  decay_flags_ = DeviceBuffer<uint8_t>(flags.size());
  chunk_partials_ = DeviceBuffer<double>(chunks.size());
  copy_to_device(chunks_.data(), chunks.data(), chunks.size() * sizeof(ParamChunk), stream_);
  copy_to_device(first_chunk_.data(), first.data(), first.size() * sizeof(int32_t), stream_);
  copy_to_device(decay_flags_.data(), flags.data(), flags.size(), stream_);
  if (m_.size() > 0) {
    FP4_CUDA_CHECK(cudaMemsetAsync(m_.data(), 0, m_.bytes(), stream_));
    FP4_CUDA_CHECK(cudaMemsetAsync(v_.data(), 0, v_.bytes(), stream_));
  }
}

void DeviceAdamW::set_step_count(int64_t step) {
  FP4_CHECK(step >= 0, "AdamW: negative step count ", step);
  step_ = step;
}

void DeviceAdamW::queue_step(DeviceParams& params, const StepHyper& h, const double* loss_sums) {
  FP4_CHECK(std::isfinite(h.lr) && h.lr >= 0.0f, "AdamW: learning rate must be finite and >= 0, got ", h.lr);
  FP4_CHECK(h.beta1 >= 0.0f && h.beta1 < 1.0f, "AdamW: beta1 must be in [0, 1), got ", h.beta1);
  FP4_CHECK(h.beta2 >= 0.0f && h.beta2 < 1.0f, "AdamW: beta2 must be in [0, 1), got ", h.beta2);
  FP4_CHECK(h.eps > 0.0f, "AdamW: eps must be positive, got ", h.eps);
  FP4_CHECK(std::isfinite(h.weight_decay) && h.weight_decay >= 0.0f, "AdamW: weight_decay must be >= 0, got ",
            h.weight_decay);
  grad_norm_and_clip(params.grads(), chunks_.data(), n_chunks_, first_chunk_.data(), n_params_,
                     chunk_partials_.data(), param_sumsq_.data(), loss_sums, h.grad_clip, control_.data(),
                     stream_);
  const int64_t step = step_ + 1;
  cpu::AdamWArgs args{};
  args.lr = h.lr;
  args.beta1 = h.beta1;
  args.beta2 = h.beta2;
  args.eps = h.eps;
  args.weight_decay = h.weight_decay;  // per parameter: decay_flags_
  args.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), step));
  args.bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta2), step));
  adamw_step(params.values(), m_.data(), v_.data(), params.grads(), params.values_bf16(), chunks_.data(),
             n_chunks_, decay_flags_.data(), args, control_.data(), stream_);
}

void DeviceAdamW::queue_norm(const DeviceParams& params, const double* loss_sums) {
  grad_norm_and_clip(params.grads(), chunks_.data(), n_chunks_, first_chunk_.data(), n_params_,
                     chunk_partials_.data(), param_sumsq_.data(), loss_sums, 0.0f, control_.data(), stream_);
}

StepControl DeviceAdamW::read_control(std::vector<double>& param_sumsq) const {
  StepControl ctl;
  param_sumsq.resize(static_cast<size_t>(n_params_));
  FP4_CUDA_CHECK(cudaMemcpyAsync(param_sumsq.data(), param_sumsq_.data(), param_sumsq_.bytes(),
                                 cudaMemcpyDeviceToHost, stream_));
  copy_to_host(&ctl, control_.data(), sizeof(ctl), stream_);
  return ctl;
}

void DeviceAdamW::read_moment(int which, const Parameter& p, std::span<float> out) const {
  FP4_CHECK(static_cast<int64_t>(out.size()) == p.info.numel(), "AdamW moment of ", p.info.name,
            ": buffer of ", out.size(), " floats, need ", p.info.numel());
  const float* src = (which == 0 ? m_.data() : v_.data()) + p.offset;
  copy_to_host(out.data(), src, out.size_bytes(), stream_);
}

void DeviceAdamW::write_moment(int which, const Parameter& p, std::span<const float> in) {
  FP4_CHECK(static_cast<int64_t>(in.size()) == p.info.numel(), "AdamW moment of ", p.info.name, ": ",
            in.size(), " floats given, need ", p.info.numel());
  float* dst = (which == 0 ? m_.data() : v_.data()) + p.offset;
  copy_to_device(dst, in.data(), in.size_bytes(), stream_);
}

}  // namespace fp4::cuda
