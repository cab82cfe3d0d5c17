#include <algorithm>

#include "core/error.h"
#include "model/cuda/activation_arena.h"
#include "ops/cuda/rmsnorm_cuda.h"
#include "tensor/carver.h"

namespace fp4::cuda {

ActivationArena::ActivationArena(const ModelConfig& cfg, std::vector<SavedInputs> saved)
    : cfg_(cfg), saved_(std::move(saved)) {
  FP4_CHECK(saved_.size() == static_cast<size_t>(cfg_.n_layers), "activation arena: ", saved_.size(),
            " saved-input entries for the ", cfg_.n_layers, " layers of model ", cfg_.name);
}

size_t ActivationArena::lay_out(int b, int t, const ArenaNeeds& needs, uint8_t* base, Activations& a) const {
  const size_t n = static_cast<size_t>(b) * t, d = cfg_.d_model, ff = cfg_.d_ff, v = cfg_.vocab_size;
  Carver c(base);
  a.b = b;
  a.t = t;
  a.n = static_cast<int>(n);
  a.layers.resize(static_cast<size_t>(cfg_.n_layers));
  size_t unsaved = 0;  // inputs not saved per layer
  for (size_t i = 0; i < a.layers.size(); ++i) {
    auto& l = a.layers[i];
    l.saved = saved_[i];
    l.x = l.saved.x ? c.take<bf16>(n * d) : nullptr;
    l.qkv = c.take<bf16>(n * 3 * d);
    l.qkv_rot = c.take<bf16>(n * 3 * d);
    l.rstd_q = c.take<float>(n);
    l.rstd_k = c.take<float>(n);
    l.att = c.take<bf16>(n * d);
    l.lse = c.take<float>(n * static_cast<size_t>(cfg_.n_heads));
    l.y_attn = c.take<bf16>(n * d);
    l.rstd_attn = c.take<float>(n);
    l.h = l.saved.h ? c.take<bf16>(n * d) : nullptr;
    l.gu = c.take<bf16>(n * 2 * ff);
    l.act = l.saved.act ? c.take<bf16>(n * ff) : nullptr;
    l.y_mlp = c.take<bf16>(n * d);
    l.rstd_mlp = c.take<float>(n);
    unsaved += !l.saved.x + !l.saved.h + !l.saved.act;
  }
  a.saved_input_bytes = 0;
  for (const auto& l : a.layers)
    a.saved_input_bytes += ((l.saved.x + l.saved.h) * d + l.saved.act * ff) * n * sizeof(bf16);
  a.res = c.take<float>(n * d);
  a.mid = c.take<float>(n * d);
  a.xf = c.take<bf16>(n * d);
  a.rstd_f = c.take<float>(n);
  {
    const size_t start = c.used();
    a.logits = c.take<bf16>(n * v);
    const size_t end = c.used();
    c.rewind(start);
    a.linear_workspace_bytes = needs.linear_workspace_bytes;
    a.linear_workspace =
        needs.linear_workspace_bytes > 0 ? c.take<uint8_t>(needs.linear_workspace_bytes) : nullptr;
    c.extend_to(end);
  }
  a.row_loss = c.take<float>(n);
  a.row_ce = c.take<float>(n);
  {
    const size_t start = c.used();
    a.dres[0] = c.take<float>(n * d);
    a.dres[1] = c.take<float>(n * d);
    a.dmid = c.take<float>(n * d);
    a.dy = c.take<bf16>(n * d);
    a.dact = c.take<bf16>(n * ff);
    a.dgu = c.take<bf16>(n * 2 * ff);
    a.datt = c.take<bf16>(n * d);
    a.dqkv = c.take<bf16>(n * 3 * d);
    a.norm_scratch =
        c.take<float>(norm_backward_scratch_floats(static_cast<int>(n), static_cast<int>(2 * d)));
    a.attn_workspace = c.take<uint8_t>(needs.attn_workspace_bytes);
    const size_t end = c.used();
    c.rewind(start);
    a.transient_input = unsaved > 0 ? c.take<bf16>(n * std::max(d, ff)) : nullptr;
    c.extend_to(end);
  }
  for (auto& l : a.layers) {
    if (!l.saved.x) l.x = a.transient_input;
    if (!l.saved.h) l.h = a.transient_input;
    if (!l.saved.act) l.act = a.transient_input;
  }
  a.last_x = c.take<bf16>(static_cast<size_t>(b) * d);
  a.last_logits = c.take<float>(static_cast<size_t>(b) * v);
  return c.used();
}

size_t ActivationArena::bytes_for(int b, int t, const ArenaNeeds& needs) const {
  Activations scratch;
  return lay_out(b, t, needs, nullptr, scratch);
}

const Activations& ActivationArena::ensure(int b, int t, const ArenaNeeds& needs) {
  FP4_CHECK(b > 0 && t > 0, "activation arena: empty micro-batch ", b, " x ", t);
  const size_t need = lay_out(b, t, needs, nullptr, acts_);
  if (need > buffer_.bytes()) {
    buffer_ = DeviceBuffer<uint8_t>();  // free first: the old and new arenas need not fit together
    try {
      buffer_ = DeviceBuffer<uint8_t>(need);
    } catch (const Error& e) {
      FP4_THROW("activation arena: cannot allocate ", static_cast<double>(need) / (1 << 30),
                " GiB for a micro-batch of ", b, " x ", t, " tokens of model ", cfg_.name,
                " (use a smaller micro-batch): ", e.what());
    }
  }
  lay_out(b, t, needs, buffer_.data(), acts_);
  return acts_;
}

}  // namespace fp4::cuda
