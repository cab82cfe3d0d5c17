#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <iterator>

#include "core/error.h"
#include "core/state_tensor.h"
#include "optim/adamw.h"
#include "optim/cuda/device_root.h"
#include "optim/root_optimizer.h"

namespace fp4::cuda {

DeviceRoot::Lane::Lane(int64_t max_numel, NsPrecision precision, bool own_stream)
    : step(max_numel, precision),
      own(own_stream ? std::make_unique<Stream>(cudaStreamNonBlocking, 0) : nullptr) {}

DeviceRoot::DeviceRoot(const DeviceParams& params, cudaStream_t stream, uint64_t seed, NsPrecision precision,
                       RootOptions opt, int lanes)
    : stream_(stream),
      seed_(seed),
      opt_(opt),
      n_params_(params.size()),
      shard_{0, params.numel()},
      control_(1),
      fault_(1) {
  opt_.precision = precision;
  FP4_CHECK(lanes >= 1, name(), " (CUDA): lanes must be >= 1, got ", lanes);
  n_lanes_ = lanes;
  check_root_options(opt_, "optimizer '" + name() + "' (CUDA)");
  FP4_CHECK(n_params_ > 0, name(), " (CUDA): no parameters");
  for (int i = 0; i < n_params_; ++i) {
    const Parameter& p = params.at(i);
    names_.push_back(p.info.name);
    param_offset_.push_back(p.offset);
    param_numel_.push_back(p.info.numel());
  }
  build(params);
  if (opt_.rest == RootRest::kQAdamW)
    qadam_ = std::make_unique<DeviceQAdamW>(params, stream, seed, std::not_fn(root_eligible));
}

// The matrices, AdamW parameters, norm chunks and moments of the parameters inside shard_ (every parameter
// when not sharded), which must hold whole tensors.
void DeviceRoot::build(const DeviceParams& params) {
  roots_.clear();
  adams_.clear();
  piece_param_.clear();
  std::vector<int64_t> offsets, sizes, adam_sizes;
  std::vector<uint8_t> decay;
  int64_t root_numel = 0, adam_numel = 0, largest = 0;
  for (int i = 0; i < n_params_; ++i) {
    const Parameter& p = params.at(i);
    const int64_t end = p.offset + p.info.numel();
    const bool mine = p.offset >= shard_.begin && end <= shard_.end;
    FP4_CHECK(mine || end <= shard_.begin || p.offset >= shard_.end, "optimizer '", name(),
              "' (CUDA): the shard [", shard_.begin, ", ", shard_.end, ") of rank ",
              comm_ ? comm_->rank() : 0, " cuts parameter ", p.info.name, " [", p.offset, ", ", end,
              "); this optimizer needs shards of whole tensors");
    if (!mine) continue;
    piece_param_.push_back(i);
    offsets.push_back(p.offset);
    sizes.push_back(p.info.numel());
    if (root_eligible(p.info)) {
      roots_.push_back(Matrix{i, p.info.shape[0], p.info.shape[1], root_numel});
      root_numel += p.info.numel();
      largest = std::max(largest, p.info.numel());
    } else {
      adams_.push_back(AdamPart{i, adam_numel});
      if (opt_.rest == RootRest::kQAdamW) continue;  // DeviceQAdamW keeps its moments (and its chunks)
      adam_numel += p.info.numel();
      adam_sizes.push_back(p.info.numel());
      decay.push_back(p.info.weight_decay ? 1 : 0);
    }
  }
  // Norm and clipping over this rank's parameters (every parameter when alone), as the engines clip.
  std::vector<int32_t> first;
  const std::vector<ParamChunk> chunks = make_param_chunks(offsets, sizes, first);
  n_chunks_ = static_cast<int>(chunks.size());
  chunks_ = DeviceBuffer<ParamChunk>(std::max<size_t>(chunks.size(), 1));
  if (!chunks.empty())
    copy_to_device(chunks_.data(), chunks.data(), chunks.size() * sizeof(ParamChunk), stream_);
  first_chunk_ = DeviceBuffer<int32_t>(first.size());
  copy_to_device(first_chunk_.data(), first.data(), first.size() * sizeof(int32_t), stream_);
  chunk_partials_ = DeviceBuffer<double>(std::max<size_t>(chunks.size(), 1));
  param_sumsq_ = DeviceBuffer<double>(std::max<size_t>(piece_param_.size(), 1));

  // AdamW parameter j is launched alone: its chunks start at 0 (relative to its value, gradient and
  // moments), and chunk.param = j picks its decay flag.
  const std::vector<int64_t> zero(adam_sizes.size(), 0);
  std::vector<ParamChunk> achunks = make_param_chunks(zero, adam_sizes, adam_first_);
  adam_chunks_ = DeviceBuffer<ParamChunk>(std::max<size_t>(achunks.size(), 1));
  if (!achunks.empty())
    copy_to_device(adam_chunks_.data(), achunks.data(), achunks.size() * sizeof(ParamChunk), stream_);
  adam_decay_ = DeviceBuffer<uint8_t>(std::max<size_t>(decay.size(), 1));
  if (!decay.empty()) copy_to_device(adam_decay_.data(), decay.data(), decay.size(), stream_);

  m_ = DeviceBuffer<float>(static_cast<size_t>(root_numel));
  am_ = DeviceBuffer<float>(static_cast<size_t>(adam_numel));
  av_ = DeviceBuffer<float>(static_cast<size_t>(adam_numel));
  for (DeviceBuffer<float>* b : {&m_, &am_, &av_})
    if (b->size() > 0) FP4_CUDA_CHECK(cudaMemsetAsync(b->data(), 0, b->bytes(), stream_));
  stats_ = DeviceBuffer<RootDeviceStats>(std::max<size_t>(roots_.size(), 1));
  FP4_CUDA_CHECK(cudaMemsetAsync(stats_.data(), 0, stats_.bytes(), stream_));
  FP4_CUDA_CHECK(cudaMemsetAsync(fault_.data(), 0, fault_.bytes(), stream_));
  lanes_.clear();
  const size_t n_lanes = std::min(static_cast<size_t>(n_lanes_), roots_.size());
  for (size_t l = 0; l < n_lanes; ++l)
    lanes_.push_back(std::make_unique<Lane>(largest, opt_.precision, l > 0));
}

void DeviceRoot::set_shard(const DeviceParams& params, const std::vector<IndexRange>& shards,
                           Communicator* comm) {
  FP4_CHECK(step_ == 0, name(), " (CUDA): the shard must be set before the first step");
  FP4_CHECK(comm != nullptr && comm->device_memory(), name(), " (CUDA): a sharded step needs a device ",
            "communicator");
  FP4_CHECK(static_cast<int>(shards.size()) == comm->world_size(), name(), " (CUDA): ", shards.size(),
            " shards for ", comm->world_size(), " ranks");
  FP4_CHECK(params.size() == n_params_, name(), " (CUDA) set_shard: built for ", n_params_,
            " parameters, given ", params.size());
  comm_ = comm;
  shards_ = shards;
  shard_ = shards[static_cast<size_t>(comm->rank())];
  dp_scalars_ = DeviceBuffer<double>(2);
  build(params);
  if (qadam_) qadam_->set_shard(params, shards, comm);
}

void DeviceRoot::reset_moments(std::span<const IndexRange> ranges) {
  // Zeroes the part of [begin, begin + n) of the flat parameter buffer that a range covers, in `dst`
  // buffers holding that parameter from `dst_offset`.
  auto zero = [&](const IndexRange& r, int64_t begin, int64_t n, std::initializer_list<float*> dst) {
    const int64_t lo = std::max(r.begin, begin), hi = std::min(r.end, begin + n);
    if (lo >= hi) return;
    for (float* d : dst)
      FP4_CUDA_CHECK(
          cudaMemsetAsync(d + (lo - begin), 0, static_cast<size_t>(hi - lo) * sizeof(float), stream_));
  };
  for (const IndexRange& r : ranges) {
    for (const Matrix& mat : roots_)
      zero(r, param_offset_[static_cast<size_t>(mat.param)], mat.rows * mat.cols, {m_.data() + mat.offset});
    for (const AdamPart& a : adams_) {
      const auto k = static_cast<size_t>(a.param);
      const int64_t lo = std::max(r.begin, param_offset_[k]),
                    hi = std::min(r.end, param_offset_[k] + param_numel_[k]);
      FP4_CHECK(!qadam_ || lo >= hi, name(), " (CUDA): cannot zero the moments of ", names_[k],
                " (elements [", lo - param_offset_[k], ", ", hi - param_offset_[k],
                ")): its Q-AdamW moments are packed in ", "128-element tiles");
      zero(r, param_offset_[k], param_numel_[k], {am_.data() + a.offset, av_.data() + a.offset});
    }
  }
}

void DeviceRoot::queue_step(DeviceParams& params, const StepHyper& h, const double* loss_sums) {
  FP4_CHECK(params.size() == n_params_, name(), " (CUDA) step: built for ", n_params_, " parameters, given ",
            params.size());
  check_adamw_hyper(h);  // lr and weight decay are shared; betas and eps matter to the AdamW part only
  FP4_CUDA_CHECK(cudaMemsetAsync(stats_.data(), 0, stats_.bytes(), stream_));
  FP4_CUDA_CHECK(cudaMemsetAsync(fault_.data(), 0, fault_.bytes(), stream_));
  const int pieces = static_cast<int>(piece_param_.size());
  if (comm_) {  // this rank's sums of squares, then the job's norm, non-finite flag and clipping factor
    grad_norm_and_clip(params.grads(), chunks_.data(), n_chunks_, first_chunk_.data(), pieces,
                       chunk_partials_.data(), param_sumsq_.data(), loss_sums, 0.0f, control_.data(),
                       stream_);
    all_reduce_norm_and_clip(param_sumsq_.data(), pieces, dp_scalars_.data(), h.grad_clip, control_.data(),
                             *comm_, stream_);
  } else {
    grad_norm_and_clip(params.grads(), chunks_.data(), n_chunks_, first_chunk_.data(), pieces,
                       chunk_partials_.data(), param_sumsq_.data(), loss_sums, h.grad_clip, control_.data(),
                       stream_);
  }
  // Lanes start after the clipping factor; matrix k's check waits for matrix k - 1's (on another lane), so
  // control->skip and the fault see the matrices in order; stream_ goes on after every lane.
  FP4_CUDA_CHECK(cudaEventRecord(fork_.get(), stream_));
  for (size_t l = 1; l < lanes_.size(); ++l)
    FP4_CUDA_CHECK(cudaStreamWaitEvent(lanes_[l]->stream(stream_), fork_.get(), 0));
  for (size_t k = 0; k < roots_.size(); ++k) {
    const Matrix& mx = roots_[k];
    const Parameter& p = params.at(mx.param);
    Lane& lane = *lanes_[k % lanes_.size()];
    const cudaStream_t s = lane.stream(stream_);
    const float wd = p.info.weight_decay ? h.weight_decay : 0.0f;
    // RootMatrix's SR stream: (seed, parameter index, the matrix's step count before this step).
    const RngStream sr{seed_,
                       make_stream(static_cast<uint32_t>(mx.param), static_cast<uint32_t>(step_), 0x52)};
    NsTrace* trace = static_cast<int>(k) == trace_k_ ? trace_ : nullptr;
    lane.step.queue_update(params.grad(mx.param), m_.data() + mx.offset, mx.rows, mx.cols, opt_, p.info.name,
                           sr, control_.data(), stats_.data() + k, s, trace);
    if (k > 0 && lanes_.size() > 1)
      FP4_CUDA_CHECK(cudaStreamWaitEvent(s, lanes_[(k - 1) % lanes_.size()]->checked.get(), 0));
    lane.step.queue_commit(params.value(mx.param), params.values_bf16() + p.offset, m_.data() + mx.offset,
                           mx.rows, mx.cols, h.lr, wd, opt_, p.info.name, static_cast<int>(k),
                           control_.data(), stats_.data() + k, fault_.data(), s);
    if (lanes_.size() > 1) FP4_CUDA_CHECK(cudaEventRecord(lane.checked.get(), s));
  }
  for (size_t l = 1; l < lanes_.size(); ++l)
    stream_after(stream_, lanes_[l]->stream(stream_), lanes_[l]->done);
  trace_k_ = -1;
  trace_ = nullptr;
  if (qadam_) {  // the clipping factor and skip flag are this optimizer's, over every parameter
    qadam_->queue_update(params, h, control_.data());
    return;
  }
  const cpu::AdamWArgs args = adamw_args(h, adam_step_ + 1);  // weight decay per parameter: adam_decay_
  for (size_t j = 0; j < adams_.size(); ++j) {
    const Parameter& p = params.at(adams_[j].param);
    const int32_t c0 = adam_first_[j], c1 = adam_first_[j + 1];
    adamw_step(params.values() + p.offset, am_.data() + adams_[j].offset, av_.data() + adams_[j].offset,
               params.grads() + p.offset, params.values_bf16() + p.offset, adam_chunks_.data() + c0, c1 - c0,
               adam_decay_.data(), args, control_.data(), stream_);
  }
}

void DeviceRoot::commit_step() {
  ++step_;
  ++adam_step_;
  if (qadam_) qadam_->commit_step();
}

void DeviceRoot::queue_norm(const DeviceParams& params, const double* loss_sums) {
  FP4_CHECK(comm_ == nullptr, name(), " (CUDA): queue_norm (GradientProbe) is not available with data ",
            "parallelism");
  FP4_CUDA_CHECK(cudaMemsetAsync(fault_.data(), 0, fault_.bytes(), stream_));  // no update was queued
  grad_norm_and_clip(params.grads(), chunks_.data(), n_chunks_, first_chunk_.data(),
                     static_cast<int>(piece_param_.size()), chunk_partials_.data(), param_sumsq_.data(),
                     loss_sums, 0.0f, control_.data(), stream_);
}

StepControl DeviceRoot::read_control(std::vector<double>& param_sumsq) const {
  std::vector<double> pieces(piece_param_.size());  // this rank's parameters (all of them when alone)
  if (!pieces.empty())
    FP4_CUDA_CHECK(cudaMemcpyAsync(pieces.data(), param_sumsq_.data(), pieces.size() * sizeof(double),
                                   cudaMemcpyDeviceToHost, stream_));
  RootFault fault;
  FP4_CUDA_CHECK(cudaMemcpyAsync(&fault, fault_.data(), sizeof(fault), cudaMemcpyDeviceToHost, stream_));
  StepControl ctl;
  copy_to_host(&ctl, control_.data(), sizeof(ctl), stream_);
  param_sumsq.assign(static_cast<size_t>(n_params_), 0.0);
  for (size_t k = 0; k < pieces.size(); ++k) param_sumsq[static_cast<size_t>(piece_param_[k])] = pieces[k];
  if (fault.kind != kRootNoFault) {
    const auto k = static_cast<size_t>(fault.matrix);
    FP4_CHECK(k < roots_.size(), name(), " (CUDA): a fault names matrix ", fault.matrix, " of ",
              roots_.size());
    const Matrix& mx = roots_[k];
    const std::string& who = names_[static_cast<size_t>(mx.param)];
    const std::string left =
        "; this matrix, the ones after it and the embedding, head and gains were left unchanged";
    if (fault.kind == kRootNonFiniteNsInput)
      FP4_THROW(who, ": ROOT's Newton-Schulz input [", mx.rows, " x ", mx.cols,
                "] has non-finite values (sum of squares ", fault.value, ")", left);
    FP4_THROW(who, ": ROOT's Newton-Schulz diverged (|X|_F^2 = ", fault.value, " for a [", mx.rows, " x ",
              mx.cols, "] matrix, expected about ", std::min(mx.rows, mx.cols),
              "); use coefficients stable at this precision", left);
  }
  if (qadam_) qadam_->check_fault();
  return ctl;
}

std::vector<StateTensor> DeviceRoot::save_state(const DeviceParams& params) const {
  FP4_CHECK(params.size() == n_params_, name(), " (CUDA) save_state: ", params.size(),
            " parameters, the state has ", n_params_);
  // Where this rank keeps parameter i's first moment (ROOT's momentum or AdamW's m) and AdamW's v; null
  // for parameters of other ranks.
  std::vector<const float*> first(static_cast<size_t>(n_params_), nullptr), second(first.size(), nullptr);
  for (const Matrix& mx : roots_) first[static_cast<size_t>(mx.param)] = m_.data() + mx.offset;
  for (const AdamPart& a : adams_) {
    first[static_cast<size_t>(a.param)] = am_.data() + a.offset;
    second[static_cast<size_t>(a.param)] = av_.data() + a.offset;
  }
  // With data parallelism each tensor comes from its owner rank: broadcast through a scratch buffer of the
  // largest tensor (collective: every rank makes the same calls in parameter order).
  DeviceBuffer<float> scratch;
  if (comm_)
    scratch =
        DeviceBuffer<float>(static_cast<size_t>(*std::max_element(param_numel_.begin(), param_numel_.end())));
  auto tensor = [&](std::string tname, const ParameterInfo& info, int i, const float* src) {
    StateTensor t{std::move(tname), "F32", info.shape,
                  std::vector<uint8_t>(static_cast<size_t>(info.numel()) * 4)};
    if (t.bytes.empty()) return t;
    if (comm_) {
      std::vector<IndexRange> from(shards_.size(), IndexRange{0, 0});
      from[static_cast<size_t>(owner(i))] = IndexRange{0, info.numel()};
      if (src)
        FP4_CUDA_CHECK(
            cudaMemcpyAsync(scratch.data(), src, t.bytes.size(), cudaMemcpyDeviceToDevice, stream_));
      comm_->all_gather(scratch.data(), from, stream_);
      src = scratch.data();
    }
    copy_to_host(t.bytes.data(), src, t.bytes.size(), stream_);
    return t;
  };
  std::vector<StateTensor> out;
  for (int i = 0; i < n_params_; ++i) {
    const ParameterInfo& info = params.at(i).info;
    if (root_eligible(info))
      out.push_back(tensor(kRootMomentPrefix + info.name, info, i, first[static_cast<size_t>(i)]));
  }
  StateTensor step{kRootStepName, "I64", {1}, std::vector<uint8_t>(8)};
  std::memcpy(step.bytes.data(), &step_, 8);
  out.push_back(std::move(step));
  if (qadam_) {  // Q-AdamW's own tensors and gather (collective)
    std::vector<StateTensor> rest = qadam_->save_state(params);
    std::move(rest.begin(), rest.end(), std::back_inserter(out));
    return out;
  }
  for (int i = 0; i < n_params_; ++i) {
    const ParameterInfo& info = params.at(i).info;
    if (root_eligible(info)) continue;
    out.push_back(tensor(kAdamMomentPrefix[0] + info.name, info, i, first[static_cast<size_t>(i)]));
    out.push_back(tensor(kAdamMomentPrefix[1] + info.name, info, i, second[static_cast<size_t>(i)]));
  }
  out.push_back(adam_step_tensor(adam_step_));
  return out;
}

int DeviceRoot::owner(int param) const {
  const int64_t begin = param_offset_[static_cast<size_t>(param)];
  const int64_t end = begin + param_numel_[static_cast<size_t>(param)];
  for (size_t q = 0; q < shards_.size(); ++q)
    if (begin >= shards_[q].begin && end <= shards_[q].end && shards_[q].size() > 0)
      return static_cast<int>(q);
  FP4_THROW(name(), " (CUDA): no rank holds parameter ", names_[static_cast<size_t>(param)]);
}

// Whatever world size wrote the state, this rank keeps the state of its own tensors.
void DeviceRoot::load_state(const StateIndex& index, const DeviceParams& params) {
  FP4_CHECK(params.size() == n_params_, name(), " (CUDA) load_state: ", params.size(),
            " parameters, the state has ", n_params_);
  FP4_CHECK(index.has(kRootStepName), "load_state: the state has no '", kRootStepName,
            "' (it was written by ", index.has("qadamw.step") ? "q-adamw" : "another optimizer",
            "), but this run's optimizer is ", name(),
            " (recipe field 'optimizer'); resume with the optimizer that wrote it");
  // Every tensor, of every rank's parameters, checked before anything changes.
  int64_t step = 0;
  std::memcpy(&step, index.require(kRootStepName, "I64", {1}).bytes.data(), 8);
  FP4_CHECK(step >= 0, "load_state: '", kRootStepName, "' is negative (", step, ")");
  std::vector<ParameterInfo> all_adam;
  for (int i = 0; i < n_params_; ++i) {
    const ParameterInfo& info = params.at(i).info;
    if (root_eligible(info))
      (void)index.require(kRootMomentPrefix + info.name, "F32", info.shape);
    else
      all_adam.push_back(info);
  }
  check_root_rest_state(index, opt_.rest, name());
  AdamState adam;
  if (qadam_) {
    qadam_->load_state(index, params);  // checks every tensor it needs before it changes anything
  } else {
    (void)find_adam_state(index, all_adam);
    std::vector<ParameterInfo> adam_infos;  // this rank's
    for (const AdamPart& a : adams_) adam_infos.push_back(params.at(a.param).info);
    adam = find_adam_state(index, adam_infos);
  }

  for (const Matrix& mx : roots_) {
    const ParameterInfo& info = params.at(mx.param).info;
    const StateTensor& m = index.require(kRootMomentPrefix + info.name, "F32", info.shape);
    copy_to_device(m_.data() + mx.offset, m.bytes.data(), m.bytes.size(), stream_);
  }
  for (size_t j = 0; !qadam_ && j < adams_.size(); ++j) {
    copy_to_device(am_.data() + adams_[j].offset, adam.m[j]->bytes.data(), adam.m[j]->bytes.size(), stream_);
    copy_to_device(av_.data() + adams_[j].offset, adam.v[j]->bytes.data(), adam.v[j]->bytes.size(), stream_);
  }
  step_ = step;
  adam_step_ = qadam_ ? qadam_->step_count() : adam.step;
}

int64_t DeviceRoot::state_bytes() const {
  return static_cast<int64_t>(m_.bytes() + am_.bytes() + av_.bytes()) + (qadam_ ? qadam_->state_bytes() : 0);
}

std::vector<std::string> DeviceRoot::root_parameters() const {
  std::vector<std::string> out;
  for (const Matrix& mx : roots_) out.push_back(names_[static_cast<size_t>(mx.param)]);
  return out;
}

std::vector<std::string> DeviceRoot::adamw_parameters() const {
  std::vector<std::string> out;
  for (const AdamPart& a : adams_) out.push_back(names_[static_cast<size_t>(a.param)]);
  return out;
}

void DeviceRoot::read_momentum(int k, std::span<float> out) const {
  FP4_CHECK(k >= 0 && static_cast<size_t>(k) < roots_.size(), name(), " (CUDA): no ROOT matrix ", k);
  const Matrix& mx = roots_[static_cast<size_t>(k)];
  FP4_CHECK(static_cast<int64_t>(out.size()) == mx.rows * mx.cols, name(), " (CUDA): momentum of ",
            names_[static_cast<size_t>(mx.param)], " needs ", mx.rows * mx.cols, " floats, got ", out.size());
  copy_to_host(out.data(), m_.data() + mx.offset, out.size_bytes(), stream_);
}

std::vector<RootStepInfo> DeviceRoot::last_step_info() const {
  std::vector<RootDeviceStats> stats(roots_.size());
  if (!stats.empty())
    copy_to_host(stats.data(), stats_.data(), stats.size() * sizeof(RootDeviceStats), stream_);
  std::vector<RootStepInfo> out(stats.size());
  for (size_t k = 0; k < stats.size(); ++k) {
    out[k].clip_eps = stats[k].clip_eps;
    out[k].clipped = static_cast<int64_t>(stats[k].clipped);
  }
  return out;
}

void DeviceRoot::trace_ns(int k, NsTrace* out) {
  FP4_CHECK(k >= 0 && static_cast<size_t>(k) < roots_.size(), name(), " (CUDA): no ROOT matrix ", k);
  trace_k_ = k;
  trace_ = out;
}

}  // namespace fp4::cuda
