"""A 1-D goal task for learning tests, vectorised over ``N`` copies (ML-Agents' ``SimpleEnvironment``).

Each copy is one agent of one behavior. Per episode a goal ``g`` in {-1, +1} is drawn; the
observation is ``g`` itself (float32 ``[N, 1]``), and the agent starts at position 0:

* each step moves the position by ``step_size`` (0.2) times the action: discrete (one branch of
  2): 0 = left (-1), 1 = right (+1); continuous (C = 1): the action clipped to [-1, 1];
* a step that leaves ``|position| < 1`` costs ``STEP_COST`` (reward -0.01);
* reaching ``|position| >= 1`` ends the episode (**terminated**) with reward
  ``SUCCESS_REWARD * position * g`` (position clipped to [-1, 1]): +1.06 at the goal, -1.06 at
  the wrong end. It replaces that step's cost, so the best return is 4 x -0.01 + 1.06 = 1.02
  (five steps of 0.2); walking the wrong way returns -1.10;
* after ``max_episode_steps`` (100) steps without reaching either end, the episode is
  **truncated** (a time limit: done + max_reached on the wire) after that step's cost.

Auto-reset is Gymnasium's next-step mode: a step that ends an episode returns the terminal obs;
the next ``step`` ignores that copy's action and returns its reset obs with reward 0, neither
terminated nor truncated (the processor sees the same agent id again: a first sighting).

Image mode (``image_shape=(H, W, C)``, ML-Agents' visual variant of the task): the observation is
only a uint8 image ``[N, H, W, C]``, no vector. It shows the goal as the vector does: the goal's half
of the columns is bright (255), the other half dark (0); and the agent's position as a mid-grey (128)
column (column ``round((position + 1) / 2 * (W - 1))``), every row and channel alike. Rewards, dones
and resets are the same.

Shapes: ``N`` copies, ``C`` = 1 continuous dimension, ``B`` = 1 discrete branch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from common.specs import ActionSpec, BrainParameters, ObservationSpec

STEP_SIZE = 0.2
"""Position change per step at full action (position units)."""
STEP_COST = 0.01
"""Reward subtracted on every step that does not end the episode at a boundary."""
SUCCESS_REWARD = 1.0 + 6 * STEP_COST
"""Reward magnitude on reaching a boundary: 1.06, so the best return is 1.02."""
MAX_EPISODE_STEPS = 100
"""Steps after which an episode is truncated."""
BEST_RETURN = SUCCESS_REWARD - (round(1.0 / STEP_SIZE) - 1) * STEP_COST
"""Return of the shortest path to the goal: 1.02."""
_BOUNDARY_EPS = 1e-6  # 5 x 0.2 must count as reaching 1.0 despite float round-off


GOAL_PIXEL = 255
"""Pixel value of the goal's half of an image observation (the other half is 0)."""
POSITION_PIXEL = 128
"""Pixel value of the agent's column in an image observation."""


def simple_brain_parameters(
    behavior_name: str, continuous: bool, image_shape: tuple[int, int, int] | None = None
) -> BrainParameters:
    """The 1-D task's BrainParameters: one float32 [1] observation (or one uint8 image ``image_shape``);
    C = 1 or one branch of 2."""
    action_spec = ActionSpec(1) if continuous else ActionSpec(0, (2,))
    if image_shape is not None:
        return BrainParameters(
            behavior_name, (ObservationSpec(tuple(image_shape), np.dtype(np.uint8), "camera"),), action_spec
        )
    return BrainParameters(behavior_name, (ObservationSpec((1,), np.dtype(np.float32), "goal"),), action_spec)


def render_images(goal: np.ndarray, position: np.ndarray, image_shape: tuple[int, int, int]) -> np.ndarray:
    """The image observations of the image mode (module docstring).

    Args:
        goal: ``[N]``, each copy's goal in {-1, +1}.
        position: ``[N]``, each copy's position in [-1, 1].
        image_shape: ``(H, W, C)``, W >= 2.

    Returns:
        uint8 ``[N, H, W, C]``.
    """
    h, w, c = image_shape
    columns = np.arange(w)
    right = columns >= w // 2
    # Per copy and column: the goal's half bright, then the agent's column grey.
    row = np.where((np.asarray(goal)[:, None] > 0) == right[None, :], GOAL_PIXEL, 0).astype(np.uint8)
    at = np.rint((np.clip(np.asarray(position, np.float64), -1.0, 1.0) + 1.0) / 2.0 * (w - 1)).astype(np.int64)
    row[np.arange(len(at)), at] = POSITION_PIXEL
    return np.ascontiguousarray(np.broadcast_to(row[:, None, :, None], (len(at), h, w, c)))


def goal_of_images(images: np.ndarray) -> np.ndarray:
    """float32 ``[N, 1]``: the goal an image observation ``[N, H, W, C]`` shows (+1 when its right half is brighter)."""
    images = np.asarray(images)
    w = images.shape[2]
    left = images[:, :, : w // 2].mean(axis=(1, 2, 3))
    right = images[:, :, w // 2 :].mean(axis=(1, 2, 3))
    return np.where(right > left, 1.0, -1.0).astype(np.float32).reshape(-1, 1)


def expert_actions(obs: np.ndarray, continuous: bool) -> tuple[np.ndarray, np.ndarray]:
    """The scripted expert: move toward the goal at full speed.

    Args:
        obs: float32 ``[N, 1]``, the goal of each copy.
        continuous: the action spec of the env the actions are for.

    Returns:
        ``(continuous [N, C], discrete [N, B])``: ``[[g]]`` and ``[]`` columns, or ``[]`` and
        ``[[1 if g > 0 else 0]]``.
    """
    goal = np.asarray(obs, dtype=np.float32).reshape(-1, 1)
    n = len(goal)
    if continuous:
        return np.sign(goal).astype(np.float32), np.zeros((n, 0), np.int32)
    return np.zeros((n, 0), np.float32), (goal > 0).astype(np.int32)


def scripted_expert(observations: Sequence[np.ndarray], action_spec: ActionSpec) -> tuple[np.ndarray, np.ndarray]:
    """``expert_actions`` as a ``stepstream record --policy scripted:envclient.simple_env:scripted_expert`` function.

    Args:
        observations: ``[goal float32 [N, 1]]``, or ``[image uint8 [N, H, W, C]]`` (the image mode).
        action_spec: C = 1 (continuous) or one branch of 2.

    Returns:
        ``(continuous [N, C], discrete [N, B])`` env actions toward each copy's goal.
    """
    obs = observations[0]
    goal = goal_of_images(obs) if np.ndim(obs) == 4 else obs
    return expert_actions(goal, continuous=action_spec.continuous_size > 0)


class SimpleEnv:
    """``N`` independent copies of the 1-D goal task (module docstring); implements ``envclient.runner.VectorEnv``.

    Args:
        num_agents: ``N`` >= 1.
        continuous: one continuous action (True) or one discrete branch of 2 (False).
        behavior_name: the name in the BrainParameters.
        seed: seeds the goal draws; None draws fresh entropy.
        step_size: position change per step at full action.
        max_episode_steps: steps before truncation, >= 1.
        image_shape: ``(H, W, C)``: the observation is only a uint8 image of the goal and the
            position (module docstring); None: the float32 goal vector.

    Raises:
        ValueError: ``num_agents`` or ``max_episode_steps`` < 1, ``step_size`` <= 0, or an
            ``image_shape`` that is not three positive dimensions with W >= 2.
    """

    def __init__(
        self,
        num_agents: int,
        *,
        continuous: bool,
        behavior_name: str = "Simple1D",
        seed: int | None = None,
        step_size: float = STEP_SIZE,
        max_episode_steps: int = MAX_EPISODE_STEPS,
        image_shape: tuple[int, int, int] | None = None,
    ) -> None:
        if num_agents < 1:
            raise ValueError(f"num_agents must be >= 1, got {num_agents}")
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        if not step_size > 0:
            raise ValueError(f"step_size must be > 0, got {step_size}")
        if image_shape is not None and (len(image_shape) != 3 or min(image_shape) < 1 or image_shape[1] < 2):
            raise ValueError(f"image_shape must be (H, W, C), positive with W >= 2, got {image_shape}")
        self.continuous = continuous
        self.step_size = float(step_size)
        self.max_episode_steps = max_episode_steps
        self.image_shape = None if image_shape is None else (int(image_shape[0]), int(image_shape[1]), int(image_shape[2]))
        self._params = simple_brain_parameters(behavior_name, continuous, self.image_shape)
        self._rng = np.random.default_rng(seed)
        self._n = num_agents
        self._goal = np.zeros(num_agents, np.float32)
        self._position = np.zeros(num_agents, np.float64)
        self._steps = np.zeros(num_agents, np.int64)
        self._needs_reset = np.ones(num_agents, bool)

    @property
    def num_agents(self) -> int:
        return self._n

    @property
    def brain_parameters(self) -> BrainParameters:
        return self._params

    def reset(self) -> list[np.ndarray]:
        """Start a new episode in every copy; returns ``[obs float32 [N, 1]]`` (``[uint8 [N, H, W, C]]`` in image mode)."""
        self._reset_copies(np.ones(self._n, bool))
        return self._observations()

    def _reset_copies(self, which: np.ndarray) -> None:
        k = int(which.sum())
        self._goal[which] = self._rng.choice(np.array([-1.0, 1.0], np.float32), size=k)
        self._position[which] = 0.0
        self._steps[which] = 0
        self._needs_reset[which] = False

    def _observations(self) -> list[np.ndarray]:
        if self.image_shape is not None:
            return [render_images(self._goal, self._position, self.image_shape)]
        return [self._goal.reshape(-1, 1).copy()]

    def _moves(self, continuous_actions: np.ndarray, discrete_actions: np.ndarray) -> np.ndarray:
        """Each copy's move in [-1, 1] (before ``step_size``), float64 [N]."""
        if self.continuous:
            actions = np.asarray(continuous_actions, dtype=np.float64).reshape(self._n, -1)
            if actions.shape[1] != 1:
                raise ValueError(f"continuous_actions must be [{self._n}, 1], got {list(np.shape(continuous_actions))}")
            return np.clip(actions[:, 0], -1.0, 1.0)
        choices = np.asarray(discrete_actions).reshape(self._n, -1)
        if choices.shape[1] != 1:
            raise ValueError(f"discrete_actions must be [{self._n}, 1], got {list(np.shape(discrete_actions))}")
        if np.any((choices < 0) | (choices > 1)):
            raise ValueError(f"discrete actions must be 0 or 1, got {np.unique(choices).tolist()}")
        return np.where(choices[:, 0] == 1, 1.0, -1.0)

    def step(
        self, continuous_actions: np.ndarray, discrete_actions: np.ndarray
    ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        """Advance every copy one step.

        Args:
            continuous_actions: float32 ``[N, C]`` (C = 1 when continuous, else 0 columns).
            discrete_actions: int ``[N, B]`` (B = 1 when discrete, else 0 columns).

        Returns:
            ``(obs, rewards, terminated, truncated)``: ``[float32 [N, 1]]`` (image mode: ``[uint8
            [N, H, W, C]]``), float32 ``[N]``, bool
            ``[N]``, bool ``[N]``. Copies that ended an episode on the previous step are reset
            instead (their action ignored): reset obs, reward 0, neither flag.

        Raises:
            ValueError: an action array of the wrong width, or a discrete action outside {0, 1}.
        """
        moves = self._moves(continuous_actions, discrete_actions)
        resetting = self._needs_reset.copy()
        active = ~resetting
        self._reset_copies(resetting)
        self._position[active] = np.clip(self._position[active] + self.step_size * moves[active], -1.0, 1.0)
        self._steps[active] += 1
        reached = active & (np.abs(self._position) >= 1.0 - _BOUNDARY_EPS)
        truncated = active & ~reached & (self._steps >= self.max_episode_steps)
        rewards = np.where(active, -STEP_COST, 0.0)
        rewards[reached] = SUCCESS_REWARD * np.sign(self._position[reached]) * self._goal[reached]
        self._needs_reset = reached | truncated
        return self._observations(), rewards.astype(np.float32), reached, truncated
