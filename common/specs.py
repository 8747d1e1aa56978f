"""What a behavior looks like: its observation specs and action spec (ML-Agents' BrainParameters).

Env clients declare these in their Hello; the processor validates every BrainInfo against them,
and trainers size their networks from them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.errors import ProtocolError
from common.tensors import dtype_from_wire, dtype_to_wire
from protos import pb

FLOAT32 = np.dtype(np.float32)
"""A vector observation's dtype, and the default of ``ObservationSpec``."""
IMAGE_DTYPES: tuple[np.dtype, ...] = (np.dtype(np.uint8), np.dtype(np.float32))
"""The dtypes an image observation may have: uint8 (0-255, as cameras send it) or float32 (finite)."""


@dataclass(frozen=True)
class ObservationSpec:
    """One observation, ``shape`` without the agent axis: a float32 vector ``[D]`` or an image ``[H, W, C]``.

    An image is uint8 or float32 and stays in that dtype from the wire to the trainer's update
    buffer; networks scale uint8 to [0, 1] at their input (ML-Agents' convention).
    """

    shape: tuple[int, ...]
    dtype: np.dtype = FLOAT32
    """float32 by default; uint8 or float32 for an image."""
    name: str = ""

    @property
    def is_image(self) -> bool:
        """A rank-3 ``[H, W, C]`` observation."""
        return len(self.shape) == 3

    @property
    def nbytes(self) -> int:
        """Bytes of one agent's observation."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class ActionSpec:
    """``continuous_size`` = C dimensions; ``discrete_branches`` = the size of each of B branches."""

    continuous_size: int = 0
    discrete_branches: tuple[int, ...] = ()

    @classmethod
    def continuous(cls, size: int) -> ActionSpec:
        """``size`` continuous dimensions, no discrete branch."""
        return cls(size)

    @classmethod
    def discrete(cls, *branches: int) -> ActionSpec:
        """One discrete branch per argument, of that many choices: ``ActionSpec.discrete(5)``, ``discrete(3, 2)``."""
        return cls(0, tuple(branches))

    @property
    def num_branches(self) -> int:
        """B."""
        return len(self.discrete_branches)

    @property
    def mask_width(self) -> int:
        """M = sum(branches): columns of an action mask."""
        return int(sum(self.discrete_branches))

    def to_proto(self, out: pb.ActionSpec | None = None) -> pb.ActionSpec:
        msg = pb.ActionSpec() if out is None else out
        msg.continuous_size = self.continuous_size
        del msg.discrete_branches[:]
        msg.discrete_branches.extend(self.discrete_branches)
        return msg

    @classmethod
    def from_proto(cls, msg: pb.ActionSpec, where: str = "action_spec") -> ActionSpec:
        if msg.continuous_size < 0:
            raise ProtocolError(f"{where}.continuous_size: {msg.continuous_size} is negative")
        for i, size in enumerate(msg.discrete_branches):
            if size < 1:
                raise ProtocolError(f"{where}.discrete_branches[{i}]: branch size {size} must be >= 1")
        if msg.continuous_size == 0 and not msg.discrete_branches:
            raise ProtocolError(f"{where}: no continuous dimensions and no discrete branches")
        return cls(msg.continuous_size, tuple(msg.discrete_branches))


@dataclass(frozen=True)
class BrainParameters:
    """A behavior's name, observation specs and action spec."""

    behavior_name: str
    observation_specs: tuple[ObservationSpec, ...]
    action_spec: ActionSpec

    def to_proto(self) -> pb.BrainParameters:
        msg = pb.BrainParameters(behavior_name=self.behavior_name)
        for spec in self.observation_specs:
            msg.observation_specs.add(shape=spec.shape, dtype=dtype_to_wire(spec.dtype), name=spec.name)  # type: ignore[arg-type]
        self.action_spec.to_proto(msg.action_spec)
        return msg

    @classmethod
    def from_proto(cls, msg: pb.BrainParameters) -> BrainParameters:
        """Decode and check a declaration.

        Raises:
            ProtocolError: an empty name, no observations, a bad shape, dtype or action spec: a
                vector is one positive dimension of float32, an image three positive dimensions
                ``[H, W, C]`` of uint8 or float32.
        """
        name = msg.behavior_name
        if not name:
            raise ProtocolError("brain_parameters.behavior_name is empty")
        where = f"behavior '{name}'"
        if not msg.observation_specs:
            raise ProtocolError(f"{where}: no observation specs")
        specs = []
        for i, obs in enumerate(msg.observation_specs):
            shape = tuple(int(d) for d in obs.shape)
            dtype = dtype_from_wire(obs.dtype)
            if len(shape) == 3:
                if min(shape) < 1:
                    raise ProtocolError(
                        f"{where}: observation_specs[{i}].shape {list(shape)}: an image [H, W, C] needs positive dimensions"
                    )
                if dtype not in IMAGE_DTYPES:
                    raise ProtocolError(
                        f"{where}: observation_specs[{i}].dtype {dtype.name} must be uint8 or float32"
                        f" for an image {list(shape)}"
                    )
            elif len(shape) != 1 or shape[0] < 1:
                raise ProtocolError(
                    f"{where}: observation_specs[{i}].shape {list(shape)} must be one positive dimension (a vector)"
                    " or three [H, W, C] (an image)"
                )
            elif dtype != np.float32:
                raise ProtocolError(f"{where}: observation_specs[{i}].dtype {dtype.name} must be float32 for a vector")
            specs.append(ObservationSpec(shape, np.dtype(dtype.newbyteorder("=")), obs.name))
        return cls(name, tuple(specs), ActionSpec.from_proto(msg.action_spec, f"{where}: action_spec"))


_BRAIN_INFO_TENSOR_BYTES = 60
"""An upper bound on one encoded ``Tensor`` of a BrainInfo besides its data: tag and length (6), dtype (2),
a packed shape of at most four int64 dimensions (2 + 4 x 10), the data's tag and length (6), and slack."""
_BRAIN_INFO_OVERHEAD_BYTES = 32
"""An upper bound on the ``StepRequest`` and ``BrainInfo`` framing besides the name and the tensors."""


@dataclass(frozen=True)
class BrainInfoSize:
    """The encoded size of one behavior's BrainInfo (raw tensors), as a linear bound in its agent rows N.

    PNG-compressed images take less than their raw bytes (typically a tenth to a half), so the bound
    holds for them too; the SDK measures a message it is about to send instead (``EnvSession.send``).
    """

    fixed_bytes: int
    """What a BrainInfo of any number of rows takes: the StepRequest framing, the name, every tensor's framing."""
    agent_bytes: int
    """What each agent row adds: its observations in their dtypes, the int64 id, float32 reward, done,
    max_reached and the action mask (one byte per column)."""

    def at_most(self, agents: int) -> int:
        """Bytes of a ``StepRequest`` holding a BrainInfo of ``agents`` rows, at most."""
        return self.fixed_bytes + agents * self.agent_bytes

    def agents_within(self, max_bytes: int, agent_bytes: float | None = None) -> int:
        """The most rows whose BrainInfo fits ``max_bytes`` (0 if none), at ``agent_bytes`` a row (default: the bound)."""
        per_agent = self.agent_bytes if agent_bytes is None else agent_bytes
        return max(0, int((max_bytes - self.fixed_bytes) // max(per_agent, 1)))

    @classmethod
    def of(cls, params: BrainParameters) -> BrainInfoSize:
        """The bound for ``params``' BrainInfos (with an action mask when it has discrete branches)."""
        tensors = len(params.observation_specs) + 5
        fixed = _BRAIN_INFO_OVERHEAD_BYTES + len(params.behavior_name.encode("utf-8", "surrogatepass")) + 6
        fixed += tensors * _BRAIN_INFO_TENSOR_BYTES
        agent = sum(spec.nbytes for spec in params.observation_specs) + 8 + 4 + 1 + 1 + params.action_spec.mask_width
        return cls(fixed, agent)
