"""The G1 benchmark's CPU window arithmetic (``benchmarks/grpc_g1.cpu_over_window``), on made-up samples, and its
``--obs`` shapes."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from benchmarks.grpc_g1 import brain_infos, brain_parameters, cpu_over_window, obs_shape


def test_a_steady_rate_gives_rate_times_window() -> None:
    samples = [(t / 10, 0.5 * t / 10) for t in range(0, 101)]  # 0.5 CPU seconds per second, for 10 s
    assert cpu_over_window(samples, 2.0, 6.0) == pytest.approx(2.0)


def test_samples_outside_the_window_do_not_count() -> None:
    # Busy (1 core) before 5 s, idle after: a window inside the idle part spent nothing.
    samples = [(t, min(t, 5.0)) for t in range(11)]
    assert cpu_over_window(samples, 6.0, 10.0) == 0.0
    assert cpu_over_window(samples, 0.0, 4.0) == pytest.approx(4.0)


def test_the_rate_is_extrapolated_to_the_window_edges() -> None:
    # Samples at 1 and 3 s inside a [0.5, 3.5] window: 1 CPU second per second over 3 s.
    assert cpu_over_window([(0.0, 0.0), (1.0, 10.0), (3.0, 12.0), (4.0, 20.0)], 0.5, 3.5) == pytest.approx(3.0)


def test_fewer_than_two_samples_inside_is_nan() -> None:
    assert math.isnan(cpu_over_window([(0.0, 0.0), (5.0, 1.0)], 1.0, 4.0))
    assert math.isnan(cpu_over_window([(0.0, 0.0), (2.0, 1.0), (5.0, 2.0)], 1.0, 4.0))


def test_obs_is_a_vector_size_or_an_image_shape() -> None:
    assert obs_shape("32") == (32,) and obs_shape("84x84x3") == (84, 84, 3)
    for bad in ("84x84", "0x84x3", "axbxc", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="HxWxC"):
            obs_shape(bad)


def test_an_image_obs_shape_gives_uint8_frames_and_a_uint8_spec() -> None:
    from common.tensors import from_tensor

    (spec,) = brain_parameters((36, 40, 3)).observation_specs
    assert spec.shape == (36, 40, 3) and spec.dtype == np.uint8
    (obs,) = next(brain_infos(0, 5, (36, 40, 3))).observations
    frame = from_tensor(obs)
    assert frame.shape == (5, 36, 40, 3) and frame.dtype == np.uint8
    (vector,) = brain_parameters().observation_specs  # the default stays G1's 32 float32
    assert vector.shape == (32,) and vector.dtype == np.float32
