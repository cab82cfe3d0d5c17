#include "core/error.h"
#include "model/cuda/activation_arena.h"
#include "ops/cuda/rmsnorm_cuda.h"

namespace fp4::cuda {

namespace {

constexpr size_t kAlign = 256;  // cuBLASLt's preferred alignment; also 16 bytes for vector access

// Hands out aligned pieces of [base, base + size); with base == nullptr it only measures.
class Carver {
 public:
  explicit Carver(uint8_t* base) : base_(base) {}
  template <typename T>
  T* take(size_t count) {
    used_ = (used_ + kAlign - 1) / kAlign * kAlign;
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += count * sizeof(T);
    return p;
  }
  size_t used() const { return used_; }

 private:
  uint8_t* base_;
  size_t used_ = 0;
};

}  // namespace

size_t ActivationArena::lay_out(int b, int t, size_t attn_workspace_bytes, uint8_t* base,
                                Activations& a) const {
  const size_t n = static_cast<size_t>(b) * t, d = cfg_.d_model, ff = cfg_.d_ff, v = cfg_.vocab_size;
  Carver c(base);
  a.b = b;
  a.t = t;
  a.n = static_cast<int>(n);
  a.layers.resize(static_cast<size_t>(cfg_.n_layers));
  for (auto& l : a.layers) {
    l.x = c.take<bf16>(n * d);
    l.qkv = c.take<bf16>(n * 3 * d);
    l.qkv_rot = c.take<bf16>(n * 3 * d);
    l.rstd_q = c.take<float>(n);
    l.rstd_k = c.take<float>(n);
    l.att = c.take<bf16>(n * d);
    l.lse = c.take<float>(n * static_cast<size_t>(cfg_.n_heads));
    l.y_attn = c.take<bf16>(n * d);
    l.rstd_attn = c.take<float>(n);
    l.h = c.take<bf16>(n * d);
    l.gu = c.take<bf16>(n * 2 * ff);
    l.act = c.take<bf16>(n * ff);
    l.y_mlp = c.take<bf16>(n * d);
    l.rstd_mlp = c.take<float>(n);
  }
  a.res = c.take<float>(n * d);
  a.mid = c.take<float>(n * d);
  a.xf = c.take<bf16>(n * d);
  a.rstd_f = c.take<float>(n);
  a.logits = c.take<bf16>(n * v);
  a.row_loss = c.take<float>(n);
  a.row_ce = c.take<float>(n);
  a.dres[0] = c.take<float>(n * d);
  a.dres[1] = c.take<float>(n * d);
  a.dmid = c.take<float>(n * d);
  a.dy = c.take<bf16>(n * d);
  a.dact = c.take<bf16>(n * ff);
  a.dgu = c.take<bf16>(n * 2 * ff);
  a.datt = c.take<bf16>(n * d);
  a.dqkv = c.take<bf16>(n * 3 * d);
  a.norm_scratch = c.take<float>(norm_backward_scratch_floats(static_cast<int>(n), static_cast<int>(2 * d)));
  a.attn_workspace = c.take<uint8_t>(attn_workspace_bytes);
  a.last_x = c.take<bf16>(static_cast<size_t>(b) * d);
  a.last_logits = c.take<float>(static_cast<size_t>(b) * v);
  return c.used();
}

const Activations& ActivationArena::ensure(int b, int t, size_t attn_workspace_bytes) {
  FP4_CHECK(b > 0 && t > 0, "activation arena: empty micro-batch ", b, " x ", t);
  const size_t need = lay_out(b, t, attn_workspace_bytes, nullptr, acts_);
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
  lay_out(b, t, attn_workspace_bytes, buffer_.data(), acts_);
  return acts_;
}

}  // namespace fp4::cuda
