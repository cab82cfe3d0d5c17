#include "nn/init.h"

#include <cmath>
#include <numbers>

#include "numerics/philox.h"

namespace fp4 {

namespace {
constexpr uint32_t kInitPurpose = 0x11;  // stream purpose tag of parameter initialisation
constexpr double kTruncation = 3.0;
}  // namespace

void init_truncated_normal(std::span<float> out, float std, uint64_t seed, uint32_t param_index) {
  for (size_t i = 0; i < out.size(); ++i) {
    // Attempt a uses the stream of "step" a; Box-Muller on the element's two words 2i, 2i+1.
    for (uint32_t attempt = 0;; ++attempt) {
      const RngStream s{seed, make_stream(param_index, attempt, kInitPurpose)};
      const double u1 = 1.0 - (philox_word(s, 2 * i) + 0.5) / 4294967296.0;  // (0, 1)
      const double u2 = philox_word(s, 2 * i + 1) / 4294967296.0;            // [0, 1)
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
      if (std::fabs(z) <= kTruncation) {
        out[i] = static_cast<float>(std * z);
        break;
      }
    }
  }
}

}  // namespace fp4
