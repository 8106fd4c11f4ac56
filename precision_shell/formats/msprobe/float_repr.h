/* Python's repr() of a double -- PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL) --
 * from our shortest round-trip digits (shortest_digits.h) instead of CPython's dtoa.
 *
 * Why: the statistics CSV prints ~2.4M floats a side with repr(); dtoa's arbitrary-precision
 * loop is ~0.4 us a float, shortest_digits.h's fixed 128-bit products ~0.03 us. Both give the shortest digit
 * string that reads back as the same double, the one nearest the exact value (ties to even), so
 * the digits are equal; the layout below is format_float_short's for 'r': exponent form when the
 * decimal point is at <= -4 or > 16 ("1e-05", "1.5e+16", exponent of at least two digits), else
 * positional with ".0" after an integer; "nan" (no sign), "inf", "-inf", "-0.0". Tests compare
 * it with repr() on random bit patterns and the edge values.
 *
 * float_repr(v, out): writes the text to out (at least FLOAT_REPR_MAX bytes), returns its length.
 */
#ifndef PSHELL_FLOAT_REPR_H
#define PSHELL_FLOAT_REPR_H

#include <stdint.h>
#include <string.h>

#include "shortest_digits.h"

#define FLOAT_REPR_MAX 32

static inline int float_repr(double value, char *out) {
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    const int sign = (int)(bits >> 63);
    const uint64_t mantissa = bits & ((1ull << 52) - 1);
    const uint32_t exponent = (uint32_t)((bits >> 52) & 0x7ffu);
    char *p = out;
    if (exponent == 0x7ffu) {
        if (mantissa) { memcpy(out, "nan", 3); return 3; }
        if (sign) *p++ = '-';
        memcpy(p, "inf", 3);
        return (int)(p - out) + 3;
    }
    if (sign) *p++ = '-';
    if (exponent == 0 && mantissa == 0) { memcpy(p, "0.0", 3); return (int)(p - out) + 3; }
    const shortest_decimal v = shortest_digits(mantissa, exponent);      /* no trailing 0 */
    char digits[20];
    int n = 0;
    for (uint64_t m = v.digits; m; m /= 10) digits[n++] = (char)('0' + m % 10);    /* reversed */
    const int decpt = n + v.exponent;      /* value = 0.DIGITS x 10^decpt */
    if (decpt <= -4 || decpt > 16) {
        *p++ = digits[n - 1];
        if (n > 1) {
            *p++ = '.';
            for (int k = n - 2; k >= 0; k--) *p++ = digits[k];
        }
        int e = decpt - 1;
        *p++ = 'e';
        *p++ = e < 0 ? '-' : '+';
        if (e < 0) e = -e;
        if (e >= 100) { *p++ = (char)('0' + e / 100); e %= 100; }
        *p++ = (char)('0' + e / 10);
        *p++ = (char)('0' + e % 10);
        return (int)(p - out);
    }
    if (decpt <= 0) {
        *p++ = '0'; *p++ = '.';
        for (int k = 0; k < -decpt; k++) *p++ = '0';
        for (int k = n - 1; k >= 0; k--) *p++ = digits[k];
    } else if (decpt < n) {
        for (int k = n - 1; k >= n - decpt; k--) *p++ = digits[k];
        *p++ = '.';
        for (int k = n - decpt - 1; k >= 0; k--) *p++ = digits[k];
    } else {
        for (int k = n - 1; k >= 0; k--) *p++ = digits[k];
        for (int k = n; k < decpt; k++) *p++ = '0';
        *p++ = '.'; *p++ = '0';
    }
    return (int)(p - out);
}

#endif
