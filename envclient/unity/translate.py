"""Unity's messages <-> stepstream's BrainInfo and ActionInfo: the gateway's core, without gRPC or asyncio.

Unity (``RpcCommunicator.cs``, communication version 1.5.0) calls ``Exchange`` with one
``UnityMessageProto`` at a time and waits for the reply:

1. ``unity_output.rl_initialization_output`` (name, versions, capabilities) -> ``initialization_input``
   (seed, versions, our capabilities, number of areas);
2. an empty message -> ``reset_input``: the first RESET, carrying the engine configuration and the
   environment parameters on their side channels;
3. per decision step, ``unity_output.rl_output`` (the agent infos of every behavior, and, with the
   first step in which a behavior has agents, its ``BrainParametersProto`` in
   ``rl_initialization_output``) -> ``step_input``: per behavior, one action for each agent that
   asked for a decision (the agents that are not done), in the order they appear;
4. the Editor's Stop (or the build's shutdown): a message with ``header.status`` 400.

Behavior names are Unity's ``Name?team=N`` (``BehaviorParameters.FullyQualifiedBehaviorName``); the gateway
splits them once (``parse_behavior_id``), and everything past it uses ``Name``. Actions go into
``continuous_actions`` and ``discrete_actions``, and also into ``vector_actions`` for a player without the
hybrid-actions capability (com.unity.ml-agents 1.0.x, communication 1.0.0), which reads only that field.

Per behavior and step (``behavior_step``): agent ids are Unity's (``Agent.m_EpisodeId``, taken once per
agent and kept across its episodes), a ``done`` agent is a terminal row (no action goes back for it), ``max_step_reached`` is
``done`` plus ``max_reached``, and ``action_mask`` (True = masked on Unity's wire) becomes
stepstream's mask (True = allowed). Refused, naming the behavior and the agent: non-finite
observations or rewards, a compression type other than none, a mask whose width is not the sum of
the branches, observations that differ from the declared ones, and group ids or group rewards
(multi-agent groups are not supported yet). Cameras pass through as images ``[H, W, C]``: a PNG one
(Unity's usual form, several PNGs for more than 3 channels, with its ``compressed_channel_mapping``)
as a uint8 image whose PNGs the processor decodes, once; an uncompressed rank-3 one as a float32
image. Unity >= 2.0 declares images channels first ``[C, H, W]`` (older packages ``[H, W, C]``):
the PNG's own height and width (or, uncompressed, ``dimension_properties``) tell which, as the
``.demo`` reader decides (``common.demo_images``). Any other observation rank is refused once,
naming the observation.

An agent that ended its episode since the previous step is there twice, its terminal row first, then
its new episode's decision row: ``split_restarts`` makes two BrainInfos of such a step (docs/architecture.md,
"Trajectory assembly rules").

Shapes: ``N`` agents of one behavior in one step, ``C`` continuous actions, ``B`` branches,
``M = sum(branches)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from common.demo import spec_from_protos
from common.demo_images import DemoFormatError, png_header, split_pngs
from common.errors import NotSupportedYetError, ProtocolError, StepstreamError
from common.specs import BrainParameters, ObservationSpec
from common.tensors import dtype_from_wire, to_png_tensor
from envclient.session import ActionResult, brain_info_message
from envclient.unity.side_channels import UnitySettings, reset_side_channel
from protos import mlagents_demo_pb2 as demo_pb
from protos import mlagents_unity_pb2 as unity_pb
from protos import pb

COMMUNICATION_VERSION = "1.5.0"
"""The ML-Agents communication version the gateway speaks (Unity refuses another major version)."""
PACKAGE_VERSION = "1.1.0"
"""The trainer package version the gateway reports: ML-Agents' own, within the range Unity's package accepts."""
STATUS_OK = 200
STATUS_STOP = 400
"""Unity's status when it ends the session (the Editor's Stop, a build quitting)."""
STATUS_ERROR = 500
"""The gateway's status when it cannot answer a step; Unity then quits."""


class UnityInputError(ProtocolError):
    """A behavior's agent infos cannot be turned into a BrainInfo (the message names behavior and agent)."""


class StepRows(NamedTuple):
    """One behavior's agents in one Unity step, as ``EnvSession.step`` takes them."""

    agent_ids: np.ndarray
    """int64 [N], Unity's ids."""
    observations: list[np.ndarray | pb.Tensor]
    """One float32 [N, *shape] per declared observation; a PNG camera's is a ``Tensor`` of its PNGs."""
    rewards: np.ndarray
    """float32 [N]."""
    done: np.ndarray
    """bool [N]."""
    max_reached: np.ndarray
    """bool [N], done by ``max_step_reached``."""
    action_mask: np.ndarray | None
    """bool [N, M], True = allowed; None when the behavior has no branches or no agent sent a mask."""

    def brain_info(self, behavior_name: str) -> pb.BrainInfo:
        return brain_info_message(
            behavior_name, self.agent_ids, self.observations, self.rewards, self.done, self.max_reached, self.action_mask
        )

    def take(self, rows: np.ndarray) -> StepRows:
        """The rows at the indices ``rows`` (int [K]), in that order."""
        observations: list[np.ndarray | pb.Tensor] = []
        for obs in self.observations:
            if isinstance(obs, pb.Tensor):
                pngs = [obs.png[int(i)] for i in rows]
                shape = (len(rows), *obs.shape[1:])
                observations.append(to_png_tensor(pngs, shape, dtype_from_wire(obs.dtype), obs.compressed_channel_mapping))
            else:
                observations.append(obs[rows])
        mask = None if self.action_mask is None else self.action_mask[rows]
        return StepRows(self.agent_ids[rows], observations, self.rewards[rows], self.done[rows], self.max_reached[rows], mask)


class BehaviorId(NamedTuple):
    """A behavior as Unity names it (``Name?team=N``), split as ML-Agents' ``BehaviorIdentifiers`` splits it."""

    unity_name: str
    """As Unity sends it, and as its actions go back: ``3DBall?team=0``."""
    name: str
    """The behavior: ``3DBall``; its config key, results folder, model and session name."""
    team_id: int
    """Its team (``BehaviorParameters.TeamId``), declared in the Hello (``Hello.team_ids``)."""


def parse_behavior_id(unity_name: str) -> BehaviorId:
    """``Name?team=N`` -> (``Name``, N); a name without ``?`` is team 0 (``BehaviorIdentifiers.from_name_behavior_id``:
    the last ``?`` splits it).

    Raises:
        UnityInputError: a ``?`` not followed by ``team=`` and a non-negative integer, or nothing before it.
    """
    if "?" not in unity_name:
        return BehaviorId(unity_name, unity_name, 0)
    name, query = unity_name.rsplit("?", 1)
    key, _, team = query.partition("=")
    if not name or key != "team" or not (team.isascii() and team.isdigit()):
        raise UnityInputError(f"behavior {unity_name!r}: expected 'Name?team=N' with N an integer >= 0")
    return BehaviorId(unity_name, name, int(team))


def split_restarts(rows: StepRows, name: str) -> list[np.ndarray]:
    """The row indices of the BrainInfos one Unity step becomes, to be sent in order: one, or two when agents
    ended an episode and decide in their next one in this step.

    Unity (``Agent.NotifyAgentDone``) puts an agent's terminal row as soon as its episode ends, and its
    next decision row (same id, ``done`` false) with the next ``SendInfo``: both can reach one exchange,
    terminal first. ML-Agents' Python side splits them (``TerminalSteps`` handled before ``DecisionSteps``);
    here the decision rows of such agents form a second BrainInfo, sent after the first, in which they are
    first sightings (the trajectory rules, unchanged). Each part keeps Unity's row order.

    Raises:
        UnityInputError: an agent twice otherwise (two decision rows, two terminal rows, or a decision before a
            terminal row), naming it.
    """
    ids = rows.agent_ids
    every = np.arange(len(ids))
    if len(np.unique(ids)) == len(ids):  # the usual step: one BrainInfo
        return [every]
    later = np.zeros(len(ids), dtype=bool)
    seen: dict[int, int] = {}
    for i, agent in enumerate(ids.tolist()):
        first = seen.setdefault(agent, i)
        if first == i:
            continue
        if later[first] or not rows.done[first] or rows.done[i]:
            raise UnityInputError(
                f"behavior {name!r}, agent {agent}: reported twice in one step other than terminal, then deciding"
            )
        later[i] = True
    return [every[~later], every[later]]


def merge_actions(n: int, parts: Sequence[np.ndarray], results: Sequence[ActionResult]) -> ActionResult:
    """The answers to the BrainInfos of ``split_restarts`` as one answer to the step's ``n`` rows."""
    if len(parts) == 1:
        return results[0]
    first = results[0]
    continuous = np.zeros((n, first.continuous_actions.shape[1]), first.continuous_actions.dtype)
    discrete = np.zeros((n, first.discrete_actions.shape[1]), first.discrete_actions.dtype)
    for rows, result in zip(parts, results, strict=True):
        continuous[rows] = result.continuous_actions
        discrete[rows] = result.discrete_actions
    return ActionResult(continuous, discrete, max(r.policy_version for r in results))


def capabilities() -> unity_pb.UnityRLCapabilitiesProto:
    """What the gateway handles: hybrid actions; no analytics, variable-length observations or groups."""
    return unity_pb.UnityRLCapabilitiesProto(
        baseRLCapabilities=True,
        concatenatedPngObservations=True,
        compressedChannelMapping=True,
        hybridActions=True,
        trainingAnalytics=False,
        variableLengthObservation=False,
        multiAgentGroups=False,
    )


def initialization_input(settings: UnitySettings) -> unity_pb.UnityInputProto:
    """The reply to Unity's first call."""
    return unity_pb.UnityInputProto(
        rl_initialization_input=unity_pb.UnityRLInitializationInputProto(
            seed=settings.seed,
            communication_version=COMMUNICATION_VERSION,
            package_version=PACKAGE_VERSION,
            capabilities=capabilities(),
            num_areas=settings.num_areas,
        )
    )


def reset_input(settings: UnitySettings) -> unity_pb.UnityInputProto:
    """The reply to Unity's empty second call: RESET, with the engine configuration and environment parameters."""
    return unity_pb.UnityInputProto(
        rl_input=unity_pb.UnityRLInputProto(command=unity_pb.RESET, side_channel=reset_side_channel(settings))
    )


def check_versions(init: unity_pb.UnityRLInitializationOutputProto) -> None:
    """Refuse a Unity package whose communication version's major differs from ours.

    Raises:
        ProtocolError: naming both versions.
    """
    theirs = init.communication_version.split(".")
    if theirs[0] != COMMUNICATION_VERSION.split(".")[0]:
        raise ProtocolError(
            f"Unity '{init.name}' speaks communication version {init.communication_version!r} "
            f"(package {init.package_version!r}); the gateway speaks {COMMUNICATION_VERSION}"
        )


def _obs_label(k: int, obs: demo_pb.ObservationProto) -> str:
    return f"observation {k}" + (f" ({obs.name!r})" if obs.name else "") + f" of shape {list(obs.shape)}"


_TRANSLATIONAL = 2
"""``DimensionPropertyProto.TRANSLATIONAL_EQUIVARIANCE``: a spatial axis (height or width) of an image."""


def _channels_first(obs: demo_pb.ObservationProto, where: str) -> bool:
    """Whether a rank-3 observation is declared ``[C, H, W]`` (Unity >= 2.0) rather than ``[H, W, C]``.

    Raises:
        UnityInputError: a PNG whose size fits neither layout of the declared shape.
    """
    shape = tuple(int(d) for d in obs.shape)
    if obs.compression_type == demo_pb.PNG:
        try:
            height, width, _ = png_header(split_pngs(obs.compressed_data, where)[0], where)
        except DemoFormatError as err:
            raise UnityInputError(str(err)) from None
        if shape[1:] == (height, width):  # checked first, as ML-Agents' reader does
            return True
        if shape[:2] == (height, width):
            return False
        raise UnityInputError(
            f"{where}: declared shape {list(shape)} fits neither [C, H, W] nor [H, W, C] of its {height}x{width} PNG"
        )
    spatial = [p == _TRANSLATIONAL for p in obs.dimension_properties]
    return spatial == [False, True, True]


def _image_spec(obs: demo_pb.ObservationProto, where: str) -> ObservationSpec:
    """The ``[H, W, C]`` spec of a camera observation: uint8 when PNG-compressed, else float32."""
    shape = tuple(int(d) for d in obs.shape)
    hwc = (shape[1], shape[2], shape[0]) if _channels_first(obs, where) else shape
    dtype = np.uint8 if obs.compression_type == demo_pb.PNG else np.float32
    return ObservationSpec(hwc, np.dtype(dtype), obs.name)


def behavior_spec(brain: demo_pb.BrainParametersProto, first: demo_pb.AgentInfoProto) -> BrainParameters:
    """A behavior's spec: actions from its brain parameters, observation shapes from its first agent info, named
    by the behavior alone (``Name`` of Unity's ``Name?team=N``, ``parse_behavior_id``).

    Raises:
        NotSupportedYetError: an observation neither a vector nor a rank-3 image, naming it.
        UnityInputError: a PNG that fits neither image layout of its declared shape.
        ProtocolError: a spec the processor would refuse (no observations, no actions, ...).
    """
    name = parse_behavior_id(brain.brain_name).name
    brain = _renamed(brain, name)
    for k, obs in enumerate(first.observations):
        if len(obs.shape) not in (1, 3):
            raise NotSupportedYetError(
                f"behavior {name!r}: {_obs_label(k, obs)} is neither a vector nor an image [C, H, W]; not supported yet"
            )
    spec = spec_from_protos(brain, first)  # the .demo reader's rule: the same messages, the same spec
    observations = tuple(
        _image_spec(obs, f"behavior {name!r}, {_obs_label(k, obs)}") if len(obs.shape) == 3 else declared
        for k, (obs, declared) in enumerate(zip(first.observations, spec.observation_specs, strict=True))
    )
    spec = BrainParameters(spec.behavior_name, observations, spec.action_spec)
    return BrainParameters.from_proto(spec.to_proto())  # the processor's own checks, with its messages


def _renamed(brain: demo_pb.BrainParametersProto, name: str) -> demo_pb.BrainParametersProto:
    if brain.brain_name == name:
        return brain
    renamed = demo_pb.BrainParametersProto()
    renamed.CopyFrom(brain)
    renamed.brain_name = name
    return renamed


def _camera_rows(spec: BrainParameters, infos: Sequence[demo_pb.AgentInfoProto], k: int, name: str) -> pb.Tensor | np.ndarray:
    """Observation ``k`` (an image) of every agent: its PNGs as a ``Tensor`` the processor decodes, or float32
    ``[N, H, W, C]`` from uncompressed data (transposed from ``[C, H, W]`` where Unity declares that)."""
    image = spec.observation_specs[k]
    height, width, channels = image.shape
    chw, hwc = (channels, height, width), (height, width, channels)
    pngs: list[bytes] = []
    values = np.empty((len(infos), *hwc), np.float32)
    mapping: list[int] | None = None
    for i, info in enumerate(infos):
        obs, where = info.observations[k], f"behavior {name!r}, agent {info.id}"
        shape = tuple(obs.shape)
        if shape not in (chw, hwc):
            raise UnityInputError(f"{where}: {_obs_label(k, obs)} differs from the declared image {list(hwc)}")
        if image.dtype == np.uint8:
            if obs.compression_type != demo_pb.PNG:
                raise UnityInputError(f"{where}: {_obs_label(k, obs)} is not PNG-compressed like the behavior's first")
            if mapping is None:
                mapping = list(obs.compressed_channel_mapping)
            elif list(obs.compressed_channel_mapping) != mapping:
                raise UnityInputError(f"{where}: {_obs_label(k, obs)} has another compressed_channel_mapping")
            pngs.append(obs.compressed_data)
            continue
        if obs.compression_type != demo_pb.NONE:
            raise UnityInputError(f"{where}: {_obs_label(k, obs)} is compressed, the behavior's first was not")
        data = np.asarray(obs.float_data.data, dtype=np.float32)
        if data.size != values[i].size:
            raise UnityInputError(f"{where}: {_obs_label(k, obs)} carries {data.size} values")
        first_chw = shape == chw and (shape != hwc or _channels_first(obs, where))
        values[i] = np.moveaxis(data.reshape(chw), 0, 2) if first_chw else data.reshape(hwc)
    if image.dtype == np.uint8:
        return to_png_tensor(pngs, (len(infos), *hwc), np.uint8, mapping or ())
    return values


def _agent_observation(spec: BrainParameters, info: demo_pb.AgentInfoProto, k: int, where: str) -> list[float]:
    obs = info.observations[k]
    shape = spec.observation_specs[k].shape
    if obs.compression_type != demo_pb.NONE:
        kind = "PNG" if obs.compression_type == demo_pb.PNG else f"unknown ({obs.compression_type})"
        raise UnityInputError(f"{where}: {_obs_label(k, obs)} has compression type {kind}; only float data is read")
    if tuple(obs.shape) != shape:
        raise UnityInputError(f"{where}: {_obs_label(k, obs)} differs from the declared shape {list(shape)}")
    values = list(obs.float_data.data)
    if len(values) != math.prod(shape):
        raise UnityInputError(f"{where}: {_obs_label(k, obs)} carries {len(values)} values")
    return values


def behavior_step(spec: BrainParameters, infos: Sequence[demo_pb.AgentInfoProto]) -> StepRows:
    """One behavior's agent infos of one step, as BrainInfo rows (module docstring for the rules).

    Well-formed steps of vector observations take ``_rows_at_once`` (whole-step numpy conversions, a few
    attribute reads per agent: it was most of the gateway's own time per Exchange); any other step is
    read agent by agent (``_rows_by_agent``), which names the first bad agent. Both give the same rows,
    and check finiteness in the same order (rewards, then each observation).

    Raises:
        UnityInputError: bad input, naming the behavior and the agent.
        NotSupportedYetError: an agent in a multi-agent group (a group id or group reward).
    """
    rows = _rows_at_once(spec, infos)
    if rows is None:
        return _rows_by_agent(spec, infos)
    name = spec.behavior_name
    _check_finite(name, rows.agent_ids, rows.rewards, "reward")
    for k, values in enumerate(rows.observations):
        if isinstance(values, np.ndarray):  # always, on this path (vectors only)
            _check_finite(name, rows.agent_ids, values, f"observation {k}")
    return rows


def _rows_at_once(spec: BrainParameters, infos: Sequence[demo_pb.AgentInfoProto]) -> StepRows | None:
    """The rows of a step of vector observations every agent of which is well formed (finiteness aside);
    None for any other step (an image, a group, a bad shape, count or compression, masks on some agents only)."""
    if not _vectors_alone(spec, infos):
        return None
    observations = _observations_at_once(spec.observation_specs, infos)
    if observations is None:
        return None
    uniform, mask = _masks_at_once(spec.action_spec.mask_width, infos)
    if not uniform:
        return None
    n = len(infos)
    agent_ids = np.fromiter((info.id for info in infos), dtype=np.int64, count=n)
    rewards = np.fromiter((info.reward for info in infos), dtype=np.float32, count=n)
    done = np.fromiter((info.done for info in infos), dtype=bool, count=n)
    max_reached = done & np.fromiter((info.max_step_reached for info in infos), dtype=bool, count=n)
    return StepRows(agent_ids, observations, rewards, done, max_reached, mask)


def _vectors_alone(spec: BrainParameters, infos: Sequence[demo_pb.AgentInfoProto]) -> bool:
    """Whether the step holds only vector observations, as many as declared for every agent, and no group."""
    specs = spec.observation_specs
    if any(o.is_image for o in specs):
        return False
    return not any(info.group_id or info.group_reward or len(info.observations) != len(specs) for info in infos)


def _observations_at_once(
    specs: Sequence[ObservationSpec], infos: Sequence[demo_pb.AgentInfoProto]
) -> list[np.ndarray | pb.Tensor] | None:
    """Each vector observation of every agent as one float32 ``[N, *shape]`` array; None when an agent's is
    compressed or of another size or shape."""
    observations: list[np.ndarray | pb.Tensor] = []
    for k, obs_spec in enumerate(specs):
        shape = list(obs_spec.shape)
        size = math.prod(shape)
        values: list[float] = []
        for info in infos:
            obs = info.observations[k]
            data = obs.float_data.data
            if obs.compression_type != demo_pb.NONE or len(data) != size or obs.shape != shape:
                return None
            values.extend(data)
        observations.append(np.asarray(values, dtype=np.float32).reshape((len(infos), *shape)))
    return observations


def _masks_at_once(width: int, infos: Sequence[demo_pb.AgentInfoProto]) -> tuple[bool, np.ndarray | None]:
    """``(uniform, mask)``: whether every agent has a mask of ``width`` entries (``mask``: bool ``[N, width]``, True =
    allowed) or none has one (``mask`` None); not ``uniform`` (some agents without one, or a wrong width) is read
    agent by agent."""
    masks = [info.action_mask for info in infos]
    lengths = {len(m) for m in masks}
    if lengths == {width} and width:
        return True, np.logical_not(np.asarray([list(m) for m in masks], dtype=bool).reshape(len(infos), width))
    return lengths <= {0}, None


def _rows_by_agent(spec: BrainParameters, infos: Sequence[demo_pb.AgentInfoProto]) -> StepRows:
    """``behavior_step``'s rows read agent by agent, raising for the first bad agent (module docstring)."""
    name = spec.behavior_name
    n = len(infos)
    vectors = {k: np.empty((n, *o.shape), np.float32) for k, o in enumerate(spec.observation_specs) if not o.is_image}
    mask = np.ones((n, spec.action_spec.mask_width), dtype=bool)
    any_mask = False
    for i, info in enumerate(infos):
        where = f"behavior {name!r}, agent {info.id}"
        _check_agent(spec, info, where)
        for k, values in vectors.items():
            values[i] = np.asarray(_agent_observation(spec, info, k, where), dtype=np.float32).reshape(values.shape[1:])
        row = _agent_mask(spec, info, where)
        if row is not None:
            mask[i] = row
            any_mask = True
    agent_ids = np.array([info.id for info in infos], dtype=np.int64)
    rewards = np.array([info.reward for info in infos], dtype=np.float32)
    _check_finite(name, agent_ids, rewards, "reward")
    observations = _observations_by_agent(spec, infos, vectors, agent_ids)
    done = np.array([info.done for info in infos], dtype=bool)
    max_reached = done & np.array([info.max_step_reached for info in infos], dtype=bool)
    return StepRows(agent_ids, observations, rewards, done, max_reached, mask if any_mask else None)


def _check_agent(spec: BrainParameters, info: demo_pb.AgentInfoProto, where: str) -> None:
    """Refuse an agent in a group, or with another count of observations than declared."""
    if info.group_id or info.group_reward:
        raise NotSupportedYetError(
            f"{where}: group id {info.group_id}, group reward {info.group_reward}; multi-agent groups are not supported yet"
        )
    if len(info.observations) != len(spec.observation_specs):
        raise UnityInputError(f"{where}: {len(info.observations)} observations, {len(spec.observation_specs)} declared")


def _agent_mask(spec: BrainParameters, info: demo_pb.AgentInfoProto, where: str) -> np.ndarray | None:
    """The agent's action mask, bool ``[width]`` with True = allowed (Unity sends True = masked); None without one.

    Raises:
        UnityInputError: a mask of another width than the branches need.
    """
    if not len(info.action_mask):
        return None
    width = spec.action_spec.mask_width
    if len(info.action_mask) != width:
        raise UnityInputError(
            f"{where}: the action mask has {len(info.action_mask)} entries; "
            f"the branches {list(spec.action_spec.discrete_branches)} need {width}"
        )
    return np.logical_not(np.asarray(info.action_mask, dtype=bool))


def _observations_by_agent(
    spec: BrainParameters,
    infos: Sequence[demo_pb.AgentInfoProto],
    vectors: dict[int, np.ndarray],
    agent_ids: np.ndarray,
) -> list[np.ndarray | pb.Tensor]:
    """The step's observations in declared order: the vectors read (checked finite here), the cameras' images."""
    name = spec.behavior_name
    observations = [
        vectors[k] if k in vectors else _camera_rows(spec, infos, k, name) for k in range(len(spec.observation_specs))
    ]
    for k, obs in enumerate(observations):
        if isinstance(obs, np.ndarray):  # PNGs are checked where they are decoded
            _check_finite(name, agent_ids, obs, f"observation {k}")
    return observations


def _check_finite(name: str, agent_ids: np.ndarray, values: np.ndarray, what: str) -> None:
    finite = np.isfinite(values).reshape(len(agent_ids), -1).all(axis=1)
    if not finite.all():
        bad = int(agent_ids[int(np.flatnonzero(~finite)[0])])
        raise UnityInputError(f"behavior {name!r}, agent {bad}: {what} is NaN or Inf")


def fill_actions(
    done: np.ndarray,
    result: ActionResult,
    out: unity_pb.UnityRLInputProto.ListAgentActionProto,
    vector_actions: bool = False,
) -> None:
    """Append one ``AgentActionProto`` per agent that is not done, in row order (Unity's decision order).

    Args:
        done: bool [N], the rows' done flags.
        result: the processor's answer to those N rows (float32 [N, C], int32 [N, B]).
        vector_actions: also fill ``vector_actions_deprecated`` (the continuous values, then the discrete ones as
            floats), the only field a player without the hybrid-actions capability reads (com.unity.ml-agents
            1.0.x, communication 1.0.0), as ML-Agents' Python side fills it.
    """
    continuous, discrete = result.continuous_actions, result.discrete_actions
    if len(continuous) != len(done) or len(discrete) != len(done):
        raise StepstreamError(f"the processor answered {len(continuous)} rows for {len(done)} agents")
    asking = ~np.asarray(done, dtype=bool)
    # One tolist per array and one constructor per agent: a field-by-field fill costs several times more.
    action = demo_pb.AgentActionProto
    if vector_actions:
        out.value.extend(
            action(continuous_actions=c, discrete_actions=d, vector_actions_deprecated=c + d)
            for c, d in zip(continuous[asking].tolist(), discrete[asking].tolist(), strict=True)
        )
        return
    out.value.extend(
        action(continuous_actions=c, discrete_actions=d)
        for c, d in zip(continuous[asking].tolist(), discrete[asking].tolist(), strict=True)
    )
