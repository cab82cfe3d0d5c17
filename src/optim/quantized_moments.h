// The moment codec of quantized-state AdamW (Full-Stack FP4, RECIPES.md section 8.2): AdamW's first and
// second moments stored in NVFP4 between steps, decoded to FP32 for the update.
//
// First moment m: each 16-element group is mixed by the orthonormal 16-point Hadamard transform H (spreads
// a group's outliers over the group), then quantized to NVFP4 (1x16 blocks, tensor outer scale, Four Over
// Six, stochastic rounding: an unbiased write). Decoding applies H again (H is its own inverse).
// Second moment v: u = sqrt(v); mu = the mean of u over each tile of 128 elements, stored in BF16; the
// residual r = u - mu is mixed by H and quantized as m is. Decoding: u = H(deq(r)) + mu, clamped at 0,
// v = u^2. Quantizing sqrt(v) around its local mean keeps the small second moments (which set the largest
// steps) from flushing to zero, as a direct NVFP4 copy of v does.
//
// Sizes that are not a multiple of 128 are padded with zeros, which never reach the decoded values.
// [ours]: the tensor outer scale, 4o6 + SR for v's residual as for m, the padding, BF16 RNE for mu.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "numerics/philox.h"
#include "numerics/quantize.h"

namespace fp4 {

struct QuantizedMoment {
  int64_t size = 0;              // logical elements
  Nvfp4Tensor q;                 // [padded / 128 x 128]: H-mixed m, or H-mixed residual of sqrt(v)
  std::vector<uint16_t> mean;    // second moment only: BF16 mean of sqrt(v) per 128-element tile
  int64_t packed_bytes() const;  // what the state costs in memory
};

// SR bits come from `sr` (element i of the padded tensor draws word i). Non-finite input is an error
// naming `what`.
QuantizedMoment encode_first_moment(std::span<const float> m, RngStream sr,
                                    const char* what = "first moment");
void decode_first_moment(const QuantizedMoment& q, std::span<float> out);

// v must be >= 0 (AdamW's second moment); a negative or non-finite value is an error naming `what`.
QuantizedMoment encode_second_moment(std::span<const float> v, RngStream sr,
                                     const char* what = "second moment");
void decode_second_moment(const QuantizedMoment& q, std::span<float> out);

// The codec in two phases, for a moment split over ranks (optim/q_adamw.h): a piece holds whole 128-element
// tiles of its tensor (the last tile may be partial), every piece of a tensor is quantized with the tensor's
// amax (all-reduced), and tile t draws SR words 0..127 of the stream {key, t}. The packed result of a piece
// is then the same bytes whichever ranks hold which tiles.
struct MixedMoment {
  int64_t size = 0;            // logical elements
  std::vector<float> x;        // padded to 128: H16-mixed m, or the H16-mixed residual of sqrt(v)
  std::vector<uint16_t> mean;  // second moment only: BF16 mean of sqrt(v) per tile
  float amax() const;          // max |x|, the piece's share of the tensor amax
};
MixedMoment mix_first_moment(std::span<const float> m, const char* what = "first moment");
MixedMoment mix_second_moment(std::span<const float> v, const char* what = "second moment");
// Quantizes tile by tile with the given amax (>= every piece's amax()); decode_* read the result.
QuantizedMoment quantize_tiles(MixedMoment mixed, float amax, uint64_t key, int64_t first_tile,
                               const char* what);

}  // namespace fp4
