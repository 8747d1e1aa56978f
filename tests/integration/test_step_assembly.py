"""Trajectory assembly through the real server: EnvSession -> gRPC Step stream -> trajectory topic.

Every rule of docs/architecture.md's "Trajectory assembly rules" is a named case of
``tests/assembly_cases.py``; here its BrainInfos travel through a ProcessorServer on loopback, a
real MLP policy acts, and what the test's subscriber queue receives is checked field by field
against the case's hand-written expectation, with the actions the client actually got (see
``tests.integration.helpers``).
"""

from __future__ import annotations

import numpy as np
import pytest

from common.demo_images import encode_pngs
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.tensors import to_png_tensor
from envclient.session import EnvSession
from processor.behaviors import BehaviorRuntime
from tests.assembly_cases import CASES, FLUSH, HYBRID, Case, R, implied_experiences, random_steps, step, with_images
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import (
    Harness,
    assert_published,
    from_expect,
    itest_settings,
    reference_trajectories,
    serve_steps,
)


async def start(start_processor: StartProcessor, behavior_name: str, time_horizon: int) -> Harness:
    server, address = await start_processor(
        itest_settings(behaviors={behavior_name: BehaviorRuntime(time_horizon=time_horizon)})
    )
    return Harness(server, address)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_assembly_rule_through_the_server(case: Case, start_processor: StartProcessor) -> None:
    harness = await start(start_processor, case.params.behavior_name, case.time_horizon)
    harness.publish_policy(case.params, version=1)

    run = await serve_steps(harness, case.steps, case.params)

    assert {a.policy_version for a in run.answers.values()} == {1}
    assert_published(run, [from_expect(e, run) for e in case.expected], harness)
    # The per-agent reference model agrees with the hand-written case (it checks the random runs below).
    assert_published(run, reference_trajectories(run, case.time_horizon), harness)
    counters = harness.behavior(case.params.behavior_name).counters
    assert counters.published_experiences == implied_experiences(case.steps)
    assert counters.published_trajectories == len(case.expected)
    assert counters.flushed_trajectories == sum(e.at == FLUSH for e in case.expected)
    assert harness.session_count() == 0


IMAGE_CASES = ("cut_at_time_horizon", "flush_at_session_end", "agents_end_episodes_at_different_steps")
"""Rules whose cuts cover the three ways a trajectory ends (time horizon, flush, done)."""


@pytest.mark.parametrize("name", IMAGE_CASES)
async def test_images_beside_vectors_through_the_server(name: str, start_processor: StartProcessor) -> None:
    """uint8 and float32 images travel raw: the policy acts on them, and the trajectories hold them exactly, in
    their dtypes."""
    case = next(c for c in CASES if c.name == name)
    params = with_images(case.params)
    harness = await start(start_processor, params.behavior_name, case.time_horizon)
    harness.publish_policy(params, version=1)

    run = await serve_steps(harness, case.steps, params)

    assert_published(run, [from_expect(e, run) for e in case.expected], harness)
    counters = harness.behavior(params.behavior_name).counters
    assert counters.published_trajectories == len(case.expected)
    assert harness.session_count() == 0


@pytest.mark.parametrize("seed", [3, 11])
async def test_concurrent_multi_agent_clients_end_episodes_at_different_steps(
    seed: int, start_processor: StartProcessor
) -> None:
    """Three clients at once, agents skipping steps and ending episodes (done or max_reached) at their own times."""
    params, time_horizon = HYBRID, 4
    harness = await start(start_processor, params.behavior_name, time_horizon)
    harness.publish_policy(params, version=1)
    steps = random_steps(seed, num_steps=90, num_agents=10, sessions=("a", "b", "c"))

    run = await serve_steps(harness, steps, params, concurrent=True)

    expected = reference_trajectories(run, time_horizon)
    assert sum(e.done_reached for e in expected) >= 10 and sum(e.interrupted and e.done_reached for e in expected) >= 3
    assert len({e.at for e in expected if e.done_reached}) >= 10, "episodes should end at many different steps"
    assert_published(run, expected, harness)
    assert harness.behavior(params.behavior_name).counters.published_experiences == implied_experiences(steps)


def one_option_masks(codes: list[int]) -> list[tuple[int, ...]]:
    """HYBRID masks (branches 3 and 2) allowing exactly one choice per branch: option ``code % 3`` and ``code % 2``."""
    return [tuple(int(j == code % 3) for j in range(3)) + tuple(int(j == code % 2) for j in range(2)) for code in codes]


async def test_action_rows_follow_the_brain_info_row_order(start_processor: StartProcessor) -> None:
    """Each agent's mask leaves one choice per branch, so the returned discrete action is known: row r gets row r's."""
    params = HYBRID
    harness = await start(start_processor, params.behavior_name, time_horizon=3)
    harness.publish_policy(params, version=1)
    rng = np.random.default_rng(5)
    agents = [4, 9, 2, 7, 1, 6]  # agent a's choices are (a % 3, a % 2): all six combinations
    steps = []
    for k in range(6):
        order = [int(a) for a in rng.permutation(agents)]
        done = k == 5
        steps.append(step(*(R(a, a + k / 10, 0.25, done=done) for a in order), masks=one_option_masks(order)))

    run = await serve_steps(harness, tuple(steps), params)

    for k, st in enumerate(run.steps):
        wanted = np.array([[row.agent_id % 3, row.agent_id % 2] for row in st.rows], np.int32)
        np.testing.assert_array_equal(run.answers[k].discrete_actions, wanted, err_msg=f"step {k}", strict=True)
    assert_published(run, reference_trajectories(run, time_horizon=3), harness)


async def test_png_images_are_decoded_once_and_published_raw(start_processor: StartProcessor) -> None:
    """Unity's form: each agent's image as PNGs (4 channels: two PNGs). The policy acts on the decoded pixels
    and the trajectory holds them exactly, uint8, as if they had been sent raw."""
    params = BrainParameters("PngCam", (ObservationSpec((6, 5, 4), np.dtype(np.uint8)),), ActionSpec(0, (2,)))
    harness = await start(start_processor, params.behavior_name, 8)
    harness.publish_policy(params, version=1)
    rng = np.random.default_rng(5)
    frames = rng.integers(0, 256, (4, 2, 6, 5, 4)).astype(np.uint8)  # 4 steps, agents 1 and 2
    async with EnvSession(harness.address, "png-client", [params]) as session:
        for k, images in enumerate(frames):
            pngs = to_png_tensor([encode_pngs(image) for image in images], images.shape)
            done = np.array([k == 3, k == 3])
            result = await session.step(params.behavior_name, np.array([1, 2]), [pngs], np.ones(2, np.float32), done)
            assert result.discrete_actions.shape == (2, 1)

    published = sorted(await harness.claim(params.behavior_name), key=lambda t: t.id.agent_id)
    assert [t.id.agent_id for t in published] == [1, 2]
    for agent, trajectory in enumerate(published):
        assert trajectory.obs[0].dtype == np.uint8 and trajectory.done_reached
        np.testing.assert_array_equal(trajectory.obs[0], frames[:3, agent], strict=True)
        np.testing.assert_array_equal(trajectory.next_obs[0], frames[3, agent], strict=True)
