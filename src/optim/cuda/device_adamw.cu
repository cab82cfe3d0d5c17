#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optim/adamw.h"
#include "optim/cuda/device_adamw.h"

namespace fp4::cuda {

DeviceAdamW::DeviceAdamW(const DeviceParams& params, cudaStream_t stream)
    : stream_(stream), control_(1), shard_{0, params.numel()} {
  build(params);
}

// Chunks, decay flags and moments for the parameter pieces inside shard_ (offsets relative to it).
void DeviceAdamW::build(const DeviceParams& params) {
  std::vector<int64_t> offsets, sizes;
  std::vector<uint8_t> flags;
  piece_param_.clear();
  n_all_params_ = params.size();
  for (int i = 0; i < params.size(); ++i) {
    const int64_t lo = std::max(params.at(i).offset, shard_.begin);
    const int64_t hi = std::min(params.at(i).offset + params.at(i).info.numel(), shard_.end);
    if (lo >= hi && !(shard_.begin == 0 && shard_.end == params.numel())) continue;
    offsets.push_back(lo - shard_.begin);
    sizes.push_back(std::max<int64_t>(hi - lo, 0));
    flags.push_back(params.at(i).info.weight_decay ? 1 : 0);
    piece_param_.push_back(i);
  }
  n_params_ = static_cast<int>(piece_param_.size());
  std::vector<int32_t> first;
  const std::vector<ParamChunk> chunks = make_param_chunks(offsets, sizes, first);
  n_chunks_ = static_cast<int>(chunks.size());
  m_ = DeviceBuffer<float>(static_cast<size_t>(shard_.size()));
  v_ = DeviceBuffer<float>(static_cast<size_t>(shard_.size()));
  param_sumsq_ = DeviceBuffer<double>(std::max<size_t>(piece_param_.size(), 1));
  chunks_ = DeviceBuffer<ParamChunk>(std::max<size_t>(chunks.size(), 1));
  first_chunk_ = DeviceBuffer<int32_t>(first.size());
  decay_flags_ = DeviceBuffer<uint8_t>(std::max<size_t>(flags.size(), 1));
  chunk_partials_ = DeviceBuffer<double>(std::max<size_t>(chunks.size(), 1));
  if (!chunks.empty())
    copy_to_device(chunks_.data(), chunks.data(), chunks.size() * sizeof(ParamChunk), stream_);
  copy_to_device(first_chunk_.data(), first.data(), first.size() * sizeof(int32_t), stream_);
  if (!flags.empty()) copy_to_device(decay_flags_.data(), flags.data(), flags.size(), stream_);
  if (m_.size() > 0) {
    FP4_CUDA_CHECK(cudaMemsetAsync(m_.data(), 0, m_.bytes(), stream_));
    FP4_CUDA_CHECK(cudaMemsetAsync(v_.data(), 0, v_.bytes(), stream_));
  }
}

void DeviceAdamW::set_shard(const DeviceParams& params, IndexRange shard, Communicator* comm) {
  FP4_CHECK(step_ == 0, "AdamW: the shard must be set before the first step");
  FP4_CHECK(shard.begin >= 0 && shard.begin <= shard.end && shard.end <= params.numel(), "AdamW: shard [",
            shard.begin, ", ", shard.end, ") is outside the ", params.numel(), " parameters");
  FP4_CHECK(comm != nullptr && comm->device_memory(), "AdamW: a sharded step needs a device communicator");
  shard_ = shard;
  comm_ = comm;
  dp_scalars_ = DeviceBuffer<double>(2);
  build(params);
}

void DeviceAdamW::set_step_count(int64_t step) {
  FP4_CHECK(step >= 0, "AdamW: negative step count ", step);
  step_ = step;
}

void DeviceAdamW::queue_step(DeviceParams& params, const StepHyper& h, const double* loss_sums) {
  check_adamw_hyper(h);
  const int64_t b = shard_.begin;
  if (comm_) {
    // This rank's sums of squares, then the job's norm and non-finite flag, then the clipping factor.
    grad_norm_and_clip(params.grads() + b, chunks_.data(), n_chunks_, first_chunk_.data(), n_params_,
                       chunk_partials_.data(), param_sumsq_.data(), loss_sums, 0.0f, control_.data(),
                       stream_);
    all_reduce_norm_and_clip(param_sumsq_.data(), n_params_, dp_scalars_.data(), h.grad_clip, control_.data(),
                             *comm_, stream_);
  } else {
    grad_norm_and_clip(params.grads(), chunks_.data(), n_chunks_, first_chunk_.data(), n_params_,
                       chunk_partials_.data(), param_sumsq_.data(), loss_sums, h.grad_clip, control_.data(),
                       stream_);
  }
  const int64_t step = step_ + 1;
  const cpu::AdamWArgs args = adamw_args(h, step);  // weight decay per parameter: decay_flags_
  if (n_chunks_ > 0)
    adamw_step(params.values() + b, m_.data(), v_.data(), params.grads() + b, params.values_bf16() + b,
               chunks_.data(), n_chunks_, decay_flags_.data(), args, control_.data(), stream_);
}

void DeviceAdamW::queue_norm(const DeviceParams& params, const double* loss_sums) {
  FP4_CHECK(comm_ == nullptr, "AdamW: queue_norm (GradientProbe) is not available with data parallelism");
  grad_norm_and_clip(params.grads(), chunks_.data(), n_chunks_, first_chunk_.data(), n_params_,
                     chunk_partials_.data(), param_sumsq_.data(), loss_sums, 0.0f, control_.data(), stream_);
}

StepControl DeviceAdamW::read_control(std::vector<double>& param_sumsq) const {
  StepControl ctl;
  std::vector<double> pieces(piece_param_.size());
  if (!pieces.empty())
    FP4_CUDA_CHECK(cudaMemcpyAsync(pieces.data(), param_sumsq_.data(), pieces.size() * sizeof(double),
                                   cudaMemcpyDeviceToHost, stream_));
  copy_to_host(&ctl, control_.data(), sizeof(ctl), stream_);
  param_sumsq.assign(static_cast<size_t>(n_all_params_), 0.0);
  for (size_t k = 0; k < pieces.size(); ++k) param_sumsq[static_cast<size_t>(piece_param_[k])] += pieces[k];
  return ctl;
}

void DeviceAdamW::read_moment(int which, const Parameter& p, std::span<float> out) const {
  FP4_CHECK(comm_ == nullptr, "AdamW moment of ", p.info.name, ": sharded moments are read with moment()");
  FP4_CHECK(static_cast<int64_t>(out.size()) == p.info.numel(), "AdamW moment of ", p.info.name,
            ": buffer of ", out.size(), " floats, need ", p.info.numel());
  const float* src = (which == 0 ? m_.data() : v_.data()) + p.offset;
  copy_to_host(out.data(), src, out.size_bytes(), stream_);
}

void DeviceAdamW::write_moment(int which, const Parameter& p, std::span<const float> in) {
  FP4_CHECK(static_cast<int64_t>(in.size()) == p.info.numel(), "AdamW moment of ", p.info.name, ": ",
            in.size(), " floats given, need ", p.info.numel());
  const int64_t lo = std::max(p.offset, shard_.begin);
  const int64_t hi = std::min(p.offset + p.info.numel(), shard_.end);
  if (lo >= hi) return;
  float* dst = (which == 0 ? m_.data() : v_.data()) + (lo - shard_.begin);
  copy_to_device(dst, in.data() + (lo - p.offset), static_cast<size_t>(hi - lo) * sizeof(float), stream_);
}

void DeviceAdamW::reset_moments(std::span<const IndexRange> ranges) {
  for (const IndexRange& r : ranges) {
    const int64_t lo = std::max(r.begin, shard_.begin), hi = std::min(r.end, shard_.end);
    if (lo >= hi) continue;
    const auto bytes = static_cast<size_t>(hi - lo) * sizeof(float);
    FP4_CUDA_CHECK(cudaMemsetAsync(m_.data() + (lo - shard_.begin), 0, bytes, stream_));
    FP4_CUDA_CHECK(cudaMemsetAsync(v_.data() + (lo - shard_.begin), 0, bytes, stream_));
  }
}

}  // namespace fp4::cuda
