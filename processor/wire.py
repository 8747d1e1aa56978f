"""Decoding and validating the Step stream's messages against a behavior's BrainParameters.

Pure numpy, no gRPC: every check raises a ``ProtocolError`` (or a subclass) whose message names
the behavior, the field and, where there is one, the agent. ``N`` = rows in a BrainInfo.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from common.errors import IncompatibleVersionError, ProtocolError
from common.specs import ActionSpec, BrainParameters
from common.tensors import from_tensor, to_tensor
from protos import PROTOCOL_VERSION, pb

MAX_ROW_WIDTH = 1 << 16
"""The most values one agent's row may declare: observation elements (all specs together), continuous
action dimensions, action-mask columns (sum of branches). The processor sizes per-agent buffers by
these widths at hello, so an absurd declaration must be refused there, not met by a failed allocation;
a row this wide already fills a 4 MB message with 16 agents."""


@dataclass(frozen=True)
class Hello:
    client_id: str
    brain_parameters: tuple[BrainParameters, ...]


@dataclass(frozen=True)
class DecodedBrainInfo:
    """One behavior's step for one session, checked against its BrainParameters."""

    behavior_name: str
    agent_ids: np.ndarray
    """int64 [N], unique."""
    observations: list[np.ndarray]
    """One float32 [N, *shape] per observation spec, all finite."""
    rewards: np.ndarray
    """float32 [N], finite."""
    done: np.ndarray
    """bool [N]."""
    max_reached: np.ndarray
    """bool [N]; True only where done."""
    action_mask: np.ndarray | None
    """bool [N, M] (True = allowed) with >= 1 option allowed per branch; None if no mask was sent."""

    @property
    def num_agents(self) -> int:
        return len(self.agent_ids)


def decode_hello(msg: pb.Hello) -> Hello:
    """Check the protocol version and declarations of a Hello.

    Raises:
        IncompatibleVersionError: another protocol version.
        ProtocolError: an empty client id, a duplicate or malformed behavior declaration, or one
            wider than ``MAX_ROW_WIDTH``.
        NotSupportedYetError: image observations.
    """
    if msg.protocol_version != PROTOCOL_VERSION:
        raise IncompatibleVersionError(
            f"client speaks protocol version {msg.protocol_version}; this processor speaks {PROTOCOL_VERSION}"
        )
    if not msg.client_id:
        raise ProtocolError("hello.client_id is empty")
    if not msg.brain_parameters:
        raise ProtocolError(f"hello from '{msg.client_id}' declares no behaviors")
    params = tuple(BrainParameters.from_proto(bp) for bp in msg.brain_parameters)
    names = [p.behavior_name for p in params]
    if len(set(names)) != len(names):
        raise ProtocolError(f"hello from '{msg.client_id}' declares a behavior twice: {names}")
    for p in params:
        _check_row_width(p)
    return Hello(msg.client_id, params)


def _check_row_width(params: BrainParameters) -> None:
    widths = {
        "observation elements": sum(math.prod(spec.shape) for spec in params.observation_specs),
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


def _agent_ids(msg: pb.BrainInfo, where: str) -> np.ndarray:
    ids = _tensor(msg, "agent_ids", where)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise ProtocolError(f"{where}: agent_ids must be an integer vector [N], got {ids.dtype.name} {list(ids.shape)}")
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
        # overflows also takes the exact path, which then finds nothing).
        if not math.isfinite(float(obs.sum())):
            finite = np.isfinite(obs).all(axis=tuple(range(1, obs.ndim)))
            if not finite.all():
                raise ProtocolError(f"{where}: {field} of agent {_first_bad_agent(~finite, ids)} is NaN or Inf")
        out.append(obs)
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


def decode_brain_info(msg: pb.BrainInfo, params: BrainParameters, session: str = "") -> DecodedBrainInfo:
    """Decode a BrainInfo and check it against the behavior's BrainParameters.

    Raises:
        ProtocolError: the message names the behavior, the field and the agent.
    """
    where = f"behavior '{params.behavior_name}'" + (f" (session {session})" if session else "")
    ids = _agent_ids(msg, where)
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
    )


def encode_action_info(
    behavior_name: str, continuous_actions: np.ndarray, discrete_actions: np.ndarray, policy_version: int
) -> pb.ActionInfo:
    """ActionInfo for the env client: ``continuous_actions`` float32 [N, C], ``discrete_actions`` int32 [N, B]."""
    msg = pb.ActionInfo(behavior_name=behavior_name, policy_version=policy_version)
    to_tensor(np.asarray(continuous_actions, dtype=np.float32), msg.continuous_actions)
    to_tensor(np.asarray(discrete_actions, dtype=np.int32), msg.discrete_actions)
    return msg
