// The op set of the OLMo-2 layers: one function per op, forward and backward side by side.
// The CPU reference implementations live in src/ops/cpu/ (namespace fp4::cpu); CUDA launchers take
// the same arguments plus a stream. All tensors are FP32, row-major; `ld*` arguments are row strides
// in elements, so an op can read a column slice of a wider buffer (e.g. q inside the fused qkv output).
#pragma once

#include <cstdint>
#include <limits>
#include <string>

namespace fp4::cpu {

// ---- GEMM (OpenBLAS sgemm) ----
// C[m,n] = alpha * op(A) op(B) + beta * C, op(X) = X^T when trans_x. op(A) is [m,k], op(B) is [k,n].
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);

// The BLAS behind gemm, e.g. "OpenBLAS SkylakeX, 2 threads".
std::string blas_description();
// The OpenBLAS core type to ask for (OPENBLAS_CORETYPE: "SkylakeX" on AVX-512, "Haswell" on AVX2) when
// OpenBLAS did not recognise this CPU and fell back to its generic SSE3 kernels (about 2.5x slower
// GEMMs); empty otherwise.
std::string blas_better_coretype();
// Advice naming that core type; empty when there is none.
std::string blas_advice();

// ---- token embedding ----
// out[i,:] = table[tokens[i],:]; backward adds dout[i,:] into dtable[tokens[i],:].
void embedding_forward(float* out, const int32_t* tokens, const float* table, int n, int d);
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int n, int d);

// ---- RMSNorm over rows of width c: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) ----
void rmsnorm_forward(float* out, int ldo, float* rstd, const float* x, int ldx, const float* w, int n, int c,
                     float eps);
// dx = rstd * (g - x * rstd^2 * mean(g * x)), g = dout * w. dx is overwritten, or added to when
// accumulate_dx; dw always accumulates sum_rows dout * x * rstd.
void rmsnorm_backward(float* dx, int lddx, float* dw, const float* dout, int lddo, const float* x, int ldx,
                      const float* w, const float* rstd, int n, int c, bool accumulate_dx);

// ---- rotary position embedding (rotate-half convention, pairs (i, i + head_dim/2)) ----
// cos/sin tables [t][head_dim/2] of angle pos * theta^(-2i/head_dim), computed in double.
void rope_tables(float* cos_table, float* sin_table, int t, int head_dim, float theta);
// In place on x [b*t rows][n_heads*head_dim] (row stride ld); the position of row r is r % t.
void rope_forward(float* x, int ld, const float* cos_table, const float* sin_table, int b, int t, int n_heads,
                  int head_dim);
// The transpose of the rotation (rotation by -angle), in place on the gradient.
void rope_backward(float* dx, int ld, const float* cos_table, const float* sin_table, int b, int t,
                   int n_heads, int head_dim);

// ---- causal softmax attention, scale 1/sqrt(head_dim) ----
// q, k, v, out: [b*t rows][n_heads*head_dim] with row strides; probs [b][n_heads][t][t] is saved for the
// backward (entries above the diagonal are 0).
void attention_forward(float* out, int ldo, float* probs, const float* q, int ldq, const float* k, int ldk,
                       const float* v, int ldv, int b, int t, int n_heads, int head_dim);
// dq, dk, dv are overwritten. scratch holds t*t floats.
void attention_backward(float* dq, int lddq, float* dk, int lddk, float* dv, int lddv, float* scratch,
                        const float* dout, int lddo, const float* probs, const float* q, int ldq,
                        const float* k, int ldk, const float* v, int ldv, int b, int t, int n_heads,
                        int head_dim);

// ---- SwiGLU: gu [n][2f] holds gate (columns 0..f) then up (f..2f); out [n][f] = silu(gate) * up ----
void swiglu_forward(float* out, const float* gu, int n, int f);
void swiglu_backward(float* dgu, const float* dout, const float* gu, int n, int f);

// ---- elementwise ----
void add(float* out, const float* a, const float* b, int64_t n);  // out may alias a or b
void scale(float* x, int64_t n, float s);
double sum_squares(const float* x, int64_t n);       // accumulated in double
int64_t first_nonfinite(const float* x, int64_t n);  // index of the first NaN/Inf, or -1

// ---- cross-entropy with z-loss over the real vocabulary ----
struct LossSums {
  double loss = 0;     // sum over counted tokens of ce + z_loss * lse^2
  double ce = 0;       // sum of ce alone
  int64_t tokens = 0;  // targets >= 0
};
// logits [n][v]; only columns < v_real take part (the padded ids are excluded from the softmax, as if
// their logits were -inf). Targets < 0 are ignored; a target >= v_real throws fp4::Error.
// When dlogits is not null (it may alias logits), it receives grad_scale * d(sum of losses)/d(logits):
// grad_scale * (softmax * (1 + 2 z_loss lse) - onehot(target)), zero on ignored rows and padded columns.
LossSums cross_entropy(float* dlogits, const float* logits, const int32_t* targets, int n, int v, int v_real,
                       float z_loss, float grad_scale);

// ---- AdamW (decoupled weight decay, PyTorch semantics) ----
// p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), bc_i = 1 - b_i^step.
// ratio_bound clamps the normalized step m / (sqrt(v) / sqrt(bc2) + eps) to [-bound, bound] (q-adamw: decoded
// moments can disagree where exact ones cannot); infinity leaves AdamW's arithmetic bit for bit.
struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1, bias_correction2;
  float ratio_bound = std::numeric_limits<float>::infinity();
};
void adamw_update(float* p, float* m, float* v, const float* g, int64_t n, const AdamWArgs& args);

}  // namespace fp4::cpu
