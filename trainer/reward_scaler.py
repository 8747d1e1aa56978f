"""``RewardScaler``: SB3 ``VecNormalize``'s reward half (its ``normalize_reward``), PPO's ``normalize_reward`` setting.

Each agent's extrinsic reward is divided by the running standard deviation of its discounted return, so the value
targets stay near unit scale whatever the env's reward scale.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from common import trajectory as tr

#: SB3 VecNormalize's bounds: the scaled reward is clipped to +-REWARD_CLIP, and the std has this floor (variance).
REWARD_CLIP = 10.0
REWARD_VARIANCE_EPSILON = 1e-8


class RewardScaler:
    """``r / sqrt(var(G) + 1e-8)``, clipped to +-10, where ``G_t = gamma * G_{t-1} + r_t`` is each agent's running
    discounted return (reset after its episode ends) and ``var(G)`` its running variance over every step taken in so
    far (not centred: the reward keeps its sign).

    Why: with -1 per step until the goal (Acrobot-v1) the value targets reach -1 / (1 - gamma) = -100. The value
    loss's gradient then dwarfs the policy's, and ``max_grad_norm`` clips both together, so the policy's step
    shrinks by the same factor (benchmarks/classic_control.py shows the A/B).

    The moments (``variables``) checkpoint with the learner; the agents' running returns do not (a resumed run
    restarts them at 0). A plain class: TF's checkpoint tracking rejects a dict changed outside its wrapper.
    """

    def __init__(self, gamma: float) -> None:
        self.gamma = gamma
        self.count = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="count")
        self.mean = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="mean")
        self.var = tf.Variable(1.0, dtype=tf.float64, trainable=False, name="var")
        self._returns: dict[tuple[str, int], float] = {}

    @property
    def variables(self) -> tuple[tf.Variable, ...]:
        """(count, mean, var) of the discounted returns, float64 scalars."""
        return (self.count, self.mean, self.var)

    def checkpoint_objects(self) -> dict[str, object]:
        """The moments, by checkpoint name (``reward_scaler_count`` ...)."""
        return {f"reward_scaler_{v.name.split(':')[0]}": v for v in self.variables}

    def scale(self, trajectories: Sequence[tr.Trajectory], rewards: np.ndarray) -> np.ndarray:
        """float32 [N]: ``rewards`` [N] (the trajectories' steps in order) scaled, after folding their returns in."""
        returns = np.empty(len(rewards), np.float64)
        start = 0
        for trajectory in trajectories:
            key = (trajectory.id.session_id, trajectory.id.agent_id)
            running = self._returns.pop(key, 0.0)
            for t in range(start, start + trajectory.length):
                running = running * self.gamma + float(rewards[t])
                returns[t] = running
            start += trajectory.length
            if not trajectory.done_reached:  # the episode goes on in this agent's next trajectory
                self._returns[key] = running
        self._update(returns)
        scaled = rewards / np.sqrt(float(self.var.numpy()) + REWARD_VARIANCE_EPSILON)
        return np.clip(scaled, -REWARD_CLIP, REWARD_CLIP).astype(np.float32)

    def _update(self, returns: np.ndarray) -> None:
        """Chan et al.'s parallel update of (count, mean, var) with a batch, as SB3's ``RunningMeanStd``."""
        if len(returns) == 0:
            return
        count, mean, var = float(self.count.numpy()), float(self.mean.numpy()), float(self.var.numpy())
        batch_count, batch_mean, batch_var = len(returns), float(returns.mean()), float(returns.var())
        total = count + batch_count
        delta = batch_mean - mean
        m2 = var * count + batch_var * batch_count + delta**2 * count * batch_count / total
        self.count.assign(total)
        self.mean.assign(mean + delta * batch_count / total)
        self.var.assign(m2 / total)
