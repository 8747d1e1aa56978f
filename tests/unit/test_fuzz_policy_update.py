"""Bad input, fuzzed: PolicyUpdates whose fields are well-typed but wrong, straight into ``Policy.from_update``.

This is the validation ``PublishPolicy`` runs before a policy reaches the topic (and the processor's
policy follower runs on every update). Each example starts from a real exported MLP's update and
changes a few fields: the format, the model bytes (empty, random, cut short, another behavior's
model), the normaliser states (wrong count, shape or dtype, NaN, negative variance), ``clip``,
``tanh_squash`` and the action spec. The property: a ``Policy`` that acts with exactly the declared
shapes, or a ``StepstreamError`` that the servicer maps to a status other than INTERNAL/UNKNOWN.

Shapes: ``C`` continuous size, ``B`` branches, ``M = sum(branches)``.
"""

from __future__ import annotations

import functools
import math

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import StepstreamError
from common.tensors import to_tensor
from processor.inference import Policy
from processor.servicer import status_for
from protos import pb
from tests.assembly_cases import CONTINUOUS, HYBRID
from tests.policies import build_mlp_policy_update
from tests.unit.test_fuzz_decode import SIZES, tensors

NOT_CLEAN = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
ROWS = 3


@functools.cache
def base_update(behavior: str) -> pb.PolicyUpdate:
    """A real policy for Walker (obs [2], C = 2) or Gridder (obs [2], C = 1, branches [3, 2])."""
    params = CONTINUOUS if behavior == "Walker" else HYBRID
    shapes = [spec.shape for spec in params.observation_specs]
    return build_mlp_policy_update(behavior, shapes, params.action_spec.to_proto(), 1, 0, clip=3.0)


@pytest.fixture(scope="module", autouse=True)
def _built_models() -> None:
    """Build (and cache) both models before Hypothesis draws: Keras uses ``random``, which strategies must not."""
    base_update("Walker")
    base_update("Gridder")


@st.composite
def normalizer_states(draw: st.DrawFn) -> pb.NormalizerState:
    state = pb.NormalizerState(count=draw(st.integers(-1, 10)))
    if draw(st.booleans()):  # the right shape, maybe bad values
        values = st.sampled_from([0.0, 1.0, -1.0, math.nan, math.inf, 1e-45])
        to_tensor(np.array(draw(st.lists(values, min_size=2, max_size=2)), np.float32), state.mean)
        to_tensor(np.array(draw(st.lists(values, min_size=2, max_size=2)), np.float32), state.variance)
    else:
        state.mean.CopyFrom(draw(tensors()))
        state.variance.CopyFrom(draw(tensors()))
    return state


@st.composite
def policy_updates(draw: st.DrawFn) -> pb.PolicyUpdate:
    behavior = draw(st.sampled_from(["Walker", "Gridder"]))
    msg = pb.PolicyUpdate()
    msg.CopyFrom(base_update(behavior))
    artifact = msg.artifact
    changes = draw(st.sets(st.sampled_from(["model", "normalizers", "action_spec", "clip", "format"]), min_size=1))
    if "model" in changes:
        other = base_update("Gridder" if behavior == "Walker" else "Walker").artifact.model
        how = draw(st.sampled_from(["other", "cut", "empty", "random"]))
        if how == "other":
            artifact.model = other
        elif how == "cut":
            artifact.model = artifact.model[: draw(st.integers(0, len(artifact.model) - 1))]
        else:
            artifact.model = b"" if how == "empty" else draw(st.binary(min_size=1, max_size=64))
    if "normalizers" in changes:
        del artifact.normalizers[:]
        artifact.normalizers.extend(draw(st.lists(normalizer_states(), max_size=2)))
    if "action_spec" in changes:
        artifact.action_spec.continuous_size = draw(SIZES)
        del artifact.action_spec.discrete_branches[:]
        artifact.action_spec.discrete_branches.extend(draw(st.lists(SIZES, max_size=3)))
    if "clip" in changes:
        artifact.clip = draw(st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, 1e-30, 3.0]))
        artifact.tanh_squash = draw(st.booleans())
    if "format" in changes:
        artifact.format = draw(st.one_of(st.sampled_from(["", "TFLITE", "savedmodel", "tflite "]), st.text(max_size=6)))
    return msg


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@settings(max_examples=150)
@given(policy_updates())
def test_policy_update_loads_a_policy_that_acts_or_is_refused_cleanly(update: pb.PolicyUpdate) -> None:
    try:
        policy = Policy.from_update(update)
    except StepstreamError as err:
        assert status_for(err) not in NOT_CLEAN, f"{type(err).__name__} maps to {status_for(err).name}: {err}"
        return
    spec = policy.action_spec
    c, b = spec.continuous_size, len(spec.discrete_branches)
    observations = [np.zeros((ROWS, *shape), np.float32) for shape in policy.observation_shapes]
    mask = np.ones((ROWS, sum(spec.discrete_branches)), np.bool_) if b else None
    out = policy.act(observations, mask, np.random.default_rng(0))
    for name, value, dtype, width in (
        ("env_continuous_actions", out.env_continuous_actions, np.float32, c),
        ("continuous_actions", out.continuous_actions, np.float32, c),
        ("continuous_log_probs", out.continuous_log_probs, np.float32, c),
        ("discrete_actions", out.discrete_actions, np.int32, b),
        ("discrete_log_probs", out.discrete_log_probs, np.float32, b),
    ):
        assert value.dtype == dtype and value.shape == (ROWS, width), f"{name}: {value.dtype} {value.shape}"
    assert ((out.discrete_actions >= 0) & (out.discrete_actions < np.array(spec.discrete_branches, np.int32))).all()


def model_with_a_name_that_is_not_utf8() -> bytes:
    """The Walker model with the first byte of its last ``obs_0`` (the input tensor's own name) made 0xFF."""
    model = bytearray(base_update("Walker").artifact.model)
    model[model.rindex(b"obs_0")] = 0xFF
    return bytes(model)


def test_a_model_whose_tensor_names_are_not_utf8_is_refused() -> None:
    """Found by fuzzing the model bytes: the runtime's UnicodeDecodeError escaped, and PublishPolicy answered UNKNOWN."""
    update = pb.PolicyUpdate()
    update.CopyFrom(base_update("Walker"))
    update.artifact.model = model_with_a_name_that_is_not_utf8()
    with pytest.raises(StepstreamError):
        Policy.from_update(update)
