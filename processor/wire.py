"""Decoding and validating the Step stream's messages against a behavior's BrainParameters.

Pure numpy, no gRPC: every check raises a ``ProtocolError`` (or a subclass) whose message names
the behavior, the field and, where there is one, the agent. ``N`` = rows in a BrainInfo.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from common.demo_images import DemoFormatError, decode_hwc
from common.environment_stats import EnvironmentStat, from_protos
from common.errors import IncompatibleVersionError, ProtocolError
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.tensors import dtype_from_wire, from_tensor, to_tensor
from protos import PROTOCOL_VERSION, pb

MAX_ROW_WIDTH = 1 << 16
"""The most values one agent's row may declare: vector observation elements (all vector specs together),
continuous action dimensions, action-mask columns (sum of branches). The processor sizes per-agent buffers
by these widths at hello, so an absurd declaration must be refused there, not met by a failed allocation;
a row this wide already fills a 4 MB message with 16 agents. Images are bounded in bytes instead
(``MAX_FRAME_BYTES``)."""

MAX_FRAME_BYTES = 1 << 20
"""The most bytes one agent's images (every image spec of a behavior together) may take in one step: 1 MiB,
ten 210x160x3 Atari frames, or 512x512x4 uint8. The processor holds one such frame per live agent
(its pending row) and a trajectory holds ``T + 1`` of them, so a frame must leave room for a useful
``time_horizon`` in ``MAX_TRAJECTORY_BYTES``: 1 MiB leaves 7 steps under JetStream's recommended 8 MiB
and 15 under 16 MiB; an 84x84x3 frame (21,168 bytes) leaves 390 steps under 8 MiB."""

MAX_TRAJECTORY_BYTES = 16 * 1024 * 1024
"""The most bytes one encoded trajectory (its ``DeliveryBatch``, ``TrajectorySize``) may take: the topics'
message limit, ``common.topics.grpc_transport.MAX_MESSAGE_BYTES`` (16 MiB), which every trainer's channel
accepts. A server with a smaller ``max_message_bytes`` and a JetStream broker (its ``max_payload`` less
1 KiB; 8 MiB recommended) lower it; ``check_trajectory_fits`` refuses at Hello a behavior whose
trajectory of ``time_horizon`` steps would not fit, images included."""

MAX_CLIENT_ID_BYTES = 256
"""The longest client id (UTF-8 bytes) a Hello may carry. Every trajectory carries its session id (the
client id plus 13 characters) and every log line of the session quotes it, so its length is bounded."""

MAX_BEHAVIOR_NAME_BYTES = 256
"""The longest behavior name (UTF-8 bytes) a Hello may declare or a query may name; topic names, metrics
labels, log lines and every trajectory carry it."""

MAX_BEHAVIORS_PER_HELLO = 64
"""The most behaviors one Hello may declare. Each costs a batcher, a policy follower and two topics
(about 10 KB) and a log line; 10,000 in one Hello stalled every client for seconds."""

MAX_OBSERVATION_SPECS = 64
"""The most observation specs one behavior may declare: every BrainInfo and trajectory carries a tensor
per spec (ML-Agents' behaviors have a handful)."""

QUOTED_CHARS = 64
"""How much of a refused (too long) name an error message or log line quotes."""

_TENSOR_OVERHEAD_BYTES = 40
"""An upper bound on one encoded ``Tensor`` sub-message besides its data: field tag (1) and length (5),
dtype (2), a packed shape of at most two int64 dimensions (2 + 2 x 10), the data's tag (1) and length (5)."""
_IMAGE_TENSOR_EXTRA_BYTES = 20
"""What an image's tensors add to ``_TENSOR_OVERHEAD_BYTES``: two more shape dimensions ([T, H, W, C])."""
_TRAJECTORY_OVERHEAD_BYTES = 512
"""An upper bound on the rest of an encoded ``DeliveryBatch`` of one ``Trajectory``: the delivery tag,
the id's integers, flags, the episode's statistics and every framing, without the two names."""


def quoted(value: str, max_chars: int = QUOTED_CHARS) -> str:
    """``value`` in quotes for a message, cut to ``max_chars`` characters with its full length appended."""
    if len(value) <= max_chars:
        return f"'{value}'"
    return f"'{value[:max_chars]}...' ({len(value.encode('utf-8', 'surrogatepass'))} bytes)"


def check_name(value: str, what: str, max_bytes: int) -> None:
    """Refuse an empty ``value`` or one longer than ``max_bytes`` UTF-8 bytes.

    Raises:
        ProtocolError: the message names ``what``, quotes at most ``QUOTED_CHARS`` of the value and
            gives its length and the limit.
    """
    if not value:
        raise ProtocolError(f"{what} is empty")
    if len(value) > max_bytes or len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise ProtocolError(f"{what} {quoted(value)} is longer than {max_bytes} bytes")


def check_behavior_name(name: str, what: str = "behavior_name") -> None:
    """``check_name`` for a behavior name (``MAX_BEHAVIOR_NAME_BYTES``)."""
    check_name(name, what, MAX_BEHAVIOR_NAME_BYTES)


@dataclass(frozen=True)
class TrajectorySize:
    """The encoded size of one behavior's trajectories, as a linear bound in their length T."""

    fixed_bytes: int
    """What a trajectory of any length takes: names, ids, ``next_obs`` and every tensor's framing."""
    step_bytes: int
    """What each experience adds: obs, actions, log-probs, previous actions, mask, reward, done, version."""

    def at_most(self, time_horizon: int) -> int:
        """Bytes of a ``DeliveryBatch`` holding one trajectory of ``time_horizon`` experiences, at most."""
        return self.fixed_bytes + time_horizon * self.step_bytes

    def longest_within(self, max_bytes: int) -> int:
        """The longest trajectory (experiences) whose ``DeliveryBatch`` fits ``max_bytes``; 0 if none."""
        return max(0, (max_bytes - self.fixed_bytes) // self.step_bytes)

    @classmethod
    def of(cls, params: BrainParameters) -> TrajectorySize:
        """The bound for ``params``, with the longest client id (``MAX_CLIENT_ID_BYTES``) in the session id.

        Per experience: the obs in their dtypes (``O`` bytes: 4 per float32 value, 1 per uint8 pixel),
        float32 continuous actions, log-probs and previous actions (``3 * 4 * C``), int32 discrete actions
        and previous actions and float32 log-probs (``3 * 4 * B``), the bool mask (``M``), float32 reward,
        bool done and int64 policy version (13). Fixed: ``next_obs`` (``O`` again) and the framing.
        """
        obs_bytes = sum(spec.nbytes for spec in params.observation_specs)
        images = sum(spec.is_image for spec in params.observation_specs)
        spec = params.action_spec
        step = obs_bytes + 12 * spec.continuous_size + 12 * spec.num_branches + spec.mask_width + 13
        tensors = 2 * len(params.observation_specs) + 9
        names = MAX_CLIENT_ID_BYTES + 13 + len(params.behavior_name.encode("utf-8", "surrogatepass"))
        framing = tensors * _TENSOR_OVERHEAD_BYTES + 2 * images * _IMAGE_TENSOR_EXTRA_BYTES
        fixed = _TRAJECTORY_OVERHEAD_BYTES + names + framing + obs_bytes
        return cls(fixed, step)


def check_trajectory_fits(params: BrainParameters, time_horizon: int, max_bytes: int) -> None:
    """Refuse a declaration whose longest trajectory could not be delivered in one message.

    A trajectory is cut at ``time_horizon`` experiences at the latest and travels to its subscriber as
    one message; one that cannot would never be delivered.

    Raises:
        ProtocolError: the message gives the bound, the limit and the longest time_horizon that fits.
    """
    size = TrajectorySize.of(params)
    bound = size.at_most(time_horizon)
    if bound > max_bytes:
        raise ProtocolError(
            f"behavior {quoted(params.behavior_name)}: a trajectory of time_horizon {time_horizon} would take up to"
            f" {bound:,} bytes ({size.step_bytes:,} per experience), over the {max_bytes:,}-byte message limit of"
            f" the trajectory topics; declare narrower observations or actions, or set time_horizon to at most"
            f" {size.longest_within(max_bytes)}"
        )


@dataclass(frozen=True)
class Hello:
    client_id: str
    brain_parameters: tuple[BrainParameters, ...]
    team_ids: Mapping[str, int] = field(default_factory=dict)
    """Each behavior's team (``Hello.team_ids``): 0 unless the Hello says otherwise."""


@dataclass(frozen=True)
class DecodedBrainInfo:
    """One behavior's step for one session, checked against its BrainParameters."""

    behavior_name: str
    agent_ids: np.ndarray
    """int64 [N], unique."""
    observations: list[np.ndarray]
    """One [N, *shape] per observation spec in the spec's dtype: float32 (all finite) or uint8 (images)."""
    rewards: np.ndarray
    """float32 [N], finite."""
    done: np.ndarray
    """bool [N]."""
    max_reached: np.ndarray
    """bool [N]; True only where done."""
    action_mask: np.ndarray | None
    """bool [N, M] (True = allowed) with >= 1 option allowed per branch; None if no mask was sent."""
    environment_stats: tuple[EnvironmentStat, ...] = ()
    """The env's own statistics since its previous BrainInfo (``common.environment_stats``)."""

    @property
    def num_agents(self) -> int:
        return len(self.agent_ids)


def decode_hello(msg: pb.Hello) -> Hello:
    """Check the protocol version and declarations of a Hello.

    Raises:
        IncompatibleVersionError: another protocol version.
        ProtocolError: an empty client id or one over ``MAX_CLIENT_ID_BYTES``, none or more than
            ``MAX_BEHAVIORS_PER_HELLO`` behaviors, a name over ``MAX_BEHAVIOR_NAME_BYTES``, more than
            ``MAX_OBSERVATION_SPECS`` observation specs in one behavior, a duplicate
            or malformed behavior declaration, one wider than ``MAX_ROW_WIDTH`` or with images
            over ``MAX_FRAME_BYTES`` per agent.
    """
    if msg.protocol_version != PROTOCOL_VERSION:
        raise IncompatibleVersionError(
            f"client speaks protocol version {msg.protocol_version}; this processor speaks {PROTOCOL_VERSION}"
        )
    check_name(msg.client_id, "hello.client_id", MAX_CLIENT_ID_BYTES)
    if not msg.brain_parameters:
        raise ProtocolError(f"hello from '{msg.client_id}' declares no behaviors")
    if len(msg.brain_parameters) > MAX_BEHAVIORS_PER_HELLO:
        raise ProtocolError(
            f"hello from '{msg.client_id}' declares {len(msg.brain_parameters)} behaviors; at most {MAX_BEHAVIORS_PER_HELLO}"
        )
    for i, bp in enumerate(msg.brain_parameters):  # before decoding: its errors quote the name
        check_behavior_name(bp.behavior_name, f"hello.brain_parameters[{i}].behavior_name")
        if len(bp.observation_specs) > MAX_OBSERVATION_SPECS:
            raise ProtocolError(
                f"behavior '{bp.behavior_name}' declares {len(bp.observation_specs)} observation specs;"
                f" at most {MAX_OBSERVATION_SPECS}"
            )
    params = tuple(BrainParameters.from_proto(bp) for bp in msg.brain_parameters)
    names = [p.behavior_name for p in params]
    if len(set(names)) != len(names):
        raise ProtocolError(f"hello from '{msg.client_id}' declares a behavior twice: {names}")
    for p in params:
        _check_row_width(p)
    return Hello(msg.client_id, params, _team_ids(msg, names))


def _team_ids(msg: pb.Hello, names: list[str]) -> dict[str, int]:
    """Every declared behavior's team: ``msg.team_ids`` where given, else 0.

    Raises:
        ProtocolError: a key that names no behavior of the Hello, or a negative team.
    """
    for name, team in msg.team_ids.items():
        if name not in names:
            raise ProtocolError(f"hello.team_ids[{quoted(name)}]: not a behavior this hello declares ({names})")
        if team < 0:
            raise ProtocolError(f"hello.team_ids[{quoted(name)}]: team {team} is negative")
    return {name: int(msg.team_ids.get(name, 0)) for name in names}


def _check_row_width(params: BrainParameters) -> None:
    images = [(i, spec) for i, spec in enumerate(params.observation_specs) if spec.is_image]
    frame_bytes = sum(spec.nbytes for _, spec in images)
    if frame_bytes > MAX_FRAME_BYTES:
        declared = ", ".join(f"observation_specs[{i}] {spec.dtype.name} {list(spec.shape)}" for i, spec in images)
        raise ProtocolError(
            f"behavior '{params.behavior_name}' declares images of {frame_bytes:,} bytes per agent ({declared});"
            f" at most {MAX_FRAME_BYTES:,} bytes (MAX_FRAME_BYTES)"
        )
    widths = {
        "observation elements": sum(math.prod(spec.shape) for spec in params.observation_specs if not spec.is_image),
        "continuous actions": params.action_spec.continuous_size,
        "action mask columns (sum of branches)": params.action_spec.mask_width,
    }
    for what, width in widths.items():
        if width > MAX_ROW_WIDTH:
            raise ProtocolError(
                f"behavior '{params.behavior_name}' declares {width} {what} per agent; at most {MAX_ROW_WIDTH}"
            )


def _tensor(msg: pb.BrainInfo, field: str, where: str) -> np.ndarray:
    if not msg.HasField(field):  # type: ignore[arg-type]
        raise ProtocolError(f"{where}: field '{field}' is missing")
    try:
        return from_tensor(getattr(msg, field), field)
    except ProtocolError as err:
        raise ProtocolError(f"{where}: {err}") from None


def _agent_ids(msg: pb.BrainInfo, where: str, max_agents: int | None = None) -> np.ndarray:
    ids = _tensor(msg, "agent_ids", where)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise ProtocolError(f"{where}: agent_ids must be an integer vector [N], got {ids.dtype.name} {list(ids.shape)}")
    if max_agents is not None and len(ids) > max_agents:
        raise ProtocolError(f"{where}: {len(ids)} agents in one BrainInfo; at most {max_agents} (max_agents_per_brain_info)")
    ids = ids.astype(np.int64)
    # A set of a few hundred Python ints is cheaper than np.unique's sort; np.unique only on error.
    if len(set(ids.tolist())) != len(ids):
        values, counts = np.unique(ids, return_counts=True)
        raise ProtocolError(f"{where}: duplicate agent ids {values[counts > 1].tolist()} in one BrainInfo")
    return ids


def _first_bad_agent(bad_rows: np.ndarray, ids: np.ndarray) -> int:
    return int(ids[np.flatnonzero(bad_rows)[0]])


def _vector(msg: pb.BrainInfo, field: str, kinds: str, ids: np.ndarray, where: str) -> np.ndarray:
    arr = _tensor(msg, field, where)
    if arr.shape != (len(ids),) or arr.dtype.kind not in kinds:
        raise ProtocolError(f"{where}: {field} must be [{len(ids)}] of kind '{kinds}', got {arr.dtype.name} {list(arr.shape)}")
    return arr


def _observations(msg: pb.BrainInfo, params: BrainParameters, ids: np.ndarray, where: str) -> list[np.ndarray]:
    specs = params.observation_specs
    if len(msg.observations) != len(specs):
        raise ProtocolError(f"{where}: {len(msg.observations)} observations sent, BrainParameters declare {len(specs)}")
    out = []
    for i, (tensor, spec) in enumerate(zip(msg.observations, specs, strict=True)):
        field = f"observations[{i}]"
        if tensor.png:  # PNG-compressed (Unity's form): decoded here, once
            out.append(_png_observation(tensor, spec, ids, field, where))
            continue
        try:
            obs = from_tensor(tensor, field)
        except ProtocolError as err:
            raise ProtocolError(f"{where}: {err}") from None
        expected = (len(ids), *spec.shape)
        if obs.shape != expected or obs.dtype != spec.dtype:
            raise ProtocolError(
                f"{where}: {field} is {obs.dtype.name} {list(obs.shape)},"
                f" BrainParameters declare {spec.dtype.name} {list(expected)}"
            )
        # Any NaN or Inf makes the sum non-finite; only then find the agent (a finite sum that
        # overflows also takes the exact path, which then finds nothing). uint8 images are always finite.
        if obs.dtype.kind == "f" and not math.isfinite(float(obs.sum())):
            finite = np.isfinite(obs).all(axis=tuple(range(1, obs.ndim)))
            if not finite.all():
                raise ProtocolError(f"{where}: {field} of agent {_first_bad_agent(~finite, ids)} is NaN or Inf")
        out.append(obs)
    return out


def _png_observation(tensor: pb.Tensor, spec: ObservationSpec, ids: np.ndarray, field: str, where: str) -> np.ndarray:
    """A PNG-compressed image observation, decoded: ``[N, H, W, C]`` of the spec's dtype (float32: pixels / 255)."""
    if not spec.is_image:
        raise ProtocolError(f"{where}: {field} is PNG-compressed, BrainParameters declare a vector {list(spec.shape)}")
    n = len(ids)
    try:
        dtype = dtype_from_wire(tensor.dtype)
    except ProtocolError as err:
        raise ProtocolError(f"{where}: {field}: {err}") from None
    shape = tuple(tensor.shape)
    if shape != (n, *spec.shape) or dtype != spec.dtype or len(tensor.png) != n or tensor.data:
        raise ProtocolError(
            f"{where}: {field} is PNG-compressed {dtype.name} {list(shape)} with {len(tensor.png)} images"
            f"{' and raw data' if tensor.data else ''}; BrainParameters declare {spec.dtype.name}"
            f" {[n, *spec.shape]}: one PNG entry per agent, no raw data"
        )
    mapping = list(tensor.compressed_channel_mapping)
    out = np.empty((n, *spec.shape), spec.dtype)
    for row, png in enumerate(tensor.png):
        agent = f"{field} of agent {int(ids[row])}"
        try:
            # Bounded before decoding, whatever the PNG headers claim: 4 x MAX_FRAME_BYTES channel values
            # (16 MiB of float32 for a moment) leave room for padding and mapped channels.
            image = decode_hwc(png, spec.shape, mapping, agent, 4 * MAX_FRAME_BYTES, as_uint8=spec.dtype == np.uint8)  # type: ignore[arg-type]
        except DemoFormatError as err:
            raise ProtocolError(f"{where}: {err}") from None
        except Exception as err:  # untrusted bytes into Pillow: any failure is the peer's bad PNG
            raise ProtocolError(f"{where}: {agent}: PNG does not decode: {type(err).__name__}: {err}") from None
        out[row] = image
    return out


def _action_mask(msg: pb.BrainInfo, spec: ActionSpec, ids: np.ndarray, where: str) -> np.ndarray | None:
    if not msg.HasField("action_mask"):
        return None
    mask = _tensor(msg, "action_mask", where)
    if mask.shape != (len(ids), spec.mask_width) or mask.dtype.kind not in "biuf":
        raise ProtocolError(
            f"{where}: action_mask must be [{len(ids)}, {spec.mask_width}] (sum of branches {list(spec.discrete_branches)}),"
            f" got {mask.dtype.name} {list(mask.shape)}"
        )
    allowed = mask != 0
    start = 0
    for b, size in enumerate(spec.discrete_branches):
        empty = ~allowed[:, start : start + size].any(axis=1)
        if empty.any():
            raise ProtocolError(f"{where}: action_mask allows nothing in branch {b} for agent {_first_bad_agent(empty, ids)}")
        start += size
    return allowed


def decode_brain_info(
    msg: pb.BrainInfo, params: BrainParameters, session: str = "", max_agents: int | None = None
) -> DecodedBrainInfo:
    """Decode a BrainInfo and check it against the behavior's BrainParameters (and ``max_agents`` rows at most).

    Raises:
        ProtocolError: the message names the behavior, the field and the agent.
    """
    where = f"behavior '{params.behavior_name}'" + (f" (session {session})" if session else "")
    ids = _agent_ids(msg, where, max_agents)
    observations = _observations(msg, params, ids, where)
    rewards = _vector(msg, "rewards", "f", ids, where).astype(np.float32, copy=False)
    if not math.isfinite(float(rewards.sum())):
        finite = np.isfinite(rewards)
        if not finite.all():
            raise ProtocolError(f"{where}: rewards of agent {_first_bad_agent(~finite, ids)} is NaN or Inf")
    done = _vector(msg, "done", "bu", ids, where).astype(bool)
    max_reached = _vector(msg, "max_reached", "bu", ids, where).astype(bool)
    lonely = max_reached & ~done
    if lonely.any():
        raise ProtocolError(f"{where}: max_reached without done for agent {_first_bad_agent(lonely, ids)}")
    mask = _action_mask(msg, params.action_spec, ids, where)
    return DecodedBrainInfo(
        behavior_name=params.behavior_name,
        agent_ids=ids,
        observations=observations,
        rewards=rewards,
        done=done,
        max_reached=max_reached,
        action_mask=mask if params.action_spec.num_branches else None,
        environment_stats=from_protos(msg.environment_stats, where) if msg.environment_stats else (),
    )


def encode_action_info(
    behavior_name: str, continuous_actions: np.ndarray, discrete_actions: np.ndarray, policy_version: int
) -> pb.ActionInfo:
    """ActionInfo for the env client: ``continuous_actions`` float32 [N, C], ``discrete_actions`` int32 [N, B]."""
    msg = pb.ActionInfo(behavior_name=behavior_name, policy_version=policy_version)
    to_tensor(np.asarray(continuous_actions, dtype=np.float32), msg.continuous_actions)
    to_tensor(np.asarray(discrete_actions, dtype=np.int32), msg.discrete_actions)
    return msg
