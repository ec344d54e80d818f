// The SHA-256 compression function (FIPS 180-4, section 6.2.2) on the CPU's SHA instructions.
//
// Each architecture's function carries its instruction set in a `target` attribute, so the rest of the package
// builds for the baseline CPU and this code runs only after the run-time check in sha256_dispatch.c.

#include "CSessionEngineSHA256.h"

#if defined(__clang__)
#define UNROLL_FULLY _Pragma("clang loop unroll(full)")
#else
#define UNROLL_FULLY _Pragma("GCC unroll 16")
#endif

#if defined(__x86_64__) || defined(__aarch64__)
/// The 64 round constants K of FIPS 180-4, section 4.2.2, four per group of four rounds.
static const uint32_t round_constants[64] __attribute__((aligned(16))) = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};
#endif

#if defined(__x86_64__)
#include <immintrin.h>

// SHA256RNDS2 keeps the working variables as ABEF and CDGH; the message schedule runs four words at a time with
// SHA256MSG1 and SHA256MSG2. The loop over the sixteen groups of four rounds has constant bounds and indices, so the
// compiler unrolls it and keeps the schedule in four registers.
__attribute__((target("sha,sse4.1,ssse3"))) void se_sha256_compress_hardware(uint32_t state[8], const void *data,
                                                                             size_t blocks) {
    const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    const unsigned char *block = (const unsigned char *)data;

    // From a b c d | e f g h to the instructions' ABEF | CDGH.
    __m128i dcba = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&state[0]), 0xB1);
    __m128i hgfe = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&state[4]), 0x1B);
    __m128i abef = _mm_alignr_epi8(dcba, hgfe, 8);
    __m128i cdgh = _mm_blend_epi16(hgfe, dcba, 0xF0);

    while (blocks > 0) {
        const __m128i abef_before = abef;
        const __m128i cdgh_before = cdgh;
        __m128i schedule[4];
UNROLL_FULLY
        for (int group = 0; group < 16; group++) {
            if (group < 4) {
                schedule[group] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(block + 16 * group)), byte_swap);
            } else {
                // W[t..t+3] from W[t-16..t-13], W[t-15..t-12], W[t-7..t-4] and W[t-4..t-1].
                const __m128i oldest = _mm_sha256msg1_epu32(schedule[group & 3], schedule[(group + 1) & 3]);
                const __m128i w7 = _mm_alignr_epi8(schedule[(group + 3) & 3], schedule[(group + 2) & 3], 4);
                schedule[group & 3] = _mm_sha256msg2_epu32(_mm_add_epi32(oldest, w7), schedule[(group + 3) & 3]);
            }
            const __m128i words = _mm_add_epi32(schedule[group & 3],
                                                _mm_load_si128((const __m128i *)&round_constants[4 * group]));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, words);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(words, 0x0E));
        }
        abef = _mm_add_epi32(abef, abef_before);
        cdgh = _mm_add_epi32(cdgh, cdgh_before);
        block += 64;
        blocks -= 1;
    }

    // Back from ABEF | CDGH to a b c d | e f g h.
    const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
    const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128((__m128i *)&state[0], _mm_blend_epi16(feba, dchg, 0xF0));
    _mm_storeu_si128((__m128i *)&state[4], _mm_alignr_epi8(dchg, feba, 8));
}

#elif defined(__aarch64__)
#include <arm_neon.h>

// SHA256H and SHA256H2 keep the working variables as ABCD and EFGH, the order of `state`; SHA256SU0 and SHA256SU1
// run the message schedule four words at a time.
__attribute__((target("sha2"))) void se_sha256_compress_hardware(uint32_t state[8], const void *data, size_t blocks) {
    const uint8_t *block = (const uint8_t *)data;
    uint32x4_t abcd = vld1q_u32(&state[0]);
    uint32x4_t efgh = vld1q_u32(&state[4]);

    while (blocks > 0) {
        const uint32x4_t abcd_before = abcd;
        const uint32x4_t efgh_before = efgh;
        uint32x4_t schedule[4];
UNROLL_FULLY
        for (int group = 0; group < 16; group++) {
            if (group < 4) {
                schedule[group] = vreinterpretq_u32_u8(vrev32q_u8(vld1q_u8(block + 16 * group)));
            } else {
                schedule[group & 3] = vsha256su1q_u32(vsha256su0q_u32(schedule[group & 3], schedule[(group + 1) & 3]),
                                                      schedule[(group + 2) & 3], schedule[(group + 3) & 3]);
            }
            const uint32x4_t words = vaddq_u32(schedule[group & 3], vld1q_u32(&round_constants[4 * group]));
            const uint32x4_t abcd_round = abcd;
            abcd = vsha256hq_u32(abcd, efgh, words);
            efgh = vsha256h2q_u32(efgh, abcd_round, words);
        }
        abcd = vaddq_u32(abcd, abcd_before);
        efgh = vaddq_u32(efgh, efgh_before);
        block += 64;
        blocks -= 1;
    }

    vst1q_u32(&state[0], abcd);
    vst1q_u32(&state[4], efgh);
}

#else

void se_sha256_compress_hardware(uint32_t state[8], const void *data, size_t blocks) {
    (void)state;
    (void)data;
    (void)blocks;
    __builtin_trap();
}

#endif
