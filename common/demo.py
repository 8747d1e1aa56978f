"""Reading ML-Agents demonstration (.demo) files: the records, the behavior spec and update-buffer rows.

Format (ML-Agents' ``demo_loader``; messages in ``protos/mlagents_demo.proto``). A file is a series
of records, each a varint byte length followed by one protobuf message:

- offset 0: ``DemonstrationMetaProto`` (api version, name, number of steps and episodes, mean reward);
- byte offset 33: ``BrainParametersProto`` (the behavior name and its action spec);
- then one ``AgentInfoActionPairProto`` per recorded step.

Rules, as ML-Agents 1.1.0's loader applies them unless noted:

- Reading stops at the header's ``number_steps``: bytes after that are ignored (the files Unity
  writes end in a left-over, unprefixed copy of the header). A header of 0 steps reads every
  complete record. *Ours:* a file that ends before the header's count (a cut-off recording) keeps
  its complete records and logs a warning; ``DemoFile.truncated`` records it.
- The action spec comes from ``action_spec``, or, in files from before communicator 1.3, from
  ``vector_action_size_deprecated`` / ``vector_action_space_type_deprecated``. Actions come from
  ``continuous_actions`` / ``discrete_actions``, or, when both are empty, from
  ``vector_actions_deprecated`` (the first C values continuous, the next B discrete).
- Observation shapes come from the first record's agent info, never from the brain parameters
  (which no longer carry them); every record must match them.
- Images are PNG data decoded to floats in [0, 1]; ``common.demo_images`` gives the layout rule for
  files that declare them channels-last. *Ours:* declared sizes are bounded before anything is
  decoded or allocated: ``MAX_IMAGE_PIXELS`` per PNG (from its header) and ``MAX_DECODED_BYTES``
  per file (its observation arrays plus the observation being decoded); see ``common.demo_images``.
- A directory reads every ``*.demo`` file in it, in name order; all must have the same spec.

Update-buffer rows (``demo_to_buffer``) depend on each file's action timing (``common.demo_timing``:
which record holds the action chosen at an observation), detected per file unless
``action_timing`` (the ``demo_action_timing`` config key) names one:

- ``same``, ML-Agents' pairing: one row per record but the last of each file. Row i has the obs,
  action and action mask of record i, the reward and done of record i+1, and the action of record
  i-1 as its previous action. A file of R records gives R - 1 rows (the row from an episode's
  terminal record into the next episode's first is kept, as ML-Agents keeps it).
- ``next`` (Unity's ``storedActions`` order): row i has the obs and action mask of record i, the
  action of record i+1 (the one chosen at obs i), the reward and done of record i+1, and the action
  of record i as its previous action. A pair that would cross an episode boundary (record i done:
  record i+1's action belongs to the next episode) is dropped, and so is the last row when the last
  record stores no action: R - 1 - (done records among the first R - 1) rows, one fewer when the
  last record stores no action and the one before it is not done.

*Ours,* in both: the previous action is zeros at an episode's start (the row after a done, as
``common.trajectory`` rows have it; ML-Agents carries the last episode's action over), rows never
pair records of different files, and the rows also carry ``next_obs_{k}`` (record i+1's obs),
``interrupted`` (record i+1 ended by max step) and ``action_mask``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from common import trajectory as tr
from common.buffer import AgentBuffer
from common.demo_images import MAX_DECODED_BYTES, MAX_IMAGE_PIXELS, DecodeBudget, DemoError, DemoFormatError, decode_image
from common.demo_timing import SAME, DemoActionTiming, TimingEvidence, detect_action_timing
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from protos import mlagents_demo_pb2 as demo_pb

log = logging.getLogger(__name__)

__all__ = [
    "BRAIN_PARAMETERS_OFFSET",
    "MAX_ACTION_WIDTH",
    "MAX_DECODED_BYTES",
    "MAX_IMAGE_PIXELS",
    "SUPPORTED_API_VERSIONS",
    "DemoError",
    "DemoFile",
    "DemoFormatError",
    "DemoNotFoundError",
    "DemoPathError",
    "DemoSpecMismatchError",
    "DemoVersionError",
    "Demonstration",
    "TimingEvidence",
    "check_demo_spec",
    "demo_action_timings",
    "demo_files",
    "demo_summary",
    "demo_to_buffer",
    "encode_demo",
    "file_action_timing",
    "load_demonstration",
]

SUPPORTED_API_VERSIONS = frozenset({0, 1})
BRAIN_PARAMETERS_OFFSET = 33
DEMO_SUFFIX = ".demo"
MAX_ACTION_WIDTH = 1 << 16
"""The most continuous actions, and action-mask columns (sum of branches), a file may declare: the
reader allocates ``records x width`` arrays from the declaration alone."""


class DemoPathError(DemoError):
    """The demonstration path is not a .demo file or a directory holding some."""


class DemoNotFoundError(DemoPathError, FileNotFoundError):
    """The demonstration path does not exist."""


class DemoVersionError(DemoFormatError):
    """The file's header has an api version this reader does not support."""


class DemoSpecMismatchError(DemoError):
    """The demonstration's observations or actions differ from those of the behavior being trained."""


@dataclass(frozen=True)
class DemoFile:
    """One file's header and what was read from it."""

    path: Path
    api_version: int
    name: str
    number_steps: int
    number_episodes: int
    mean_reward: float
    brain_name: str
    pairs: list[demo_pb.AgentInfoActionPairProto] = field(repr=False)
    truncated: bool = False
    """The file ended before the header's ``number_steps`` records."""


@dataclass(frozen=True)
class Demonstration:
    """The records of one .demo file or a directory of them, and the behavior spec they share."""

    spec: BrainParameters
    files: list[DemoFile]

    @property
    def pairs(self) -> list[demo_pb.AgentInfoActionPairProto]:
        return [pair for f in self.files for pair in f.pairs]

    @property
    def records(self) -> int:
        return sum(len(f.pairs) for f in self.files)


# -- paths and records ---------------------------------------------------------------------------


def demo_files(path: str | Path) -> list[Path]:
    """The .demo files at ``path``: the file itself, or a directory's ``*.demo`` files in name order.

    Raises:
        DemoNotFoundError: nothing exists at ``path``.
        DemoPathError: a file without the .demo extension, or a directory without .demo files.
    """
    p = Path(path)
    if not p.exists():
        raise DemoNotFoundError(f"demonstration path {str(p)!r} does not exist")
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix == DEMO_SUFFIX and f.is_file())
        if not files:
            raise DemoPathError(f"demonstration directory {str(p)!r} holds no {DEMO_SUFFIX} files")
        return files
    if p.suffix != DEMO_SUFFIX:
        raise DemoPathError(f"demonstration file {str(p)!r} does not have the {DEMO_SUFFIX} extension")
    return [p]


def _varint(data: bytes, pos: int) -> tuple[int, int] | None:
    """(value, position after it), or None when ``data`` ends inside the varint."""
    value = shift = 0
    while pos < len(data):
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise DemoFormatError(f"varint at byte {pos} is longer than 10 bytes")
    return None


def _record(data: bytes, pos: int) -> tuple[bytes, int] | None:
    """(message bytes, position after them) of the record at ``pos``, or None when it is cut short."""
    head = _varint(data, pos)
    if head is None or head[1] + head[0] > len(data):
        return None
    return data[head[1] : head[1] + head[0]], head[1] + head[0]


def _parse(message: Any, payload: bytes, where: str) -> Any:
    try:
        message.ParseFromString(payload)
    except DecodeError as err:
        raise DemoFormatError(f"{where}: not a valid {type(message).__name__}: {err}") from err
    return message


def _read_file(path: Path) -> tuple[DemoFile, demo_pb.BrainParametersProto]:
    data = path.read_bytes()
    first = _record(data, 0)
    if first is None:
        raise DemoFormatError(f"{path}: too short for a demonstration header ({len(data)} bytes)")
    meta = _parse(demo_pb.DemonstrationMetaProto(), first[0], f"{path}: header")
    if meta.api_version not in SUPPORTED_API_VERSIONS:
        raise DemoVersionError(
            f"{path}: demonstration api version {meta.api_version} is not supported "
            f"(supported: {sorted(SUPPORTED_API_VERSIONS)})"
        )
    if first[1] > BRAIN_PARAMETERS_OFFSET:
        raise DemoFormatError(
            f"{path}: header runs to byte {first[1]}, past the brain parameters at {BRAIN_PARAMETERS_OFFSET}"
        )
    second = _record(data, BRAIN_PARAMETERS_OFFSET)
    if second is None:
        raise DemoFormatError(f"{path}: no brain parameters at byte {BRAIN_PARAMETERS_OFFSET}")
    brain = _parse(demo_pb.BrainParametersProto(), second[0], f"{path}: brain parameters")
    expected = meta.number_steps if meta.number_steps > 0 else None
    pairs: list[demo_pb.AgentInfoActionPairProto] = []
    pos = second[1]
    while pos < len(data) and (expected is None or len(pairs) < expected):
        rec = _record(data, pos)
        if rec is None:
            break
        try:
            pair = demo_pb.AgentInfoActionPairProto.FromString(rec[0])
        except DecodeError as err:
            if expected is None:  # no count to trust: a malformed tail ends the records
                break
            raise DemoFormatError(f"{path}: record {len(pairs)} at byte {pos} is not an AgentInfoActionPair: {err}") from err
        pairs.append(pair)
        pos = rec[1]
    truncated = expected is not None and len(pairs) < expected
    if truncated:
        log.warning("%s: the header counts %d records but the file ends after %d; reading those", path, expected, len(pairs))
    if not pairs:
        raise DemoFormatError(f"{path}: no recorded steps")
    info = DemoFile(
        path=path,
        api_version=meta.api_version,
        name=meta.demonstration_name,
        number_steps=meta.number_steps,
        number_episodes=meta.number_episodes,
        mean_reward=meta.mean_reward,
        brain_name=brain.brain_name,
        pairs=pairs,
        truncated=truncated,
    )
    return info, brain


def spec_from_protos(brain: demo_pb.BrainParametersProto, first: demo_pb.AgentInfoProto) -> BrainParameters:
    """The behavior spec: action spec from the brain parameters, observation shapes from an agent info."""
    observations = tuple(
        ObservationSpec(tuple(int(d) for d in obs.shape), np.dtype(np.float32), obs.name) for obs in first.observations
    )
    new = brain.action_spec
    if new.num_continuous_actions or new.num_discrete_actions:
        actions = ActionSpec(int(new.num_continuous_actions), tuple(int(b) for b in new.discrete_branch_sizes))
    elif brain.vector_action_space_type_deprecated == demo_pb.continuous:
        sizes = list(brain.vector_action_size_deprecated)
        actions = ActionSpec(int(sizes[0]) if sizes else 0, ())
    else:
        actions = ActionSpec(0, tuple(int(b) for b in brain.vector_action_size_deprecated))
    return BrainParameters(brain.brain_name, observations, actions)


def _check_spec(spec: BrainParameters, path: Path) -> None:
    """Refuse sizes no array can have: negative dimensions, branches of < 1 option, widths over ``MAX_ACTION_WIDTH``."""
    for k, obs in enumerate(spec.observation_specs):
        if any(d < 0 for d in obs.shape):
            raise DemoFormatError(f"{path}: observation {k} has the shape {list(obs.shape)}")
    action = spec.action_spec
    if not 0 <= action.continuous_size <= MAX_ACTION_WIDTH or any(b < 1 for b in action.discrete_branches):
        raise DemoFormatError(
            f"{path}: action spec of {action.continuous_size} continuous actions and branches {list(action.discrete_branches)}"
        )
    if action.mask_width > MAX_ACTION_WIDTH:
        raise DemoFormatError(
            f"{path}: discrete branches {list(action.discrete_branches)} have over {MAX_ACTION_WIDTH} options"
        )


def _same_spec(a: BrainParameters, b: BrainParameters) -> bool:
    return a.action_spec == b.action_spec and [o.shape for o in a.observation_specs] == [o.shape for o in b.observation_specs]


def load_demonstration(path: str | Path) -> Demonstration:
    """Read the records of a .demo file or of every .demo file in a directory (module docstring).

    Raises:
        DemoNotFoundError, DemoPathError: see ``demo_files``.
        DemoVersionError: an unsupported api version.
        DemoFormatError: a malformed file, or files whose specs differ.
    """
    files: list[DemoFile] = []
    spec: BrainParameters | None = None
    for one in map(_load_file, demo_files(path)):
        if spec is None:
            spec = one.spec
        elif not _same_spec(spec, one.spec):
            raise DemoFormatError(
                f"{one.files[0].path}: its spec {_describe(one.spec)} differs from {files[0].path}'s {_describe(spec)}"
            )
        files.extend(one.files)
    assert spec is not None
    return Demonstration(spec, files)


def _load_file(path: Path) -> Demonstration:
    """One file's records and its own spec."""
    info, brain = _read_file(path)
    spec = spec_from_protos(brain, info.pairs[0].agent_info)
    _check_spec(spec, path)
    return Demonstration(spec, [info])


def load_demo_files(path: str | Path) -> list[Demonstration]:
    """Each .demo file at ``path`` read on its own, with its own spec (``stepstream demo inspect`` lists a folder
    whose files' specs differ, which ``load_demonstration`` refuses).

    Raises:
        The errors of ``load_demonstration``, except the one for files whose specs differ.
    """
    return [_load_file(p) for p in demo_files(path)]


def specs_agree(demos: Sequence[Demonstration]) -> bool:
    """Whether every one of ``demos`` has the first one's observation shapes and action spec (the loaders' rule)."""
    return all(_same_spec(demos[0].spec, d.spec) for d in demos[1:])


def merge_demonstrations(demos: Sequence[Demonstration]) -> Demonstration:
    """``demos`` (of agreeing specs, ``specs_agree``) as one, as ``load_demonstration`` reads their folder."""
    return Demonstration(demos[0].spec, [f for d in demos for f in d.files])


def _describe(spec: BrainParameters) -> str:
    a = spec.action_spec
    shapes = [list(o.shape) for o in spec.observation_specs]
    return f"(observations {shapes}, {a.continuous_size} continuous actions, discrete branches {list(a.discrete_branches)})"


def check_demo_spec(demo: BrainParameters, expected: BrainParameters, source: str = "demonstration") -> None:
    """Raise ``DemoSpecMismatchError`` unless ``demo`` has ``expected``'s action spec and observation shapes."""
    problems = []
    if demo.action_spec != expected.action_spec:
        da, ea = demo.action_spec, expected.action_spec
        problems.append(
            f"actions: {da.continuous_size} continuous + branches {list(da.discrete_branches)} in the demo, "
            f"{ea.continuous_size} continuous + branches {list(ea.discrete_branches)} expected"
        )
    demo_shapes = [list(o.shape) for o in demo.observation_specs]
    expected_shapes = [list(o.shape) for o in expected.observation_specs]
    if demo_shapes != expected_shapes:
        problems.append(f"observation shapes: {demo_shapes} in the demo, {expected_shapes} expected")
    if problems:
        raise DemoSpecMismatchError(
            f"{source} (behavior {demo.behavior_name!r}) does not fit behavior {expected.behavior_name!r}: "
            + "; ".join(problems)
        )


# -- update-buffer rows --------------------------------------------------------------------------


def _observations(pairs: Sequence[demo_pb.AgentInfoActionPairProto], spec: BrainParameters, path: Path) -> list[np.ndarray]:
    """One float32 array ``[records, *shape]`` per observation, within one ``DecodeBudget`` for the file."""
    budget = DecodeBudget()
    for k, obs_spec in enumerate(spec.observation_specs):
        # The declared shapes alone size the arrays: charge them all before the first is allocated.
        nbytes = len(pairs) * math.prod(obs_spec.shape) * 4
        budget.charge(nbytes, f"observation {k} of shape {list(obs_spec.shape)} in {len(pairs)} records", str(path))
    out = []
    for k, obs_spec in enumerate(spec.observation_specs):
        shape = obs_spec.shape
        try:
            values = np.empty((len(pairs), *shape), dtype=np.float32)
        except (ValueError, MemoryError) as err:  # the declared shape alone sizes it: an absurd one is a format error
            raise DemoFormatError(f"{path}: observation {k} of shape {list(shape)} does not fit in memory: {err}") from None
        for j, pair in enumerate(pairs):
            where = f"{path}: record {j} observation {k}"
            observations = pair.agent_info.observations
            if len(observations) != len(spec.observation_specs):
                raise DemoFormatError(
                    f"{path}: record {j} has {len(observations)} observations, not {len(spec.observation_specs)}"
                )
            obs = observations[k]
            if tuple(obs.shape) != shape:
                raise DemoFormatError(f"{where}: shape {list(obs.shape)} differs from the first record's {list(shape)}")
            if obs.WhichOneof("observation_data") == "compressed_data":
                values[j] = decode_image(obs.compressed_data, shape, list(obs.compressed_channel_mapping), where, budget)
            else:
                flat = np.asarray(obs.float_data.data, dtype=np.float32)
                if flat.size != values[j].size:
                    raise DemoFormatError(f"{where}: {flat.size} values for shape {list(shape)}")
                values[j] = flat.reshape(shape)
        out.append(values)
    return out


def _actions(pairs: Sequence[demo_pb.AgentInfoActionPairProto], spec: ActionSpec, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``[records, C]`` and int32 ``[records, B]``, from the new or the older action fields."""
    c, b = spec.continuous_size, spec.num_branches
    continuous = np.zeros((len(pairs), c), dtype=np.float32)
    discrete = np.zeros((len(pairs), b), dtype=np.int32)
    for j, pair in enumerate(pairs):
        action = pair.action_info
        if len(action.continuous_actions) or len(action.discrete_actions):
            cont: list[float] = list(action.continuous_actions)
            disc: list[float] = list(action.discrete_actions)
        else:
            vector = list(action.vector_actions_deprecated)
            cont, disc = vector[:c], vector[c:]
        if len(cont) != c or len(disc) != b:
            raise DemoFormatError(
                f"{path}: record {j}'s action has {len(cont)} continuous and {len(disc)} discrete values; "
                f"the spec has {c} and {b}"
            )
        continuous[j] = cont
        discrete[j] = disc
    return continuous, discrete


def _action_masks(pairs: Sequence[demo_pb.AgentInfoActionPairProto], spec: ActionSpec, path: Path) -> np.ndarray:
    """float32 ``[records, M]``, 1 = allowed (the wire's ``action_mask`` is True where masked; none: all allowed)."""
    masks = np.ones((len(pairs), spec.mask_width), dtype=np.float32)
    for j, pair in enumerate(pairs):
        masked = pair.agent_info.action_mask
        if len(masked):
            if len(masked) != spec.mask_width:
                raise DemoFormatError(f"{path}: record {j}'s action mask has {len(masked)} entries, not {spec.mask_width}")
            masks[j] = 1.0 - np.asarray(masked, dtype=np.float32)
    return masks


def _has_action(pair: demo_pb.AgentInfoActionPairProto) -> bool:
    action = pair.action_info
    return bool(len(action.continuous_actions) or len(action.discrete_actions) or len(action.vector_actions_deprecated))


def _recorded_actions(demo_file: DemoFile, spec: ActionSpec) -> tuple[np.ndarray, np.ndarray]:
    """The actions of every record, ``[A, C]`` and ``[A, B]``: A = R, or R - 1 when the last record stores none."""
    pairs = demo_file.pairs
    return _actions(pairs if _has_action(pairs[-1]) else pairs[:-1], spec, demo_file.path)


def _done(demo_file: DemoFile) -> np.ndarray:
    return np.array([pair.agent_info.done for pair in demo_file.pairs], dtype=bool)


def file_action_timing(demo_file: DemoFile, spec: BrainParameters) -> TimingEvidence:
    """Detect one file's action timing from its records (``common.demo_timing``).

    Raises:
        DemoFormatError: an observation or action that does not decode.
    """
    continuous, discrete = _recorded_actions(demo_file, spec.action_spec)
    observations = _observations(demo_file.pairs, spec, demo_file.path)
    return detect_action_timing(observations, continuous, discrete, _done(demo_file), spec.action_spec.discrete_branches)


def demo_action_timings(demo: Demonstration) -> list[TimingEvidence]:
    """``file_action_timing`` of each of ``demo``'s files, in its order."""
    return [file_action_timing(f, demo.spec) for f in demo.files]


def _timing_value(action_timing: DemoActionTiming | str) -> str:
    """``auto``, ``same`` or ``next``, or DemoError naming the value."""
    value = action_timing.value if isinstance(action_timing, DemoActionTiming) else action_timing
    allowed = [t.value for t in DemoActionTiming]
    if value not in allowed:
        raise DemoError(f"action_timing must be one of {', '.join(allowed)}, got {action_timing!r}")
    return value


def _file_rows(demo_file: DemoFile, spec: BrainParameters, timing: str) -> dict[str, np.ndarray] | None:
    """The update-buffer rows of one file in ``timing`` (module docstring), or None with no row."""
    pairs = demo_file.pairs
    if len(pairs) < 2:
        return None
    infos = [pair.agent_info for pair in pairs]
    done = _done(demo_file)
    max_step = np.array([info.max_step_reached for info in infos], dtype=bool)
    rewards = np.array([info.reward for info in infos], dtype=np.float32)
    if timing == SAME:
        continuous, discrete = _actions(pairs[:-1], spec.action_spec, demo_file.path)
        rows_at = np.arange(len(pairs) - 1)  # every record but the last
        prev_continuous = np.concatenate([np.zeros_like(continuous[:1]), continuous[:-1]])
        prev_discrete = np.concatenate([np.zeros_like(discrete[:1]), discrete[:-1]])
    else:
        recorded_c, recorded_d = _recorded_actions(demo_file, spec.action_spec)
        # Record i+1's action was chosen at obs i; a done record i would pair it with the next episode's.
        rows_at = np.flatnonzero(~done[: len(recorded_c) - 1])
        continuous, discrete = recorded_c[rows_at + 1], recorded_d[rows_at + 1]
        prev_continuous, prev_discrete = recorded_c[rows_at], recorded_d[rows_at]
    if not len(rows_at):
        return None
    starts = np.r_[True, done[:-1]][rows_at]  # row's record opens the file or follows a done
    rows: dict[str, np.ndarray] = {}
    for k, values in enumerate(_observations(pairs, spec, demo_file.path)):
        rows[tr.obs_key(k)] = values[rows_at]
        rows[tr.next_obs_key(k)] = values[rows_at + 1]
    rows[tr.CONTINUOUS_ACTIONS] = continuous
    rows[tr.DISCRETE_ACTIONS] = discrete
    for key, prev in ((tr.PREV_CONTINUOUS_ACTIONS, prev_continuous), (tr.PREV_DISCRETE_ACTIONS, prev_discrete)):
        prev = prev.copy()
        prev[starts] = 0
        rows[key] = prev
    if spec.action_spec.num_branches:
        rows[tr.ACTION_MASK] = _action_masks(pairs, spec.action_spec, demo_file.path)[rows_at]
    rows[tr.REWARDS] = rewards[rows_at + 1]
    rows[tr.DONE] = done[rows_at + 1]
    rows[tr.INTERRUPTED] = done[rows_at + 1] & max_step[rows_at + 1]
    return rows


def demo_to_buffer(
    path: str | Path,
    sequence_length: int = 1,
    expected_spec: BrainParameters | None = None,
    action_timing: DemoActionTiming | str = DemoActionTiming.AUTO,
) -> tuple[BrainParameters, AgentBuffer]:
    """The spec and update-buffer rows of a .demo file or directory (module docstring).

    With ``sequence_length`` > 1, each episode's rows are cut into sequences of that length (the
    first padded), as ML-Agents resequences them. ``expected_spec``: the behavior being trained;
    its action spec and observation shapes must equal the demo's. ``action_timing``: ``auto``
    detects each file's timing (``file_action_timing``, logged at INFO); ``same`` is ML-Agents'
    pairing for every file; ``next`` pairs each obs with the next record's action.

    Raises:
        DemoSpecMismatchError: the demo does not fit ``expected_spec``.
        DemoError: see ``load_demonstration``; DemoFormatError for an observation that does not
            decode; DemoError for an ``action_timing`` other than auto, same or next.
    """
    if sequence_length < 1:
        raise DemoError(f"sequence_length must be >= 1, got {sequence_length}")
    chosen = _timing_value(action_timing)
    demo = load_demonstration(path)
    if expected_spec is not None:
        check_demo_spec(demo.spec, expected_spec, source=str(path))
    buffer = AgentBuffer()
    for demo_file in demo.files:
        timing = chosen
        if chosen == DemoActionTiming.AUTO.value:
            evidence = file_action_timing(demo_file, demo.spec)
            timing = evidence.timing
            log.info(
                "%s: action timing %s (by %s; %s of record t's action %s, of record t+1's %s)",
                demo_file.path, timing, evidence.decided_by, evidence.metric, evidence.same_fit, evidence.next_fit,
            )  # fmt: skip
        rows = _file_rows(demo_file, demo.spec, timing)
        if rows is None:
            continue
        if sequence_length == 1:
            buffer.extend_rows(rows)
            continue
        ends = [int(i) + 1 for i in np.flatnonzero(rows[tr.DONE])]
        bounds = [0, *ends] if not ends or ends[-1] != len(rows[tr.DONE]) else [0, *ends[:-1]]
        for start, stop in zip(bounds, [*bounds[1:], len(rows[tr.DONE])], strict=True):
            episode = AgentBuffer()
            episode.extend_rows({key: value[start:stop] for key, value in rows.items()})
            episode.resequence_and_append(buffer, training_length=sequence_length)
    if tr.ACTION_MASK in buffer:
        buffer[tr.ACTION_MASK].padding_value = 1.0
    return demo.spec, buffer


# -- summary and writing -------------------------------------------------------------------------


def demo_summary(demo: Demonstration, timings: Sequence[TimingEvidence] | None = None) -> dict[str, Any]:
    """The ``stepstream demo inspect --json`` figures (meanings: ``../shared/yardsticks/README.md``).

    With ``timings`` (``demo_action_timings(demo)``), also ``action_timing``: each file's name mapped
    to its ``TimingEvidence`` as a dict.
    """
    infos = [pair.agent_info for pair in demo.pairs]
    rewards = np.array([info.reward for info in infos], dtype=np.float32)
    return {
        "records": demo.records,
        "episodes_done": sum(1 for info in infos if info.done),
        "sum_reward": round(float(rewards.astype(np.float64).sum()), 6),
        "observation_shapes": [list(o.shape) for o in demo.spec.observation_specs],
        "continuous_actions": demo.spec.action_spec.continuous_size,
        "discrete_branches": list(demo.spec.action_spec.discrete_branches),
    } | ({"action_timing": {f.path.name: t.to_dict() for f, t in zip(demo.files, timings, strict=True)}} if timings else {})


def _length_prefixed(message: Any) -> bytes:
    payload = message.SerializeToString()
    n, head = len(payload), bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        head.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(head) + payload


def encode_demo(
    meta: demo_pb.DemonstrationMetaProto,
    brain: demo_pb.BrainParametersProto,
    pairs: Sequence[demo_pb.AgentInfoActionPairProto],
) -> bytes:
    """The bytes of a .demo file: ``meta`` at 0 (zero-padded to byte 33), ``brain``, then ``pairs``.

    Raises:
        DemoFormatError: ``meta`` does not fit before byte 33 (shorten ``demonstration_name``).
    """
    head = _length_prefixed(meta)
    if len(head) > BRAIN_PARAMETERS_OFFSET:
        raise DemoFormatError(f"demonstration header is {len(head)} bytes; at most {BRAIN_PARAMETERS_OFFSET} fit")
    parts = [head.ljust(BRAIN_PARAMETERS_OFFSET, b"\0"), _length_prefixed(brain)]
    parts.extend(_length_prefixed(pair) for pair in pairs)
    return b"".join(parts)
