"""The EnvironmentParametersChannel bytes of samplers (``envclient.unity.environment_parameters``) are ML-Agents'.

Checked two ways: against bytes ML-Agents 1.1.0's own encoder wrote (``mlagents_envs``'
``EnvironmentParametersChannel`` through its ``SideChannelManager``), pinned below, and, where
``../shared/yardsticks/setup.sh``'s side environment is installed, against that encoder run live.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from common.environment_parameters import ConstantSampler, GaussianSampler, MultiRangeUniformSampler, UniformSampler
from common.errors import ConfigError
from envclient.unity.environment_parameters import sampler_messages

SAMPLERS = {
    "uni": UniformSampler(min_value=0.5, max_value=10.0, seed=10),
    "const": ConstantSampler(value=2.5),
    "gauss": GaussianSampler(mean=1.5, st_dev=0.25, seed=11),
    "multi": MultiRangeUniformSampler(intervals=((0.0, 1.0), (4.0, 6.5)), seed=12),
}
MLAGENTS_SCRIPT = """
from mlagents_envs.side_channel.environment_parameters_channel import EnvironmentParametersChannel
from mlagents_envs.side_channel.side_channel_manager import SideChannelManager
c = EnvironmentParametersChannel()
c.set_float_parameter("const", 2.5)
c.set_gaussian_sampler_parameters("gauss", 1.5, 0.25, 11)
c.set_multirangeuniform_sampler_parameters("multi", [[0.0, 1.0], [4.0, 6.5]], 12)
c.set_uniform_sampler_parameters("uni", 0.5, 10.0, 10)
print(SideChannelManager([c]).generate_side_channel_messages().hex())
"""
MLAGENTS_HEX = (
    "1e894c530f81ea11a9d08224858604001100000005000000636f6e73740000000000002040"
    "1e894c530f81ea11a9d08224858604001d000000050000006761757373010000000b000000010000000000c03f0000803e"
    "1e894c530f81ea11a9d082248586040029000000050000006d756c7469010000000c0000000200000004000000"
    "000000000000803f000080400000d040"
    "1e894c530f81ea11a9d08224858604001b00000003000000756e69010000000a000000000000000000003f00002041"
)
"""What ``MLAGENTS_SCRIPT`` printed with mlagents_envs 1.1.0 (keys in sorted order, as ``sampler_messages`` sends)."""
MLA_PYTHON = Path(
    os.environ.get("STEPSTREAM_MLA_PYTHON", Path.home() / ".cache" / "stepstream-yardsticks" / "mla" / "bin" / "python")
)


def test_sampler_bytes_equal_mlagents_pinned_output() -> None:
    assert sampler_messages(SAMPLERS).hex() == MLAGENTS_HEX


def test_sampler_bytes_equal_mlagents_encoder_run_live() -> None:
    if not MLA_PYTHON.exists():
        pytest.skip(f"no ML-Agents side environment at {MLA_PYTHON} (../shared/yardsticks/setup.sh builds it)")
    out = subprocess.run([str(MLA_PYTHON), "-c", MLAGENTS_SCRIPT], capture_output=True, text=True, timeout=120, check=True)
    assert sampler_messages(SAMPLERS).hex() == out.stdout.strip()


def test_a_non_ascii_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"environment_parameters\.gräte: keys travel as ASCII"):
        sampler_messages({"gräte": ConstantSampler(value=1.0)})
