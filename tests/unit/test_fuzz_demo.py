"""Bad input, fuzzed: the .demo reader fed arbitrary bytes, well-typed-but-wrong records, and mutated real files.

Three sources of files: random bytes; files built with ``encode_demo`` from drawn protobuf messages
(any api version and step count, action specs with negative or huge sizes, observations of any
shape with too few values, bytes that are not PNG or PNG headers declaring any size, NaN actions,
masks of the wrong width); and the
real ML-Agents files of ``STEPSTREAM_DEMO_DIR`` (as ``test_demo.py`` finds them) with a few bytes
overwritten, inserted or cut. The property: ``load_demonstration`` / ``demo_to_buffer`` /
``demo_summary`` give a valid result (a buffer whose every field has one row per experience) or raise
a ``DemoError`` subclass; never another exception type.

Shapes: ``R`` rows of the update buffer.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common import trajectory as tr
from common.demo import DemoError, DemoFormatError, demo_summary, demo_to_buffer, encode_demo, load_demonstration
from protos import mlagents_demo_pb2 as demo_pb
from tests.unit.test_demo import DEMO_DIR, MANIFEST, png_claiming

INT32 = st.integers(-(2**31), 2**31 - 1)
SIZES = st.one_of(st.integers(-1, 4), st.sampled_from([2**20, 2**31 - 1]), INT32)
FLOATS = st.one_of(st.sampled_from([0.0, 1.0, -1.0, 2.0, math.nan, math.inf, 1e30]), st.floats(width=32))
SMALL_REAL_FILES = sorted(n for n in MANIFEST if (DEMO_DIR / n).stat().st_size < 100_000) if MANIFEST else []


@pytest.fixture(scope="module")
def demo_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one file every example overwrites (a fixture of module scope: Hypothesis reruns the test body)."""
    return tmp_path_factory.mktemp("fuzz") / "fuzzed.demo"


def read_or_refuse(path: Path, data: bytes) -> None:
    """The property: a valid read and buffer, or a DemoError."""
    path.write_bytes(data)
    try:
        demo = load_demonstration(path)
        summary = demo_summary(demo)
        spec, buffer = demo_to_buffer(path, sequence_length=2)
    except DemoError:
        return
    assert summary["records"] == demo.records >= 1
    assert spec == demo.spec
    rows = buffer.num_experiences
    assert buffer.check_length()
    if rows:
        assert buffer[tr.CONTINUOUS_ACTIONS].get_batch().shape == (rows, spec.action_spec.continuous_size)
        assert buffer[tr.DISCRETE_ACTIONS].get_batch().shape == (rows, spec.action_spec.num_branches)
        for k, obs in enumerate(spec.observation_specs):
            assert buffer[tr.obs_key(k)].get_batch().shape == (rows, *obs.shape)


# -- random bytes --------------------------------------------------------------------------------


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_random_bytes(demo_path: Path, data: bytes) -> None:
    read_or_refuse(demo_path, data)


# -- well-typed-but-wrong records ----------------------------------------------------------------


def _png(height: int, width: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height)).save(out, format="PNG")
    return out.getvalue()


PNG_2X3 = _png(2, 3)


@st.composite
def observations(draw: st.DrawFn, shape: list[int]) -> demo_pb.ObservationProto:
    obs = demo_pb.ObservationProto(shape=draw(st.one_of(st.just(shape), st.lists(SIZES, max_size=4))))
    how = draw(st.sampled_from(["floats", "png", "claimed", "bytes"]))
    if how == "floats":
        size = math.prod(shape) if all(d >= 0 for d in shape) else 0
        count = size if size <= 64 and draw(st.booleans()) else draw(st.integers(0, 8))
        obs.float_data.data.extend(draw(st.lists(FLOATS, min_size=count, max_size=count)))
    elif how == "png":
        obs.compressed_data = PNG_2X3 * draw(st.integers(1, 2))
        obs.compressed_channel_mapping.extend(draw(st.lists(st.integers(-2, 3), max_size=6)))
    elif how == "claimed":  # a header declaring any size, gigapixels included, over next to no data
        sides = st.one_of(st.integers(0, 4), st.sampled_from([2, 3, 2048, 5000, 20_000]), st.integers(0, 2**32 - 1))
        obs.compressed_data = png_claiming(draw(sides), draw(sides), draw(st.sampled_from([0, 2, 3, 4, 6, 7])))
    else:
        obs.compressed_data = draw(st.binary(max_size=24))
    return obs


@st.composite
def pairs(draw: st.DrawFn, shape: list[int]) -> demo_pb.AgentInfoActionPairProto:
    info = demo_pb.AgentInfoProto(reward=draw(FLOATS), done=draw(st.booleans()), max_step_reached=draw(st.booleans()))
    info.action_mask.extend(draw(st.lists(st.booleans(), max_size=5)))
    info.observations.extend(draw(st.lists(observations(shape), min_size=1, max_size=2)))
    action = demo_pb.AgentActionProto()
    action.continuous_actions.extend(draw(st.lists(FLOATS, max_size=3)))
    action.discrete_actions.extend(draw(st.lists(SIZES, max_size=3)))
    if draw(st.booleans()):
        action.vector_actions_deprecated.extend(draw(st.lists(FLOATS, max_size=4)))
    return demo_pb.AgentInfoActionPairProto(agent_info=info, action_info=action)


@st.composite
def demo_files(draw: st.DrawFn) -> bytes:
    meta = demo_pb.DemonstrationMetaProto(
        api_version=draw(st.one_of(st.sampled_from([1, 0]), INT32)),
        demonstration_name=draw(st.text(max_size=6)),
        number_steps=draw(st.one_of(st.integers(0, 5), INT32)),
        number_episodes=draw(st.integers(0, 3)),
        mean_reward=draw(FLOATS),
    )
    brain = demo_pb.BrainParametersProto(brain_name=draw(st.text(max_size=6)))
    if draw(st.booleans()):
        brain.action_spec.num_continuous_actions = draw(SIZES)
        branches = draw(st.lists(SIZES, max_size=3))
        brain.action_spec.discrete_branch_sizes.extend(branches)
        brain.action_spec.num_discrete_actions = draw(st.one_of(st.just(len(branches)), SIZES))
    else:
        brain.vector_action_space_type_deprecated = draw(st.sampled_from([demo_pb.continuous, demo_pb.discrete]))
        brain.vector_action_size_deprecated.extend(draw(st.lists(SIZES, max_size=3)))
    shape = draw(
        st.one_of(st.lists(st.integers(1, 3), min_size=1, max_size=1), st.just([3, 2, 3]), st.lists(SIZES, max_size=3))
    )
    records = draw(st.lists(pairs(shape), min_size=1, max_size=5))
    try:
        return encode_demo(meta, brain, records)
    except DemoFormatError:  # a header that does not fit before byte 33: write it anyway
        return meta.SerializeToString() + brain.SerializeToString()


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value encountered:RuntimeWarning")
@settings(max_examples=300)
@given(demo_files())
def test_well_typed_but_wrong_records(demo_path: Path, data: bytes) -> None:
    read_or_refuse(demo_path, data)


@st.composite
def claimed_image_files(draw: st.DrawFn) -> bytes:
    """A valid file but for its PNG headers, which declare any size (gigapixels included) over no data."""
    sides = st.one_of(st.integers(1, 4), st.sampled_from([2048, 2049, 5000, 20_000]), st.integers(0, 2**32 - 1))
    height, width = draw(sides), draw(sides)
    png = png_claiming(width, height, draw(st.sampled_from([0, 2, 3, 4, 6, 7])))
    shape = draw(st.sampled_from([[3, height, width], [height, width, 3], [1, height, width], [3, 84, 84]]))
    meta = demo_pb.DemonstrationMetaProto(api_version=1, number_steps=2)
    brain = demo_pb.BrainParametersProto(brain_name="B", action_spec=demo_pb.ActionSpecProto(num_continuous_actions=1))
    pair = demo_pb.AgentInfoActionPairProto(
        agent_info=demo_pb.AgentInfoProto(observations=[demo_pb.ObservationProto(shape=shape, compressed_data=png)]),
        action_info=demo_pb.AgentActionProto(continuous_actions=[0.0]),
    )
    return encode_demo(meta, brain, [pair, pair])


@settings(max_examples=100)
@given(claimed_image_files())
def test_png_headers_declaring_any_size(demo_path: Path, data: bytes) -> None:
    """Regression: a header over Pillow's bomb limit raised its DecompressionBombError."""
    read_or_refuse(demo_path, data)


# -- real files, mutated -------------------------------------------------------------------------


@st.composite
def mutated_real_files(draw: st.DrawFn) -> bytes:
    data = bytearray((DEMO_DIR / draw(st.sampled_from(SMALL_REAL_FILES))).read_bytes())
    for _ in range(draw(st.integers(1, 4))):
        # Mostly near the start: the header, the brain parameters and the first records decide the spec.
        at = draw(st.one_of(st.integers(0, min(300, len(data) - 1)), st.integers(0, len(data) - 1)))
        how = draw(st.sampled_from(["set", "insert", "delete", "truncate"]))
        if how == "set":
            data[at] = draw(st.integers(0, 255))
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif how == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        else:
            del data[at:]
        if not data:
            break
    return bytes(data)


@pytest.mark.skipif(not SMALL_REAL_FILES, reason=f"no demo files at {DEMO_DIR} (set STEPSTREAM_DEMO_DIR)")
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value encountered:RuntimeWarning")
@settings(max_examples=100)
@given(mutated_real_files())
def test_mutated_real_files(demo_path: Path, data: bytes) -> None:
    read_or_refuse(demo_path, data)


def test_the_fuzzed_reader_reads_the_real_files_unmutated(demo_path: Path) -> None:
    """The mutations' starting point reads (so a refusal above is the mutation's doing)."""
    for name in SMALL_REAL_FILES:
        read_or_refuse(demo_path, (DEMO_DIR / name).read_bytes())
        assert load_demonstration(demo_path).records == MANIFEST[name]["records"]


def _file_with(spec: demo_pb.ActionSpecProto, shape: list[int]) -> bytes:
    meta = demo_pb.DemonstrationMetaProto(api_version=1, number_steps=2)
    brain = demo_pb.BrainParametersProto(brain_name="B", action_spec=spec)
    pair = demo_pb.AgentInfoActionPairProto(
        agent_info=demo_pb.AgentInfoProto(observations=[demo_pb.ObservationProto(shape=shape)]),
        action_info=demo_pb.AgentActionProto(continuous_actions=[0.0]),
    )
    return encode_demo(meta, brain, [pair, pair])


@pytest.mark.parametrize(
    ("spec", "shape", "message"),
    [
        (demo_pb.ActionSpecProto(num_continuous_actions=-1), [1], "action spec of -1 continuous actions"),
        (demo_pb.ActionSpecProto(num_continuous_actions=2**31 - 1), [1], "action spec of 2147483647 continuous"),
        (demo_pb.ActionSpecProto(num_discrete_actions=1, discrete_branch_sizes=[0]), [1], r"branches \[0\]"),
        (demo_pb.ActionSpecProto(num_discrete_actions=1, discrete_branch_sizes=[2**31 - 1]), [1], "have over 65536 options"),
        (demo_pb.ActionSpecProto(num_continuous_actions=1), [-3], r"observation 0 has the shape \[-3\]"),
        (demo_pb.ActionSpecProto(num_continuous_actions=1), [2**31 - 1] * 3, "does not fit in memory"),
    ],
    ids=["negative_continuous", "huge_continuous", "empty_branch", "huge_branch", "negative_dimension", "huge_shape"],
)
def test_sizes_no_array_can_have_are_format_errors(
    demo_path: Path, spec: demo_pb.ActionSpecProto, shape: list[int], message: str
) -> None:
    """Regression (found by the fuzzer): these raised numpy's ValueError (or would allocate gigabytes)."""
    demo_path.write_bytes(_file_with(spec, shape))
    with pytest.raises(DemoFormatError, match=message):
        demo_to_buffer(demo_path)
