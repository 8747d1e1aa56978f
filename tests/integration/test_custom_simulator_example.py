"""The worked SDK example (examples/custom_simulator.py) runs against the real processor.

Its agents finish episodes at different steps and are replaced by new ids; every finished episode
must come out as a trajectory segment that ends it, time-limited ones marked interrupted.
"""

from __future__ import annotations

from examples.custom_simulator import BEHAVIOR, WALKER, run
from processor.behaviors import BehaviorRuntime, ProcessorSettings
from tests.integration.conftest import StartProcessor
from tests.policies import build_mlp_policy_update

STEPS = 120


async def test_custom_simulator_example_streams_every_episode(start_processor: StartProcessor) -> None:
    settings = ProcessorSettings(
        behaviors={BEHAVIOR: BehaviorRuntime(time_horizon=16)}, strict=True, declared_subscribers=("t",)
    )
    server, address = await start_processor(settings)
    update = build_mlp_policy_update(BEHAVIOR, [(2,)], WALKER.action_spec.to_proto(), version=1, seed=0)
    server.topics.policies(BEHAVIOR).publish(update, 1)
    subscription = server.topics.trajectories(BEHAVIOR).subscribe("t")

    episodes = await run(address, agents=8, steps=STEPS)

    trajectories = []
    while deliveries := await subscription.aget(timeout_s=0.5):
        trajectories += [d.item for d in deliveries]
        subscription.ack([d.tag for d in deliveries])
    ended = [t for t in trajectories if t.done_reached]
    assert episodes > 8 and len(ended) == episodes
    assert len({t.episode_length for t in ended}) > 1, "agents finish at different steps"
    assert all(t.episode_length is not None and t.episode_length <= 50 for t in ended)
    for t in ended:
        position, target = t.next_obs[0]
        reached = abs(position - target) < 0.05
        # A time limit (max_reached) ends an episode as done + interrupted, after exactly 50 steps.
        assert t.interrupted == (not reached)
        assert reached or t.episode_length == 50
    counters = server.behaviors[BEHAVIOR].counters
    # Every row after an agent's first implies an experience: 8 live agents x (STEPS - 1) steps,
    # all published (cut, ended, or flushed when the session closed).
    assert counters.published_experiences == 8 * (STEPS - 1)
