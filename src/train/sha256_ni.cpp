// SHA-256 blocks with the x86 SHA extensions. sha256rnds2 does two rounds on the state split as
// (A,B,E,F) and (C,D,G,H); sha256msg1/msg2 extend the message schedule four words at a time.
#include "train/sha256_blocks.h"

#ifdef FP4_SHA256_HAVE_NI

#include <immintrin.h>

namespace fp4::sha256_detail {

bool cpu_has_sha_ni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sha") && __builtin_cpu_supports("sse4.1");
}

__attribute__((target("sha,sse4.1"))) void compress_sha_ni(State& state, const uint8_t* blocks,
                                                           size_t count) {
  // Reverses the bytes of each 32-bit lane: the message words are big-endian.
  const __m128i kByteSwap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  // Lane contents are listed lane 0 first. The state words {a,b,c,d}, {e,f,g,h} become
  // abef = {f,e,b,a} and cdgh = {h,g,d,c}, the operand layout of sha256rnds2.
  const __m128i abcd = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state.data()));
  const __m128i efgh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state.data() + 4));
  const __m128i in_lo = _mm_shuffle_epi32(abcd, 0xB1);  // {b,a,d,c}
  const __m128i in_hi = _mm_shuffle_epi32(efgh, 0x1B);  // {h,g,f,e}
  __m128i abef = _mm_alignr_epi8(in_lo, in_hi, 8);
  __m128i cdgh = _mm_blend_epi16(in_hi, in_lo, 0xF0);

  for (size_t blk = 0; blk < count; ++blk) {
    const uint8_t* block = blocks + 64 * blk;
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[4];  // schedule words of the last four groups; group g lives in w[g % 4]
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      if (g < 4) {
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * g));
        w[g] = _mm_shuffle_epi8(raw, kByteSwap);
      } else {
        // W[i] = s1(W[i-2]) + W[i-7] + s0(W[i-15]) + W[i-16] for the four words of group g.
        __m128i t = _mm_sha256msg1_epu32(w[g % 4], w[(g + 1) % 4]);
        t = _mm_add_epi32(t, _mm_alignr_epi8(w[(g + 3) % 4], w[(g + 2) % 4], 4));
        w[g % 4] = _mm_sha256msg2_epu32(t, w[(g + 3) % 4]);
      }
      const __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kRound.data() + 4 * g));
      const __m128i wk = _mm_add_epi32(w[g % 4], k);
      // Two rounds leave the new (A,B,E,F) in the first operand; the old one is the new (C,D,G,H).
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }

  const __m128i out_lo = _mm_shuffle_epi32(abef, 0x1B);  // {a,b,e,f}
  const __m128i out_hi = _mm_shuffle_epi32(cdgh, 0xB1);  // {g,h,c,d}
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state.data()), _mm_blend_epi16(out_lo, out_hi, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state.data() + 4), _mm_alignr_epi8(out_hi, out_lo, 8));
}

}  // namespace fp4::sha256_detail

#endif  // FP4_SHA256_HAVE_NI
