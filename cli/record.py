"""``stepstream record CONFIG``: run a policy in the config's env and write an ML-Agents ``.demo`` file.

The policy is either

* ``--checkpoint PATH``: a trained policy, the ``ckpt-<step>.policy.pb`` a trainer saved beside its
  checkpoint (PATH is that file, its ``ckpt-<step>`` prefix, a ``checkpoints`` folder, a behavior's
  results folder, or a run's ``results/<run-id>``; a folder means its newest checkpoint). It runs
  with the processor's own inference code (``processor.inference``, no TensorFlow): sampled as
  ``stepstream train --inference`` acts, or greedy (mean / argmax) with ``--deterministic``;
* ``--policy scripted:MODULE:FN``: a plain Python function (``ScriptedPolicy``)::

      def FN(observations: list[np.ndarray], action_spec: common.specs.ActionSpec)
              -> tuple[np.ndarray, np.ndarray]:
          # observations: one float32 [N, *shape] array per observation spec, N = the env copies
          # returns: (continuous float32 [N, C] env actions in [-1, 1], discrete int [N, B] choices)

  MODULE is imported from ``sys.path`` with the current directory first, e.g.
  ``scripted:envclient.simple_env:scripted_expert`` (the 1-D task's expert) or a ``my_expert.py``
  in the current directory (``scripted:my_expert:act``).

The file (``common.demo.encode_demo``) is what ML-Agents' ``DemonstrationRecorder`` writes and
ML-Agents' ``demo_loader`` reads: the meta (api version 1, name, records, episodes, mean episode
return) at byte 0, the brain parameters (``action_spec``, plus the pre-1.3 fields for a purely
continuous or discrete spec) at byte 33, then one agent-info / action pair per agent step. Each
episode of each env copy is written whole, one after the other, in the order they end; the first
``--episodes`` episodes to end are kept, unfinished ones are dropped. An episode of T actions is
T + 1 records: record t holds the obs seen at t, the reward of the action before it (0 at t = 0),
done on the last one (with ``max_step_reached`` for a time limit) and the action the policy chose
on that obs (on the last record the env ignores it, as ML-Agents' recorder stores one there too).
Actions are env actions: continuous in [-1, 1], discrete choices.

Action timing differs from Unity's recorder, on purpose: record t holds the action chosen at obs_t
(``same`` in ``common.demo_timing``), where Unity's stores the one chosen at obs_{t-1} (``next``).
Our order pairs each record with its own decision and keeps ML-Agents' loader pairing right for our
files; ``demo_to_buffer`` detects either order (tested on files from this writer in both orders).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cli.console import route_native_stderr
from cli.results import POLICY_SUFFIX, load_saved_policy
from cli.run_config import EnvFlags, env_seed, load_run_options, select_behaviors, vector_env_settings
from common.demo import DEMO_SUFFIX, DemoFormatError, encode_demo
from common.errors import ConfigError
from common.policy_contract import LOGITS, MEAN
from common.specs import ActionSpec, BrainParameters
from envclient.envs import open_vector_envs
from envclient.runner import VectorEnv
from protos import mlagents_demo_pb2 as demo_pb

log = logging.getLogger(__name__)

ScriptedPolicy = Callable[[list[np.ndarray], ActionSpec], tuple[np.ndarray, np.ndarray]]
"""``fn(observations [N, *shape] each, action_spec) -> (continuous float32 [N, C], discrete int [N, B])``."""
Actor = Callable[[list[np.ndarray]], tuple[np.ndarray, np.ndarray]]
"""observations -> (env continuous [N, C], discrete [N, B])."""
SCRIPTED_PREFIX = "scripted:"
DEMO_API_VERSION = 1
LOG_EVERY_EPISODES = 100


@dataclass(frozen=True)
class RecordOptions:
    """The ``record`` subcommand's flags."""

    config: Path
    out: Path
    episodes: int
    checkpoint: Path | None = None
    policy: str | None = None
    behavior_name: str | None = None
    num_envs: int | None = None
    seed: int | None = None
    deterministic: bool = False
    force: bool = False


def add_record_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``record``."""
    parser = sub.add_parser(
        "record",
        help="run a policy in the config's env and write an ML-Agents .demo file",
        description="Run a trained checkpoint's policy or a scripted Python function in CONFIG's env (env_settings."
        "env_path) for N episodes and write them as an ML-Agents-compatible .demo file, for trainer_type bc and the "
        "behavioral_cloning / gail demo_path keys. A scripted policy is FN(observations, action_spec) -> (continuous "
        "[N, C] float32 in [-1, 1], discrete [N, B] int), observations being one float32 [N, *shape] array per "
        "observation spec; e.g. scripted:envclient.simple_env:scripted_expert for the 1-D task.",
    )
    parser.add_argument("config", help="ML-Agents-style trainer YAML; its env_settings.env_path names the env")
    policy = parser.add_mutually_exclusive_group(required=True)
    policy.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="a ckpt-<step>.policy.pb, its ckpt-<step> prefix, or a checkpoints, behavior or run folder (newest checkpoint)",
    )
    policy.add_argument("--policy", metavar="scripted:MODULE:FN", help="a scripted policy function (see above)")
    parser.add_argument("--episodes", type=int, required=True, metavar="N", help="episodes to record (>= 1)")
    parser.add_argument("--out", required=True, metavar="FILE.demo", help="the .demo file to write")
    parser.add_argument(
        "--behavior", metavar="NAME", help="the env_path entry to record when the config has several (default: the only one)"
    )
    parser.add_argument(
        "--num-envs", type=int, metavar="N", help="env copies stepped together (default: env_settings.num_envs)"
    )
    parser.add_argument("--seed", type=int, metavar="S", help="env and sampling seed (default: env_settings.seed; -1 random)")
    parser.add_argument(
        "--deterministic", action="store_true", help="--checkpoint: act greedily (mean / argmax) instead of sampling"
    )
    parser.add_argument("--force", action="store_true", help="overwrite FILE.demo if it exists")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    return run_record(
        RecordOptions(
            config=Path(args.config),
            out=Path(args.out),
            episodes=args.episodes,
            checkpoint=None if args.checkpoint is None else Path(args.checkpoint),
            policy=args.policy,
            behavior_name=args.behavior,
            num_envs=args.num_envs,
            seed=args.seed,
            deterministic=args.deterministic,
            force=args.force,
        )
    )


# -- policies ------------------------------------------------------------------------------------


def load_scripted(spec: str) -> ScriptedPolicy:
    """The function named by ``scripted:MODULE:FN``, imported with the current directory on ``sys.path``.

    Raises:
        ConfigError: a malformed spec, a module that does not import, or an FN that is not callable.
    """
    match = re.fullmatch(r"scripted:([\w.]+):(\w+)", spec)
    if match is None:
        raise ConfigError(
            f"--policy {spec!r}: expected scripted:MODULE:FN (e.g. scripted:envclient.simple_env:scripted_expert)"
        )
    module_name, fn_name = match.groups()
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: a module in the current directory imports
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"--policy {spec!r}: cannot import {module_name!r}: {err}") from err
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise ConfigError(f"--policy {spec!r}: {module_name} has no function {fn_name!r}")
    return fn  # type: ignore[no-any-return]


def find_policy_file(path: Path, behavior_name: str) -> Path:
    """The ``.policy.pb`` a ``--checkpoint PATH`` means (module docstring).

    Raises:
        ConfigError: nothing at PATH, or no saved policy there.
    """
    if path.is_file() and path.name.endswith(POLICY_SUFFIX):
        return path
    prefixed = path.with_name(path.name + POLICY_SUFFIX)
    if prefixed.is_file():
        return prefixed
    if not path.exists():
        raise ConfigError(f"--checkpoint {path}: does not exist")
    for folder in (path, path / "checkpoints", path / behavior_name / "checkpoints"):
        found = sorted(folder.glob(f"ckpt-*{POLICY_SUFFIX}"), key=_checkpoint_step) if folder.is_dir() else []
        if found:
            return found[-1]
    raise ConfigError(
        f"--checkpoint {path}: no ckpt-<step>{POLICY_SUFFIX} there, in its checkpoints/ or in {behavior_name}/checkpoints/"
    )


def _checkpoint_step(path: Path) -> int:
    digits = path.name.removeprefix("ckpt-").removesuffix(POLICY_SUFFIX)
    return int(digits) if digits.isdigit() else -1


def checkpoint_actor(path: Path, params: BrainParameters, seed: int | None, deterministic: bool) -> Actor:
    """Acts with the saved PolicyUpdate at ``path`` as the processor does (or greedily).

    Raises:
        ConfigError: the file is not a loadable policy, or its specs differ from the env's.
    """
    _, policy = load_saved_policy(path, params, f"--checkpoint {path}")
    actions = ActionSpec.from_proto(policy.action_spec)
    rng = np.random.default_rng(seed)
    branches = list(actions.discrete_branches)
    starts = np.cumsum([0, *branches[:-1]])

    def act(observations: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        if not deterministic:
            out = policy.act(observations, None, rng)
            return out.env_continuous_actions, out.discrete_actions
        raw = policy.forward(observations)
        n = len(observations[0])
        continuous = np.zeros((n, actions.continuous_size), np.float32)
        if actions.continuous_size:
            continuous = policy.env_continuous_actions(raw[MEAN])
        discrete = np.zeros((n, len(branches)), np.int32)
        for b, (start, size) in enumerate(zip(starts, branches, strict=True)):
            discrete[:, b] = raw[LOGITS][:, start : start + size].argmax(axis=1)
        return continuous.astype(np.float32), discrete

    log.info("recording with %s (policy version %d, %s)", path, policy.version, "greedy" if deterministic else "sampled")
    return act


def scripted_actor(fn: ScriptedPolicy, params: BrainParameters, name: str) -> Actor:
    """Calls ``fn`` and checks what it returns against the action spec.

    Raises:
        ConfigError: (when called) ``fn`` returned something else than two arrays of the right shapes.
    """
    spec = params.action_spec

    def act(observations: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        n = len(observations[0])
        out = fn(observations, spec)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise ConfigError(f"--policy {name}: must return (continuous [N, C], discrete [N, B]), got {type(out).__name__}")
        continuous, discrete = np.asarray(out[0], np.float32), np.asarray(out[1])
        if continuous.shape != (n, spec.continuous_size) or discrete.shape != (n, spec.num_branches):
            raise ConfigError(
                f"--policy {name}: returned shapes {list(continuous.shape)} and {list(discrete.shape)}, expected "
                f"[{n}, {spec.continuous_size}] and [{n}, {spec.num_branches}]"
            )
        return continuous, discrete.astype(np.int32)

    return act


# -- recording -----------------------------------------------------------------------------------


def _pair(
    obs: Sequence[np.ndarray], names: Sequence[str], reward: float, done: bool, max_step: bool, agent_id: int
) -> demo_pb.AgentInfoActionPairProto:
    pair = demo_pb.AgentInfoActionPairProto()
    info = pair.agent_info
    info.reward, info.done, info.max_step_reached, info.id = reward, done, max_step, agent_id
    for o, name in zip(obs, names, strict=True):
        observation = info.observations.add(name=name)
        observation.shape.extend(o.shape)
        observation.float_data.data.extend(o.reshape(-1).tolist())
    return pair


def _set_action(pair: demo_pb.AgentInfoActionPairProto, continuous: np.ndarray, discrete: np.ndarray) -> None:
    action = pair.action_info
    action.continuous_actions.extend(continuous.tolist())
    action.discrete_actions.extend(discrete.tolist())
    if not len(continuous) or not len(discrete):  # a pure spec: the pre-1.3 field too, for older loaders
        action.vector_actions_deprecated.extend([*continuous.tolist(), *(float(d) for d in discrete)])


def record_episodes(env: VectorEnv, act: Actor, episodes: int) -> tuple[list[demo_pb.AgentInfoActionPairProto], list[float]]:
    """Step ``env`` with ``act`` until ``episodes`` episodes ended; returns their records and returns, in end order."""
    n = env.num_agents
    names = [spec.name for spec in env.brain_parameters.observation_specs]
    obs = env.reset()
    rewards = np.zeros(n, np.float32)
    done = np.zeros(n, bool)
    max_reached = np.zeros(n, bool)
    current: list[list[demo_pb.AgentInfoActionPairProto]] = [[] for _ in range(n)]
    returns = np.zeros(n, np.float64)
    pairs: list[demo_pb.AgentInfoActionPairProto] = []
    finished: list[float] = []
    while len(finished) < episodes:
        continuous, discrete = act(obs)
        for i in range(n):
            pair = _pair([o[i] for o in obs], names, float(rewards[i]), bool(done[i]), bool(max_reached[i]), i)
            _set_action(pair, continuous[i], discrete[i])
            current[i].append(pair)
            returns[i] += rewards[i]
            if done[i] and len(finished) < episodes:
                pairs.extend(current[i])
                finished.append(float(returns[i]))
                if len(finished) % LOG_EVERY_EPISODES == 0:
                    log.info("%d episodes recorded", len(finished))
            if done[i]:
                current[i], returns[i] = [], 0.0
        obs, rewards, terminated, truncated = env.step(continuous, discrete)
        done = np.asarray(terminated, bool) | np.asarray(truncated, bool)
        max_reached = np.asarray(truncated, bool) & ~np.asarray(terminated, bool)
        rewards = np.asarray(rewards, np.float32)
    return pairs, finished


def demo_bytes(
    name: str, params: BrainParameters, pairs: Sequence[demo_pb.AgentInfoActionPairProto], returns: Sequence[float]
) -> bytes:
    """The .demo file of ``pairs``: meta named ``name`` (shortened to fit before byte 33), brain parameters, records."""
    spec = params.action_spec
    brain = demo_pb.BrainParametersProto(brain_name=params.behavior_name, is_training=False)
    brain.action_spec.num_continuous_actions = spec.continuous_size
    brain.action_spec.num_discrete_actions = spec.num_branches
    brain.action_spec.discrete_branch_sizes.extend(spec.discrete_branches)
    if not spec.num_branches:
        brain.vector_action_space_type_deprecated = demo_pb.continuous
        brain.vector_action_size_deprecated.append(spec.continuous_size)
    elif not spec.continuous_size:
        brain.vector_action_space_type_deprecated = demo_pb.discrete
        brain.vector_action_size_deprecated.extend(spec.discrete_branches)
    meta = demo_pb.DemonstrationMetaProto(
        api_version=DEMO_API_VERSION,
        number_steps=len(pairs),
        number_episodes=len(returns),
        mean_reward=float(np.mean(returns)) if len(returns) else 0.0,
    )
    for length in range(len(name), -1, -1):  # Unity's names are short; ours may have to be cut to fit
        meta.demonstration_name = name[:length]
        try:
            return encode_demo(meta, brain, pairs)
        except DemoFormatError:
            continue
    raise AssertionError("an empty demonstration name always fits")


def run_record(options: RecordOptions) -> int:
    """Record ``options.episodes`` episodes to ``options.out``; returns 0.

    Raises:
        ConfigError: bad flags (episodes < 1, an output without the .demo extension or one that
            exists without --force, both or neither policy), a config without env_path, or a policy
            that does not fit the env.
    """
    if options.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {options.episodes}")
    if options.out.suffix != DEMO_SUFFIX:
        raise ConfigError(f"--out {options.out}: must end in {DEMO_SUFFIX}")
    if options.out.exists() and not options.force:
        raise ConfigError(f"--out {options.out}: exists; pass --force to overwrite it")
    if (options.checkpoint is None) == (options.policy is None):
        raise ConfigError("give exactly one of --checkpoint PATH and --policy scripted:MODULE:FN")
    if options.num_envs is not None and options.num_envs < 1:
        raise ConfigError(f"--num-envs must be >= 1, got {options.num_envs}")
    run_options = load_run_options(options.config, EnvFlags(num_envs=options.num_envs, seed=options.seed))
    (name,) = select_behaviors(options.config, run_options, "record", options.behavior_name, single=True)
    route_native_stderr()  # LiteRT's "Created TensorFlow Lite XNNPACK delegate" at the first action: noise, dropped
    seed = env_seed(run_options.env_settings.seed, 0)
    with open_vector_envs(vector_env_settings(run_options, [name], run_options.env_settings.seed)) as envs:
        env = envs[name]
        params = env.brain_parameters
        if options.checkpoint is not None:
            act = checkpoint_actor(find_policy_file(options.checkpoint, name), params, seed, options.deterministic)
        else:
            assert options.policy is not None
            act = scripted_actor(load_scripted(options.policy), params, options.policy)
        pairs, returns = record_episodes(env, act, options.episodes)
    options.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = options.out.with_name(options.out.name + ".tmp")
    tmp.write_bytes(demo_bytes(options.out.stem, params, pairs, returns))
    os.replace(tmp, options.out)
    log.info(
        "%s: wrote %d records of %d episodes of %s (mean return %.3f, min %.3f, max %.3f)",
        options.out,
        len(pairs),
        len(returns),
        name,
        float(np.mean(returns)),
        min(returns),
        max(returns),
    )
    return 0
