#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "optim/adamw.h"
#include "optim/cuda/device_q_adamw.h"
#include "optim/q_adamw.h"
#include "optim/q_adamw_keys.h"
#include "optim/q_adamw_state.h"

namespace fp4::cuda {

namespace {

size_t round8(size_t b) {
  return (b + 7) / 8 * 8;
}

// Byte offsets of the regions of the one-process layout in the buffer save_state gathers through: both
// moments' codes, both moments' block scales, both moments' tensor scales, the tile means.
struct GatherLayout {
  size_t codes[2], scales[2], scale[2], mean, total;
  GatherLayout(int64_t tiles, int tensors) {
    const auto t = static_cast<size_t>(tiles);
    size_t at = 0;
    for (int k = 0; k < 2; ++k, at += t * kQAdamCodeBytes) codes[k] = at;
    for (int k = 0; k < 2; ++k, at += t * kQAdamScaleBytes) scales[k] = at;
    for (int k = 0; k < 2; ++k, at += 2 * sizeof(float) * static_cast<size_t>(tensors)) scale[k] = at;
    mean = at;
    total = round8(at + t * sizeof(uint16_t));
  }
};

void copy_on_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes > 0) FP4_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

}  // namespace

DeviceQAdamW::DeviceQAdamW(const DeviceParams& params, cudaStream_t stream, uint64_t seed,
                           const std::function<bool(const ParameterInfo&)>& select)
    : stream_(stream), seed_(seed), n_params_(params.size()), shard_{0, params.numel()}, control_(1) {
  FP4_CHECK(n_params_ > 0, "q-adamw (CUDA): no parameters");
  for (int i = 0; i < n_params_; ++i) {
    const Parameter& p = params.at(i);
    FP4_CHECK(p.info.numel() > 0, "q-adamw (CUDA): parameter ", p.info.name, " is empty");
    names_.push_back(p.info.name);
    selected_.push_back(!select || select(p.info));
    param_offset_.push_back(p.offset);
    param_numel_.push_back(p.info.numel());
    decay_.push_back(p.info.weight_decay ? 1 : 0);
    full_first_tile_.push_back(full_tiles_);  // the one-process layout holds the selected tensors only
    if (selected_.back()) full_tiles_ += q_adamw_tiles(p.info.numel());
  }
  for (int k = 0; k < 2; ++k) scale_[k] = DeviceBuffer<float>(2 * static_cast<size_t>(n_params_));
  amax_ = DeviceBuffer<float>(2 * static_cast<size_t>(n_params_));
  fault_ = DeviceBuffer<uint32_t>(1);
  FP4_CUDA_CHECK(cudaMemsetAsync(fault_.data(), 0xFF, sizeof(uint32_t), stream_));
  build(pieces_in(shard_, 0));
}

std::vector<QAdamPiece> DeviceQAdamW::pieces_in(IndexRange shard, int rank) const {
  std::vector<QAdamPiece> out;
  int64_t tiles = 0;
  for (int i = 0; i < n_params_; ++i) {
    if (!selected_[static_cast<size_t>(i)]) continue;
    const int64_t off = param_offset_[static_cast<size_t>(i)], n = param_numel_[static_cast<size_t>(i)];
    const int64_t lo = std::max(off, shard.begin) - off, hi = std::min(off + n, shard.end) - off;
    if (lo >= hi) continue;
    const bool cut_lo = lo % kQAdamTileElements != 0, cut_hi = hi != n && hi % kQAdamTileElements != 0;
    FP4_CHECK(!cut_lo && !cut_hi, "q-adamw (CUDA): rank ", rank, "'s shard [", shard.begin, ", ", shard.end,
              ") cuts parameter ", names_[static_cast<size_t>(i)], " (", n, " elements) at element ",
              cut_lo ? lo : hi, "; shard boundaries inside a tensor must fall on its ", kQAdamTileElements,
              "-element tiles (shard alignment 128 and tensor sizes multiple of 128 guarantee it)");
    QAdamPiece pc;
    pc.offset = off + lo;
    pc.numel = hi - lo;
    pc.first_tile = tiles;
    pc.tile0 = lo / kQAdamTileElements;
    pc.param = i;
    pc.decay = decay_[static_cast<size_t>(i)];
    tiles += q_adamw_tiles(pc.numel);
    out.push_back(pc);
  }
  return out;
}

void DeviceQAdamW::build(std::vector<QAdamPiece> pieces) {
  host_pieces_ = std::move(pieces);
  n_pieces_ = static_cast<int>(host_pieces_.size());
  tiles_ = 0;
  std::vector<int64_t> offsets, sizes;
  for (const QAdamPiece& pc : host_pieces_) {
    tiles_ += q_adamw_tiles(pc.numel);
    offsets.push_back(pc.offset);
    sizes.push_back(pc.numel);
  }
  pieces_ = DeviceBuffer<QAdamPiece>(std::max<size_t>(host_pieces_.size(), 1));
  copy_to_device(pieces_.data(), host_pieces_.data(), host_pieces_.size() * sizeof(QAdamPiece), stream_);
  for (int k = 0; k < 2; ++k) {
    codes_[k] = DeviceBuffer<uint8_t>(static_cast<size_t>(tiles_ * kQAdamCodeBytes));
    scales_[k] = DeviceBuffer<uint8_t>(static_cast<size_t>(tiles_ * kQAdamScaleBytes));
  }
  mean_ = DeviceBuffer<uint16_t>(static_cast<size_t>(tiles_));

  // The norm's units are the pieces (on one process: the parameters, as before sharding existed).
  std::vector<int32_t> first;
  const std::vector<ParamChunk> chunks = make_param_chunks(offsets, sizes, first);
  n_chunks_ = static_cast<int>(chunks.size());
  chunks_ = DeviceBuffer<ParamChunk>(std::max<size_t>(chunks.size(), 1));
  copy_to_device(chunks_.data(), chunks.data(), chunks.size() * sizeof(ParamChunk), stream_);
  first_chunk_ = DeviceBuffer<int32_t>(first.size());
  copy_to_device(first_chunk_.data(), first.data(), first.size() * sizeof(int32_t), stream_);
  chunk_partials_ = DeviceBuffer<double>(std::max<size_t>(chunks.size(), 1));
  param_sumsq_ = DeviceBuffer<double>(std::max<size_t>(host_pieces_.size(), 1));

  q_adamw_init(packed(), pieces_.data(), n_pieces_, tiles_, n_params_, amax_.data(), stream_);
}

void DeviceQAdamW::set_shard(const DeviceParams& params, const std::vector<IndexRange>& shards,
                             Communicator* comm) {
  FP4_CHECK(step_ == 0, "q-adamw (CUDA): the shard must be set before the first step");
  FP4_CHECK(comm != nullptr && comm->device_memory(), "q-adamw (CUDA): a sharded step needs a device ",
            "communicator");
  FP4_CHECK(static_cast<int>(shards.size()) == comm->world_size(), "q-adamw (CUDA): ", shards.size(),
            " shards for ", comm->world_size(), " ranks");
  FP4_CHECK(params.size() == n_params_, "q-adamw (CUDA) set_shard: built for ", n_params_,
            " parameters, given ", params.size());
  // Contiguous ranks from 0 to the end: each tile then has exactly one owner, which save_state relies on.
  int64_t at = 0;
  for (size_t q = 0; q < shards.size(); ++q) {
    FP4_CHECK(shards[q].begin == at && shards[q].end >= shards[q].begin, "q-adamw (CUDA): shard ", q, " is [",
              shards[q].begin, ", ", shards[q].end, "), expected it to start at ", at,
              " (the ranks' shards must follow each other from 0)");
    at = shards[q].end;
  }
  FP4_CHECK(at == params.numel(), "q-adamw (CUDA): the shards end at ", at, ", the parameters hold ",
            params.numel());
  const int rank = comm->rank();
  std::vector<QAdamPiece> pieces = pieces_in(shards[static_cast<size_t>(rank)], rank);  // may refuse
  shard_ = shards[static_cast<size_t>(rank)];
  comm_ = comm;
  dp_scalars_ = DeviceBuffer<double>(2);
  amax_slots_ = DeviceBuffer<double>(static_cast<size_t>(comm->world_size()) * (2 * n_params_ + 1));
  build(std::move(pieces));
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
  FP4_CHECK(params.size() == n_params_, "q-adamw (CUDA) step: built for ", n_params_, " parameters, given ",
            params.size());
  check_adamw_hyper(h);
  if (comm_) {
    // This rank's sums of squares, then the job's norm, non-finite flag and clipping factor.
    grad_norm_and_clip(params.grads(), chunks_.data(), n_chunks_, first_chunk_.data(), n_pieces_,
                       chunk_partials_.data(), param_sumsq_.data(), loss_sums, 0.0f, control_.data(),
                       stream_);
    all_reduce_norm_and_clip(param_sumsq_.data(), n_pieces_, dp_scalars_.data(), h.grad_clip, control_.data(),
                             *comm_, stream_);
  } else {
    grad_norm_and_clip(params.grads(), chunks_.data(), n_chunks_, first_chunk_.data(), n_pieces_,
                       chunk_partials_.data(), param_sumsq_.data(), loss_sums, h.grad_clip, control_.data(),
                       stream_);
  }
  queue_update(params, h, control_.data());
}

void DeviceQAdamW::queue_update(DeviceParams& params, const StepHyper& h, const StepControl* control) {
  FP4_CHECK(params.size() == n_params_, "q-adamw (CUDA) update: built for ", n_params_, " parameters, given ",
            params.size());
  check_adamw_hyper(h);
  const int64_t step = step_ + 1;
  cpu::AdamWArgs args = adamw_args(h, step);  // weight decay per tensor: QAdamPiece::decay
  args.ratio_bound = q_adamw_ratio_bound(h.beta1, h.beta2, step);
  const QAdamStepArgs a = q_adamw_step_args(args, seed_, step);
  q_adamw_measure(params.grads(), packed(), pieces_.data(), n_pieces_, tiles_, n_params_, a, control,
                  amax_.data(), fault_.data(), stream_);
  // Every tensor's amax over all ranks (QAdamW's all-reduce): the scales, and so the bytes, are one
  // process's whatever the shards.
  if (comm_)
    q_adamw_all_reduce_amax(amax_.data(), fault_.data(), n_params_, amax_slots_.data(), *comm_, stream_);
  q_adamw_write(params.values(), params.grads(), params.values_bf16(), packed(), pieces_.data(), n_pieces_,
                tiles_, n_params_, a, control, amax_.data(), fault_.data(), stream_);
}

void DeviceQAdamW::queue_norm(const DeviceParams& params, const double* loss_sums) {
  FP4_CHECK(comm_ == nullptr, "q-adamw (CUDA): queue_norm (GradientProbe) is not available with data ",
            "parallelism");
  grad_norm_and_clip(params.grads(), chunks_.data(), n_chunks_, first_chunk_.data(), n_pieces_,
                     chunk_partials_.data(), param_sumsq_.data(), loss_sums, 0.0f, control_.data(), stream_);
  FP4_CUDA_CHECK(cudaMemsetAsync(fault_.data(), 0xFF, sizeof(uint32_t), stream_));  // no update was queued
}

StepControl DeviceQAdamW::read_control(std::vector<double>& param_sumsq) const {
  std::vector<double> pieces(host_pieces_.size());
  if (!pieces.empty())
    FP4_CUDA_CHECK(cudaMemcpyAsync(pieces.data(), param_sumsq_.data(), pieces.size() * sizeof(double),
                                   cudaMemcpyDeviceToHost, stream_));
  StepControl ctl;
  copy_to_host(&ctl, control_.data(), sizeof(ctl), stream_);
  param_sumsq.assign(static_cast<size_t>(n_params_), 0.0);
  for (size_t k = 0; k < pieces.size(); ++k)
    param_sumsq[static_cast<size_t>(host_pieces_[k].param)] += pieces[k];
  check_fault();
  return ctl;
}

void DeviceQAdamW::check_fault() const {
  uint32_t fault = kQAdamNoFault;
  copy_to_host(&fault, fault_.data(), sizeof(fault), stream_);
  if (fault != kQAdamNoFault) {
    const auto param = static_cast<size_t>(fault / 2);
    FP4_THROW(
        "q-adamw (CUDA), step ", step_ + 1, ": the ", fault % 2 == 0 ? "first" : "second",
        " moment of parameter ", param < names_.size() ? names_[param] : std::string("?"),
        " is not finite after the update (or overflows its H16 mixing); the parameters and the moments ",
        "were left unchanged");
  }
}

DeviceQAdamW::HostState DeviceQAdamW::full_host_state() const {
  HostState h;
  for (int k = 0; k < 2; ++k) {
    h.codes[k].resize(static_cast<size_t>(full_tiles_ * kQAdamCodeBytes));
    h.scales[k].resize(static_cast<size_t>(full_tiles_ * kQAdamScaleBytes));
    h.scale[k].resize(2 * static_cast<size_t>(n_params_));
  }
  h.mean.resize(static_cast<size_t>(full_tiles_));
  if (!comm_) {  // one process: the device buffers are in this layout
    for (int k = 0; k < 2; ++k) {
      copy_to_host(h.codes[k].data(), codes_[k].data(), codes_[k].bytes(), stream_);
      copy_to_host(h.scales[k].data(), scales_[k].data(), scales_[k].bytes(), stream_);
      copy_to_host(h.scale[k].data(), scale_[k].data(), scale_[k].bytes(), stream_);
    }
    copy_to_host(h.mean.data(), mean_.data(), mean_.bytes(), stream_);
    return h;
  }
  // Sharded (QAdamW::save_state's way): each rank writes the bytes of its own tiles, and the owner of a
  // tensor's first tile its scales, into a zeroed buffer; an integer sum over the ranks assembles every
  // tensor exactly.
  const GatherLayout g(full_tiles_, n_params_);
  DeviceBuffer<uint8_t> buf(g.total);
  FP4_CUDA_CHECK(cudaMemsetAsync(buf.data(), 0, buf.bytes(), stream_));
  for (const QAdamPiece& pc : host_pieces_) {
    const auto at = static_cast<size_t>(full_first_tile_[static_cast<size_t>(pc.param)] + pc.tile0);
    const auto from = static_cast<size_t>(pc.first_tile);
    const auto n = static_cast<size_t>(q_adamw_tiles(pc.numel));
    for (int k = 0; k < 2; ++k) {
      copy_on_device(buf.data() + g.codes[k] + at * kQAdamCodeBytes,
                     codes_[k].data() + from * kQAdamCodeBytes, n * kQAdamCodeBytes, stream_);
      copy_on_device(buf.data() + g.scales[k] + at * kQAdamScaleBytes,
                     scales_[k].data() + from * kQAdamScaleBytes, n * kQAdamScaleBytes, stream_);
      if (pc.tile0 == 0)
        copy_on_device(buf.data() + g.scale[k] + 2 * sizeof(float) * static_cast<size_t>(pc.param),
                       scale_[k].data() + 2 * pc.param, 2 * sizeof(float), stream_);
    }
    copy_on_device(buf.data() + g.mean + at * sizeof(uint16_t), mean_.data() + from, n * sizeof(uint16_t),
                   stream_);
  }
  comm_->all_reduce_sum(buf.data(), static_cast<int64_t>(g.total / 8), CommType::kI64, stream_);
  std::vector<uint8_t> all(g.total);
  copy_to_host(all.data(), buf.data(), all.size(), stream_);
  for (int k = 0; k < 2; ++k) {
    std::memcpy(h.codes[k].data(), all.data() + g.codes[k], h.codes[k].size());
    std::memcpy(h.scales[k].data(), all.data() + g.scales[k], h.scales[k].size());
    std::memcpy(h.scale[k].data(), all.data() + g.scale[k], h.scale[k].size() * sizeof(float));
  }
  std::memcpy(h.mean.data(), all.data() + g.mean, h.mean.size() * sizeof(uint16_t));
  return h;
}

std::vector<StateTensor> DeviceQAdamW::save_state(const DeviceParams& params) const {
  FP4_CHECK(params.size() == n_params_, "q-adamw (CUDA) save_state: ", params.size(),
            " parameters, the state has ", n_params_);
  const HostState h = full_host_state();
  const auto& [codes, scales, scale, mean] = h;

  auto bytes = [](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    return std::vector<uint8_t>(b, b + n);
  };
  std::vector<StateTensor> out;
  for (int i = 0; i < n_params_; ++i) {
    if (!selected_[static_cast<size_t>(i)]) continue;
    const std::string& name = params.at(i).info.name;
    const int64_t first = full_first_tile_[static_cast<size_t>(i)];
    const int64_t n = q_adamw_tiles(param_numel_[static_cast<size_t>(i)]);
    for (int k = 0; k < 2; ++k) {
      out.push_back(StateTensor{
          q_adamw_tensor_name(3 * k, name),
          "U8",
          {n, kQAdamCodeBytes},
          bytes(codes[k].data() + first * kQAdamCodeBytes, static_cast<size_t>(n * kQAdamCodeBytes))});
      out.push_back(StateTensor{
          q_adamw_tensor_name(3 * k + 1, name),
          "U8",
          {n, kQAdamScaleBytes},
          bytes(scales[k].data() + first * kQAdamScaleBytes, static_cast<size_t>(n * kQAdamScaleBytes))});
      out.push_back(
          StateTensor{q_adamw_tensor_name(3 * k + 2, name), "F32", {2}, bytes(scale[k].data() + 2 * i, 8)});
    }
    out.push_back(StateTensor{
        q_adamw_tensor_name(6, name), "BF16", {n}, bytes(mean.data() + first, static_cast<size_t>(n) * 2)});
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
  // Every tensor checked before anything changes (QAdamW::load_state's rules), whatever this rank keeps.
  std::vector<QAdamStateTensors> found(static_cast<size_t>(n_params_));
  for (int i = 0; i < n_params_; ++i)
    if (selected_[static_cast<size_t>(i)])
      found[static_cast<size_t>(i)] = require_q_adamw_tensors(
          index, params.at(i).info.name, q_adamw_tiles(param_numel_[static_cast<size_t>(i)]));
  const QAdamSavedCounters saved = require_q_adamw_counters(index);

  // This rank's tiles of each tensor, in the device buffers' layout; every tensor's scales.
  HostState h;
  for (int k = 0; k < 2; ++k) {
    h.codes[k].resize(codes_[k].size());
    h.scales[k].resize(scales_[k].size());
    h.scale[k].resize(scale_[k].size());
  }
  h.mean.resize(mean_.size());
  auto& [codes, scales, scale, mean] = h;
  for (const QAdamPiece& pc : host_pieces_) {
    const auto& f = found[static_cast<size_t>(pc.param)];
    const auto at = static_cast<size_t>(pc.first_tile), from = static_cast<size_t>(pc.tile0);
    const auto n = static_cast<size_t>(q_adamw_tiles(pc.numel));
    for (int k = 0; k < 2; ++k) {
      std::memcpy(codes[k].data() + at * kQAdamCodeBytes,
                  f[static_cast<size_t>(3 * k)]->bytes.data() + from * kQAdamCodeBytes, n * kQAdamCodeBytes);
      std::memcpy(scales[k].data() + at * kQAdamScaleBytes,
                  f[static_cast<size_t>(3 * k + 1)]->bytes.data() + from * kQAdamScaleBytes,
                  n * kQAdamScaleBytes);
    }
    std::memcpy(mean.data() + at, f[6]->bytes.data() + from * sizeof(uint16_t), n * sizeof(uint16_t));
  }
  for (int i = 0; i < n_params_; ++i)
    for (int k = 0; selected_[static_cast<size_t>(i)] && k < 2; ++k)
      std::memcpy(scale[k].data() + 2 * i,
                  found[static_cast<size_t>(i)][static_cast<size_t>(3 * k + 2)]->bytes.data(), 8);
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
