#include <cstring>

#include "core/error.h"
#include "optim/adamw.h"
#include "optim/cuda/device_q_adamw.h"
#include "optim/q_adamw.h"
#include "optim/q_adamw_keys.h"
#include "optim/q_adamw_state.h"

namespace fp4::cuda {

DeviceQAdamW::DeviceQAdamW(const DeviceParams& params, cudaStream_t stream, uint64_t seed)
    : stream_(stream), seed_(seed), n_params_(params.size()), control_(1) {
  FP4_CHECK(n_params_ > 0, "q-adamw (CUDA): no parameters");
  std::vector<int64_t> offsets, sizes;
  for (int i = 0; i < n_params_; ++i) {
    const Parameter& p = params.at(i);
    QAdamTensor t;
    t.offset = p.offset;
    t.numel = p.info.numel();
    t.first_tile = tiles_;
    t.decay = p.info.weight_decay ? 1 : 0;
    FP4_CHECK(t.numel > 0, "q-adamw (CUDA): parameter ", p.info.name, " is empty");
    tiles_ += q_adamw_tiles(t.numel);
    host_tensors_.push_back(t);
    names_.push_back(p.info.name);
    offsets.push_back(p.offset);
    sizes.push_back(t.numel);
  }
  tensors_ = DeviceBuffer<QAdamTensor>(host_tensors_.size());
  copy_to_device(tensors_.data(), host_tensors_.data(), host_tensors_.size() * sizeof(QAdamTensor), stream_);
  for (int k = 0; k < 2; ++k) {
    codes_[k] = DeviceBuffer<uint8_t>(static_cast<size_t>(tiles_ * kQAdamCodeBytes));
    scales_[k] = DeviceBuffer<uint8_t>(static_cast<size_t>(tiles_ * kQAdamScaleBytes));
    scale_[k] = DeviceBuffer<float>(2 * static_cast<size_t>(n_params_));
  }
  mean_ = DeviceBuffer<uint16_t>(static_cast<size_t>(tiles_));
  amax_ = DeviceBuffer<float>(2 * static_cast<size_t>(n_params_));
  fault_ = DeviceBuffer<uint32_t>(1);
  FP4_CUDA_CHECK(cudaMemsetAsync(fault_.data(), 0xFF, sizeof(uint32_t), stream_));

  std::vector<int32_t> first;
  const std::vector<ParamChunk> chunks = make_param_chunks(offsets, sizes, first);
  n_chunks_ = static_cast<int>(chunks.size());
  chunks_ = DeviceBuffer<ParamChunk>(chunks.size());
  copy_to_device(chunks_.data(), chunks.data(), chunks.size() * sizeof(ParamChunk), stream_);
  first_chunk_ = DeviceBuffer<int32_t>(first.size());
  copy_to_device(first_chunk_.data(), first.data(), first.size() * sizeof(int32_t), stream_);
  chunk_partials_ = DeviceBuffer<double>(chunks.size());
  param_sumsq_ = DeviceBuffer<double>(static_cast<size_t>(n_params_));

  q_adamw_init(packed(), tensors_.data(), n_params_, tiles_, amax_.data(), stream_);
}

QAdamPacked DeviceQAdamW::packed() {
  QAdamPacked p;
  for (int k = 0; k < 2; ++k) {
    p.codes[k] = codes_[k].data();
    p.scales[k] = scales_[k].data();
    p.scale[k] = scale_[k].data();
  }
  p.mean = mean_.data();
  return p;
}

void DeviceQAdamW::queue_step(DeviceParams& params, const StepHyper& h, const double* loss_sums) {
  check_adamw_hyper(h);
  grad_norm_and_clip(params.grads(), chunks_.data(), n_chunks_, first_chunk_.data(), n_params_,
                     chunk_partials_.data(), param_sumsq_.data(), loss_sums, h.grad_clip, control_.data(),
                     stream_);
  const int64_t step = step_ + 1;
  cpu::AdamWArgs args = adamw_args(h, step);  // weight decay per tensor: QAdamTensor::decay
  args.ratio_bound = q_adamw_ratio_bound(h.beta1, h.beta2, step);
  q_adamw_step(params.values(), params.grads(), params.values_bf16(), packed(), tensors_.data(), n_params_,
               tiles_, q_adamw_step_args(args, seed_, step), control_.data(), amax_.data(), fault_.data(),
               stream_);
}

void DeviceQAdamW::queue_norm(const DeviceParams& params, const double* loss_sums) {
  grad_norm_and_clip(params.grads(), chunks_.data(), n_chunks_, first_chunk_.data(), n_params_,
                     chunk_partials_.data(), param_sumsq_.data(), loss_sums, 0.0f, control_.data(), stream_);
  FP4_CUDA_CHECK(cudaMemsetAsync(fault_.data(), 0xFF, sizeof(uint32_t), stream_));  // no update was queued
}

StepControl DeviceQAdamW::read_control(std::vector<double>& param_sumsq) const {
  param_sumsq.assign(static_cast<size_t>(n_params_), 0.0);
  FP4_CUDA_CHECK(cudaMemcpyAsync(param_sumsq.data(), param_sumsq_.data(), param_sumsq.size() * sizeof(double),
                                 cudaMemcpyDeviceToHost, stream_));
  uint32_t fault = kQAdamNoFault;
  FP4_CUDA_CHECK(cudaMemcpyAsync(&fault, fault_.data(), sizeof(fault), cudaMemcpyDeviceToHost, stream_));
  StepControl ctl;
  copy_to_host(&ctl, control_.data(), sizeof(ctl), stream_);
  if (fault != kQAdamNoFault) {
    const auto param = static_cast<size_t>(fault / 2);
    FP4_THROW(
        "q-adamw (CUDA), step ", step_ + 1, ": the ", fault % 2 == 0 ? "first" : "second",
        " moment of parameter ", param < names_.size() ? names_[param] : std::string("?"),
        " is not finite after the update (or overflows its H16 mixing); the parameters and the moments ",
        "were left unchanged");
  }
  return ctl;
}

DeviceQAdamW::HostState DeviceQAdamW::sized_host_state() const {
  HostState h;
  for (int k = 0; k < 2; ++k) {
    h.codes[k].resize(codes_[k].size());
    h.scales[k].resize(scales_[k].size());
    h.scale[k].resize(scale_[k].size());
  }
  h.mean.resize(static_cast<size_t>(tiles_));
  return h;
}

std::vector<StateTensor> DeviceQAdamW::save_state(const DeviceParams& params) const {
  FP4_CHECK(params.size() == n_params_, "q-adamw (CUDA) save_state: ", params.size(),
            " parameters, the state has ", n_params_);
  HostState h = sized_host_state();
  auto& [codes, scales, scale, mean] = h;
  for (int k = 0; k < 2; ++k) {
    copy_to_host(codes[k].data(), codes_[k].data(), codes_[k].bytes(), stream_);
    copy_to_host(scales[k].data(), scales_[k].data(), scales_[k].bytes(), stream_);
    copy_to_host(scale[k].data(), scale_[k].data(), scale_[k].bytes(), stream_);
  }
  copy_to_host(mean.data(), mean_.data(), mean_.bytes(), stream_);

  auto bytes = [](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    return std::vector<uint8_t>(b, b + n);
  };
  std::vector<StateTensor> out;
  for (int i = 0; i < n_params_; ++i) {
    const QAdamTensor& t = host_tensors_[static_cast<size_t>(i)];
    const std::string& name = params.at(i).info.name;
    const int64_t n = q_adamw_tiles(t.numel);
    for (int k = 0; k < 2; ++k) {
      out.push_back(StateTensor{
          q_adamw_tensor_name(3 * k, name),
          "U8",
          {n, kQAdamCodeBytes},
          bytes(codes[k].data() + t.first_tile * kQAdamCodeBytes, static_cast<size_t>(n * kQAdamCodeBytes))});
      out.push_back(StateTensor{q_adamw_tensor_name(3 * k + 1, name),
                                "U8",
                                {n, kQAdamScaleBytes},
                                bytes(scales[k].data() + t.first_tile * kQAdamScaleBytes,
                                      static_cast<size_t>(n * kQAdamScaleBytes))});
      out.push_back(
          StateTensor{q_adamw_tensor_name(3 * k + 2, name), "F32", {2}, bytes(scale[k].data() + 2 * i, 8)});
    }
    out.push_back(StateTensor{q_adamw_tensor_name(6, name),
                              "BF16",
                              {n},
                              bytes(mean.data() + t.first_tile, static_cast<size_t>(n) * 2)});
  }
  out.push_back(StateTensor{kQAdamStepName, "I64", {1}, bytes(&step_, 8)});
  out.push_back(StateTensor{kQAdamSeedName, "I64", {1}, bytes(&seed_, 8)});
  return out;
}

void DeviceQAdamW::load_state(const StateIndex& index, const DeviceParams& params) {
  FP4_CHECK(params.size() == n_params_, "q-adamw (CUDA) load_state: ", params.size(),
            " parameters, the state has ", n_params_);
  FP4_CHECK(index.has(kQAdamStepName) || !index.has(kAdamStepName),
            "load_state: the state holds AdamW moments ('", kAdamStepName,
            "'), but this run's optimizer is q-adamw (recipe field 'optimizer'); resume with ",
            "the optimizer that wrote it");
  // Every tensor checked before anything changes (QAdamW::load_state's rules).
  std::vector<QAdamStateTensors> found;
  for (int i = 0; i < n_params_; ++i)
    found.push_back(require_q_adamw_tensors(index, params.at(i).info.name,
                                            q_adamw_tiles(host_tensors_[static_cast<size_t>(i)].numel)));
  const QAdamSavedCounters saved = require_q_adamw_counters(index);

  HostState h = sized_host_state();
  auto& [codes, scales, scale, mean] = h;
  for (int i = 0; i < n_params_; ++i) {
    const auto& f = found[static_cast<size_t>(i)];
    const QAdamTensor& t = host_tensors_[static_cast<size_t>(i)];
    for (int k = 0; k < 2; ++k) {
      const auto& c = f[static_cast<size_t>(3 * k)]->bytes;
      const auto& s = f[static_cast<size_t>(3 * k + 1)]->bytes;
      std::memcpy(codes[k].data() + t.first_tile * kQAdamCodeBytes, c.data(), c.size());
      std::memcpy(scales[k].data() + t.first_tile * kQAdamScaleBytes, s.data(), s.size());
      std::memcpy(scale[k].data() + 2 * i, f[static_cast<size_t>(3 * k + 2)]->bytes.data(), 8);
    }
    std::memcpy(mean.data() + t.first_tile, f[6]->bytes.data(), f[6]->bytes.size());
  }
  for (int k = 0; k < 2; ++k) {
    copy_to_device(codes_[k].data(), codes[k].data(), codes[k].size(), stream_);
    copy_to_device(scales_[k].data(), scales[k].data(), scales[k].size(), stream_);
    copy_to_device(scale_[k].data(), scale[k].data(), scale[k].size() * sizeof(float), stream_);
  }
  copy_to_device(mean_.data(), mean.data(), mean.size() * sizeof(uint16_t), stream_);
  step_ = saved.step;
  seed_ = saved.seed;  // a resumed run keeps drawing the SR bits of the run that wrote the state
}

int64_t DeviceQAdamW::state_bytes() const {
  int64_t b = static_cast<int64_t>(mean_.bytes());
  for (int k = 0; k < 2; ++k)
    b += static_cast<int64_t>(codes_[k].bytes() + scales_[k].bytes() + scale_[k].bytes());
  return b;
}

}  // namespace fp4::cuda
