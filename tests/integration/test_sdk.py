"""The env-client SDK (``envclient``) as a simulator's author meets it, against the real processor on loopback.

* one session declaring two behaviors steps both concurrently (``asyncio.gather``): each call gets its own actions;
* the end of training is a typed exception, ``TrainingFinishedError``, with no grpc import or status compare;
* the specs come from ``envclient`` with their defaults (float32 observations, ``ActionSpec.discrete(5)``);
* an agent leaves for good with a done row: what the processor held for it is freed.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from envclient import (
    ActionSpec,
    BrainParameters,
    EnvSession,
    ObservationSpec,
    SessionFinishedError,
    StepRejectedError,
    TrainingFinishedError,
)
from processor.behaviors import BehaviorRuntime, ProcessorSettings
from tests.integration.conftest import StartProcessor
from tests.policies import build_mlp_policy_update

MOVER = BrainParameters("Mover", (ObservationSpec((3,)),), ActionSpec.continuous(2))
PICKER = BrainParameters("Picker", (ObservationSpec((4,)),), ActionSpec.discrete(5))
ROUNDS = 30


def test_spec_defaults() -> None:
    assert ObservationSpec((3,)) == ObservationSpec((3,), np.dtype(np.float32))
    assert ActionSpec.discrete(5) == ActionSpec(0, (5,)) and ActionSpec.discrete(3, 2) == ActionSpec(0, (3, 2))
    assert ActionSpec.continuous(2) == ActionSpec(2)


async def serve_both(start_processor: StartProcessor) -> tuple[object, str]:
    runtime = BehaviorRuntime(time_horizon=8)
    settings = ProcessorSettings(behaviors={"Mover": runtime, "Picker": runtime}, strict=True)
    server, address = await start_processor(settings)
    for params in (MOVER, PICKER):
        shapes = [o.shape for o in params.observation_specs]
        update = build_mlp_policy_update(params.behavior_name, shapes, params.action_spec.to_proto(), version=0, seed=0)
        server.topics.policies(params.behavior_name).publish(update, 0)
    return server, address


def rows(params: BrainParameters, ids: np.ndarray, rng: np.random.Generator, done: np.ndarray | None = None) -> dict:
    n = len(ids)
    obs = rng.standard_normal((n, *params.observation_specs[0].shape)).astype(np.float32)
    return {
        "agent_ids": ids,
        "observations": [obs],
        "rewards": np.zeros(n, np.float32),
        "done": np.zeros(n, bool) if done is None else done,
    }


async def test_two_behaviors_of_one_session_step_concurrently(start_processor: StartProcessor) -> None:
    _, address = await serve_both(start_processor)
    rng = np.random.default_rng(0)
    movers, pickers = np.arange(3), np.arange(100, 104)
    async with EnvSession(address, "two-behaviors", [MOVER, PICKER]) as session:
        for _ in range(ROUNDS):
            moved, picked = await asyncio.gather(
                session.step("Mover", **rows(MOVER, movers, rng)),
                session.step("Picker", **rows(PICKER, pickers, rng)),
            )
            assert moved.continuous_actions.shape == (3, 2) and picked.discrete_actions.shape == (4, 1)
            assert ((0 <= picked.discrete_actions) & (picked.discrete_actions < 5)).all()


async def test_the_end_of_training_is_a_typed_exception(start_processor: StartProcessor) -> None:
    server, address = await serve_both(start_processor)
    rng = np.random.default_rng(0)
    async with EnvSession(address, "finished", [MOVER, PICKER]) as session:
        await session.step("Mover", **rows(MOVER, np.arange(2), rng))
        server.behaviors.finish("Mover", 100, 0)  # what a trainer's FinishTraining does
        server.behaviors.finish("Picker", 100, 0)
        with pytest.raises(TrainingFinishedError) as caught:
            for _ in range(3):
                await session.step("Mover", **rows(MOVER, np.arange(2), rng))
    assert isinstance(caught.value, SessionFinishedError) and isinstance(caught.value, StepRejectedError)


async def test_an_agent_leaves_for_good_with_a_done_row(start_processor: StartProcessor) -> None:
    server, address = await serve_both(start_processor)
    rng = np.random.default_rng(0)
    async with EnvSession(address, "leaving", [MOVER, PICKER]) as session:
        await session.step("Mover", **rows(MOVER, np.arange(3), rng))
        await session.step("Mover", **rows(MOVER, np.arange(3), rng))
        (held,) = list(server.sessions)  # type: ignore[attr-defined]
        assembler = held.assemblers["Mover"]
        assert assembler.live_agents == 3
        await session.step("Mover", **rows(MOVER, np.array([2]), rng, done=np.array([True])))  # agent 2 leaves
        assert assembler.live_agents == 2
