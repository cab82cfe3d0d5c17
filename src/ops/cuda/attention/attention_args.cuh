// Host-side checks of the attention entry points: every failure names the call and the argument at fault.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace fp4::cuda::attn {

inline constexpr int kMaxGridY = 65535;

inline void check_shape(const char* what, int B, int T, int H, int D, float scale) {
  FP4_CHECK(B >= 1 && T >= 1 && H >= 1, what, ": B=", B, ", T=", T, ", H=", H, " must all be positive");
  FP4_CHECK(D == 64 || D == 128, what, ": head size D=", D, " is not supported (64 or 128)");
  FP4_CHECK(std::isfinite(scale) && scale > 0.f, what, ": scale=", scale, " must be positive and finite");
  FP4_CHECK(static_cast<int64_t>(B) * H <= INT32_MAX, what, ": B*H=", static_cast<int64_t>(B) * H,
            " exceeds the grid");
  FP4_CHECK((T + 63) / 64 <= kMaxGridY, what, ": T=", T, " exceeds the grid (at most ", 64 * kMaxGridY, ")");
}

// A BF16 operand of row stride ld holding H heads of D columns from its pointer on.
inline void check_matrix(const char* what, const char* name, const void* p, int ld, int H, int D) {
  FP4_CHECK(p != nullptr, what, ": ", name, " is a null pointer");
  FP4_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0, what, ": ", name, " must be 16-byte aligned");
  FP4_CHECK(ld % 8 == 0 && static_cast<int64_t>(ld) >= static_cast<int64_t>(H) * D, what, ": row stride of ",
            name, " is ", ld,
            "; it must be a multiple of 8 and at least H*D = ", static_cast<int64_t>(H) * D);
}

inline void check_pointer(const char* what, const char* name, const void* p) {
  FP4_CHECK(p != nullptr, what, ": ", name, " is a null pointer");
  FP4_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0, what, ": ", name, " must be 16-byte aligned");
}

}  // namespace fp4::cuda::attn
