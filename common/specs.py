"""What a behavior looks like: its observation specs and action spec (ML-Agents' BrainParameters).

Env clients declare these in their Hello; the processor validates every BrainInfo against them,
and trainers size their networks from them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.errors import NotSupportedYetError, ProtocolError
from common.tensors import dtype_from_wire, dtype_to_wire
from protos import pb


@dataclass(frozen=True)
class ObservationSpec:
    """One observation: ``shape`` without the agent axis, float32 vectors (uint8 images later)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    name: str = ""


@dataclass(frozen=True)
class ActionSpec:
    """``continuous_size`` = C dimensions; ``discrete_branches`` = the size of each of B branches."""

    continuous_size: int
    discrete_branches: tuple[int, ...] = ()

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
            ProtocolError: an empty name, no observations, a bad shape, dtype or action spec.
            NotSupportedYetError: image (rank-3) observations.
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
            if len(shape) == 3:
                raise NotSupportedYetError(
                    f"{where}: observation_specs[{i}] is an image {list(shape)}; images are not supported yet"
                )
            if len(shape) != 1 or shape[0] < 1:
                raise ProtocolError(f"{where}: observation_specs[{i}].shape {list(shape)} must be one positive dimension")
            dtype = dtype_from_wire(obs.dtype)
            if dtype != np.float32:
                raise ProtocolError(f"{where}: observation_specs[{i}].dtype {dtype.name} must be float32 for a vector")
            specs.append(ObservationSpec(shape, np.dtype(np.float32), obs.name))
        return cls(name, tuple(specs), ActionSpec.from_proto(msg.action_spec, f"{where}: action_spec"))
