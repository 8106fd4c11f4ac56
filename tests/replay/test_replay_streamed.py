"""The streamed replay of an elementwise op (chunks, the kernel in slices, storage rounding
skipped where it is the identity) gives exactly the numbers of the whole-array path."""

from __future__ import annotations

import numpy as np

from precision_shell.analysis.replay.engine import OpCase, replay, run_kernel
from precision_shell.analysis.replay.kernels import kernel_for
from precision_shell.analysis.replay.metrics import CHUNK, cosine, max_ulps, rel_rmse
from precision_shell.analysis.replay.profiles import DEFAULT_PROFILES, EXACT, parse_profile
from precision_shell.analysis.replay.rounding import FORMATS, holds, quantize


def _add_case(rng: np.random.Generator, n: int) -> OpCase:
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    a[::97] *= 1e-5            # fp16 subnormals: ftz flushes them
    a[5], b[7] = np.inf, np.nan
    a16, b16 = a.astype(np.float16), b.astype(np.float16)
    npu = (a16.astype(np.float32) + b16.astype(np.float32)).astype(np.float16)
    npu[::13] = np.nextafter(npu[::13], np.float16(np.inf))   # a device one ulp off here and there
    golden = a + b
    golden[11] = np.inf        # a non-finite golden element: left out of the error vs golden
    return OpCase("t/Add", "Add", {}, [a16, b16], [npu], ["float16"], [golden], [], [])


def test_streamed_replay_has_the_whole_array_numbers():
    rng = np.random.default_rng(7)
    case = _add_case(rng, 2 * CHUNK + 70001)   # two chunk boundaries and a short last slice
    profiles = [parse_profile(t) for t in DEFAULT_PROFILES]
    kernel = kernel_for("Add")
    verdict = replay(kernel, case, profiles, 0.98)
    expected = []
    for profile in [EXACT] + profiles:
        y = run_kernel(kernel, case, profile)[0]   # whole arrays, every rounding step done
        expected.append((profile.name, max_ulps(y, case.outputs[0], "float16"),
                         rel_rmse(y, case.goldens[0]), cosine(y, case.goldens[0])))
    got = [(c.profile, c.error_vs_npu, c.error_vs_golden, c.cosine) for c in verdict.candidates]
    assert [g[0] for g in got] == [e[0] for e in expected]
    np.testing.assert_array_equal(np.array([g[1:] for g in got]), np.array([e[1:] for e in expected]))
    assert verdict.npu_error_vs_golden == rel_rmse(case.outputs[0], case.goldens[0])
    assert len({c.error_vs_npu for c in verdict.candidates}) > 2   # the profiles do differ here


def test_holds_says_exactly_when_rounding_to_a_format_changes_nothing():
    rng = np.random.default_rng(1)
    samples = np.concatenate([rng.standard_normal(20000) * 10.0 ** rng.integers(-45, 40, 20000),
                              [0.0, -0.0, np.inf, -np.inf]])
    for narrow in FORMATS:
        values = quantize(samples, narrow)   # values of the narrow format, subnormals included
        for wide in FORMATS:
            same = all(np.array_equal(quantize(values, wide, toward_zero=tz, ftz=ftz), values, equal_nan=True)
                       for tz in (False, True) for ftz in (False, True)
                       if not (ftz and np.any((values != 0) & (np.abs(values) < 2.0 ** FORMATS[wide][1]))))
            exact = np.array_equal(quantize(values, wide), values, equal_nan=True)
            assert holds(wide, narrow) == exact, (wide, narrow)
            if holds(wide, narrow):
                assert same, (wide, narrow)
