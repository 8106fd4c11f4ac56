/* The shortest decimal digits of a double that read back as the same double: what Python's
 * repr() prints (David Gay's dtoa, mode 0), computed with 128-bit integer products instead of
 * dtoa's arbitrary precision.
 *
 * Written for pshell from the published description of Schubfach (R. Giulietti, "The Schubfach
 * way to render doubles", 2020/2021); the constants are made by make_pow10_table.py (pow10_table.h).
 *
 * The idea. A positive double v = c * 2^q (c, q integers) is what every real of its rounding
 * interval R reads back as: R = [v - 2^q/2, v + 2^q/2] (open when c is odd: ties go to the even
 * neighbour), or [v - 2^q/4, v + 2^q/2] when v is a power of two whose lower neighbour is half as
 * far (c = 2^52, above the smallest normal exponent). repr() prints the member of R with the
 * fewest significant digits; among those the one nearest v; a tie to the even last digit.
 * Take k the largest integer with 10^k <= |R| (the width). Then R holds at least one multiple of
 * 10^k (two adjacent ones are 10^k apart) and at most one multiple of 10^(k+1) (> |R|). So:
 *   - if a multiple of 10^(k+1) is in R it is the answer (nothing in R has fewer digits: a value
 *     with fewer would also be a multiple of 10^(k+1), and R holds one), and it can only be one of
 *     the two multiples of 10^(k+1) around v;
 *   - else the answer is a multiple of 10^k, and the nearest members of R to v among them are the
 *     two multiples around v: s 10^k <= v < (s+1) 10^k; take whichever of them is in R, both:
 *     the nearer, a tie: the even.
 * To decide these with integers, everything is scaled by 4 * 10^-k: the bounds and v become
 * vl, vr, vb ~ 4 * (bound or v) * 10^-k, and a candidate d * 10^k becomes exactly 4d. The product
 * by 10^-k is c' * g >> 128 with g = 10^-k rounded up to 126 bits (the table) and the result
 * "rounded to odd" (the lowest bit set when the true value is not an integer): compared with a
 * multiple of 4, or with 4s + 2 (v against the midpoint of s and s + 1), both even, an odd
 * result is never equal, so the rounding cannot tip a comparison. That the rounding to odd is
 * exact for every double (g's excess and the dropped bits never move a floor or hide a
 * fraction that matters) is checked over all of them by make_pow10_table.py
 * (check_rounding_bound), not taken on trust.
 *
 * shortest_digits(mantissa_bits, exponent_bits) for a finite non-zero double's fields (its
 * sign dropped): {digits, exponent} with value = digits * 10^exponent, digits without trailing
 * zeros (1..17 digits).
 */
#ifndef PSHELL_SHORTEST_DIGITS_H
#define PSHELL_SHORTEST_DIGITS_H

#include <stdint.h>

#include "pow10_table.h"

typedef struct {
    uint64_t digits;
    int32_t exponent;
} shortest_decimal;

#ifndef __SIZEOF_INT128__     /* MSVC, 32-bit targets: the extension is optional, Python's repr runs */
#error "shortest_digits.h needs unsigned __int128 (GCC or Clang on a 64-bit target)"
#endif
typedef unsigned __int128 sd_u128;

/* floor(x / 2^128) of x = g * scaled (g the 126-bit {high, low}, scaled < 2^63), its lowest bit
 * set when x / 2^128 is not an integer ("round to odd"), judged on the first 64 bits of the
 * fraction: g is 10^e rounded up, which adds less than scaled / 2^128 < 2^-65 to an exact
 * product, so bits below 2^-64 would mark exact products inexact; that no scaled value that
 * matters has a fraction in (0, 2^-64), nor above 1 - 2^-65, is make_pow10_table.py's check. */
static inline uint64_t sd_scale_round_odd(const uint64_t g[2], uint64_t scaled) {
    const sd_u128 low = (sd_u128)g[1] * scaled;
    const sd_u128 high = (sd_u128)g[0] * scaled + (uint64_t)(low >> 64);    /* floor(x / 2^64) */
    return (uint64_t)(high >> 64) | ((uint64_t)high != 0);
}

static inline shortest_decimal shortest_digits(uint64_t mantissa_bits, uint32_t exponent_bits) {
    uint64_t c;
    int32_t q;
    int irregular = 0;         /* a power of two whose lower neighbour is 2^q / 2 away: R = [v - 2^q/4, v + 2^q/2] */
    if (exponent_bits == 0) {  /* subnormal: the same spacing as the smallest normals */
        c = mantissa_bits;
        q = -1074;
    } else {
        c = mantissa_bits | (1ull << 52);
        q = (int32_t)exponent_bits - 1075;
        irregular = mantissa_bits == 0 && exponent_bits > 1;
    }
    /* k: the largest with 10^k <= |R| (2^q, or 3/4 * 2^q) */
    const int32_t k = irregular ? (int32_t)(((int64_t)q * LOG10_3Q_POW2_MULT + LOG10_3Q_POW2_ADD) >> LOG10_3Q_POW2_SHIFT)
                                : (int32_t)(((int64_t)q * LOG10_POW2_MULT + LOG10_POW2_ADD) >> LOG10_POW2_SHIFT);
    const int32_t e = -k;
    const uint64_t *g = POW10_G[e - POW10_E_MIN];
    /* g = 10^e * 2^(125 - floor(log2 10^e)); c * 2^q * 10^e * 4 = (4c << shift) * g >> 128 with: */
    const int shift = q + (int32_t)(((int64_t)e * LOG2_POW10_MULT + LOG2_POW10_ADD) >> LOG2_POW10_SHIFT) + 3;
    /* in units of 2^q / 4 (so the bounds are integers): v = 4c, lower bound 4c - 2 (4c - 1), upper 4c + 2 */
    const uint64_t v4 = c << 2;
    const uint64_t vb = sd_scale_round_odd(g, v4 << shift);
    const uint64_t vl = sd_scale_round_odd(g, (v4 - 2 + (uint64_t)irregular) << shift);
    const uint64_t vr = sd_scale_round_odd(g, (v4 + 2) << shift);
    const uint64_t open = c & 1;     /* odd c: the bounds read back as the even neighbours, not v */
    const uint64_t s = vb >> 2;      /* floor(v * 10^-k) */

    /* a multiple of 10^(k+1) in R: one of the two around v */
    const uint64_t below10 = s / 10 * 10, above10 = below10 + 10;
    const int below10_in = vl + open <= below10 << 2;
    const int above10_in = (above10 << 2) + open <= vr;
    shortest_decimal out;
    if (below10_in || above10_in) {
        out.digits = below10_in ? below10 : above10;
        out.exponent = k;
    } else {
        const int s_in = vl + open <= s << 2;
        const int t_in = ((s + 1) << 2) + open <= vr;
        if (s_in && t_in) {      /* both: the nearer to v; halfway (vb = 4s + 2): the even */
            const uint64_t mid = (s << 2) + 2;
            out.digits = vb < mid || (vb == mid && (s & 1) == 0) ? s : s + 1;
        } else {
            out.digits = s_in ? s : s + 1;
        }
        out.exponent = k;
    }
    while (out.digits % 10 == 0) { out.digits /= 10; out.exponent++; }
    return out;
}

#endif
