"""``stepstream record``'s pieces: our .demo writer -> our reader round trip, policy resolution and errors.

The round trip goes through the real recorder loop (``cli.record.record_episodes``) on the 1-D task
with its scripted expert, so the counts are known: every expert episode is 5 actions, 6 records.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cli.record import (
    RecordOptions,
    demo_bytes,
    find_policy_file,
    load_scripted,
    record_episodes,
    run_record,
    scripted_actor,
)
from common import trajectory as tr
from common.demo import demo_to_buffer, load_demonstration
from common.errors import ConfigError
from common.specs import ActionSpec
from envclient.simple_env import BEST_RETURN, SimpleEnv, scripted_expert

EPISODES = 7
RECORDS_PER_EPISODE = 6
"""The expert reaches the goal in 5 steps: 5 acting records and the terminal one."""


def _record(continuous: bool, tmp_path: Path, copies: int = 3) -> tuple[Path, SimpleEnv]:
    env = SimpleEnv(copies, continuous=continuous, seed=3)
    act = scripted_actor(scripted_expert, env.brain_parameters, "expert")
    pairs, returns = record_episodes(env, act, EPISODES)
    path = tmp_path / "expert.demo"
    path.write_bytes(demo_bytes("a-rather-long-demonstration-name", env.brain_parameters, pairs, returns))
    return path, env


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_writer_reader_round_trip(continuous: bool, tmp_path: Path) -> None:
    path, env = _record(continuous, tmp_path)
    demo = load_demonstration(path)
    header = demo.files[0]
    assert demo.records == header.number_steps == EPISODES * RECORDS_PER_EPISODE
    assert header.number_episodes == EPISODES and header.api_version == 1
    assert header.mean_reward == pytest.approx(BEST_RETURN, abs=1e-6)
    assert "a-rather-long-demonstration-name".startswith(header.name) and header.name  # cut to fit before byte 33
    assert demo.spec.action_spec == env.brain_parameters.action_spec
    assert [o.shape for o in demo.spec.observation_specs] == [(1,)]

    _, buffer = demo_to_buffer(path, 1, expected_spec=env.brain_parameters)
    rows = demo.records - 1
    assert buffer.num_experiences == rows and buffer.check_length()
    assert int(np.asarray(buffer[tr.DONE].data).sum()) == EPISODES
    assert float(np.asarray(buffer[tr.REWARDS].data, np.float64).sum()) == pytest.approx(EPISODES * BEST_RETURN, abs=1e-5)
    # Every row's action is the expert's on its obs: toward the goal the obs holds.
    goal = np.asarray(buffer[tr.obs_key(0)].data)[:, 0]
    if continuous:
        np.testing.assert_array_equal(np.asarray(buffer[tr.CONTINUOUS_ACTIONS].data)[:, 0], np.sign(goal))
    else:
        np.testing.assert_array_equal(np.asarray(buffer[tr.DISCRETE_ACTIONS].data)[:, 0], (goal > 0).astype(np.int32))
    # Records of an episode: the first has reward 0; the done one is the 6th.
    infos = [pair.agent_info for pair in demo.pairs]
    assert [i.done for i in infos[:RECORDS_PER_EPISODE]] == [False] * 5 + [True]
    assert infos[0].reward == 0.0 and not any(i.max_step_reached for i in infos)


def test_time_limit_is_recorded_as_max_step(tmp_path: Path) -> None:
    env = SimpleEnv(1, continuous=True, seed=0, max_episode_steps=3)
    still = scripted_actor(
        lambda obs, spec: (np.zeros((len(obs[0]), 1), np.float32), np.zeros((len(obs[0]), 0))), env.brain_parameters, "still"
    )
    pairs, returns = record_episodes(env, still, 2)
    assert len(pairs) == 2 * 4 and returns == pytest.approx([-0.03, -0.03])
    assert [p.agent_info.max_step_reached for p in pairs[:4]] == [False, False, False, True]


def test_scripted_policy_errors() -> None:
    with pytest.raises(ConfigError, match="expected scripted:MODULE:FN"):
        load_scripted("envclient.simple_env:scripted_expert")
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_here'"):
        load_scripted("scripted:no_such_module_here:act")
    with pytest.raises(ConfigError, match="has no function 'nope'"):
        load_scripted("scripted:envclient.simple_env:nope")
    assert load_scripted("scripted:envclient.simple_env:scripted_expert") is scripted_expert
    env = SimpleEnv(2, continuous=False)
    wrong = scripted_actor(lambda obs, spec: (np.zeros((2, 1)), np.zeros((2, 1))), env.brain_parameters, "wrong")
    with pytest.raises(ConfigError, match=r"returned shapes \[2, 1\] and \[2, 1\], expected \[2, 0\] and \[2, 1\]"):
        wrong(env.reset())
    assert scripted_expert([np.array([[1.0], [-1.0]], np.float32)], ActionSpec(0, (2,)))[1].tolist() == [[1], [0]]


def test_checkpoint_path_resolution(tmp_path: Path) -> None:
    checkpoints = tmp_path / "run" / "Simple1D" / "checkpoints"
    checkpoints.mkdir(parents=True)
    for step in (900, 1000, 50):
        (checkpoints / f"ckpt-{step}.policy.pb").write_bytes(b"")
    newest = checkpoints / "ckpt-1000.policy.pb"
    for given in (tmp_path / "run", tmp_path / "run" / "Simple1D", checkpoints, checkpoints / "ckpt-1000", newest):
        assert find_policy_file(given, "Simple1D") == newest
    assert find_policy_file(checkpoints / "ckpt-50", "Simple1D") == checkpoints / "ckpt-50.policy.pb"
    with pytest.raises(ConfigError, match="does not exist"):
        find_policy_file(tmp_path / "absent", "Simple1D")
    with pytest.raises(ConfigError, match=r"no ckpt-<step>\.policy\.pb"):
        find_policy_file(tmp_path / "run", "Other")


def test_run_record_flag_errors(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("behaviors:\n  Simple1D:\n    trainer_type: ppo\nenv_settings:\n  env_path: simple:discrete\n")
    expert = "scripted:envclient.simple_env:scripted_expert"
    with pytest.raises(ConfigError, match=r"must end in \.demo"):
        run_record(RecordOptions(config, tmp_path / "x.txt", 1, policy=expert))
    with pytest.raises(ConfigError, match="--episodes must be >= 1"):
        run_record(RecordOptions(config, tmp_path / "x.demo", 0, policy=expert))
    with pytest.raises(ConfigError, match=r"--behavior Nope: not in env_settings\.env_path"):
        run_record(RecordOptions(config, tmp_path / "x.demo", 1, policy=expert, behavior_name="Nope"))
    out = tmp_path / "x.demo"
    assert run_record(RecordOptions(config, out, 2, policy=expert, seed=0)) == 0
    assert load_demonstration(out).records == 2 * RECORDS_PER_EPISODE
    with pytest.raises(ConfigError, match="exists; pass --force"):
        run_record(RecordOptions(config, out, 1, policy=expert))
    with pytest.raises(ConfigError, match="no ckpt-<step>"):
        run_record(RecordOptions(config, out, 1, checkpoint=tmp_path, force=True))
