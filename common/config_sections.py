"""The sections inside one behavior of ML-Agents' trainer YAML: hyperparameters, networks, reward signals.

One frozen dataclass per section. Field names and defaults are those of ML-Agents 1.x (release 20+,
``mlagents.trainers.settings``); ``trainer_type: bc`` is stepstream's own, and so are the fields whose metadata
is ``STEPSTREAM_KEY`` (PPO's variants, gSDE). Every class validates its
ranges in ``__post_init__``, so a direct construction is checked exactly like a parsed file, with a
:class:`ConfigKeyError` whose ``key`` names the field; the parser (:mod:`common.config`) prefixes the
dotted path and the file name. Import these names from :mod:`common.config`.

Units: "agent steps" counts agent experiences (one agent, one step), never env steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from common.config_errors import ConfigKeyError as ConfigKeyError  # re-exported: the schema's error type
from common.config_errors import NotSupportedKeyError, at_least, positive, require
from common.demo_timing import DemoActionTiming

STEPSTREAM_KEY = {"stepstream": True}
"""Field metadata of a key stepstream adds to a section, one ML-Agents' YAML does not have."""


def log_std_in_range(value: float) -> None:
    """``log_std_init`` (PPO's, SAC's) lies within the clip of the policy's log std."""
    require(-20.0 <= value <= 2.0, "log_std_init", f"must be in [-20, 2], got {value!r}")


class ScheduleType(str, Enum):
    """How a hyperparameter changes over ``max_steps`` (ML-Agents' ``ScheduleType``)."""

    CONSTANT = "constant"
    LINEAR = "linear"


class EncoderType(str, Enum):
    """Visual encoder for image observations (ML-Agents' ``EncoderType``; layers in ``trainer.encoders``)."""

    SIMPLE = "simple"
    NATURE_CNN = "nature_cnn"
    RESNET = "resnet"
    MATCH3 = "match3"
    FULLY_CONNECTED = "fully_connected"


class ActivationType(str, Enum):
    """Activation of PPO's hidden layers (stepstream's own ``hyperparameters.activation``)."""

    TANH = "tanh"
    RELU = "relu"
    SWISH = "swish"


class TrainerType(str, Enum):
    """Which trainer learns a behavior; ``bc`` is stepstream's standalone behavioural cloning."""

    PPO = "ppo"
    SAC = "sac"
    BC = "bc"
    POCA = "poca"


class RewardSignalType(str, Enum):
    """Reward signal names under ``reward_signals``."""

    EXTRINSIC = "extrinsic"
    GAIL = "gail"
    CURIOSITY = "curiosity"
    RND = "rnd"


# --- hyperparameters ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class StateDependentExploration:
    """gSDE's keys (stepstream's own), shared by PPO and SAC: generalised state-dependent exploration for continuous
    actions (SB3's ``use_sde``, Raffin et al. 2021, "Smooth Exploration for Robotic Reinforcement Learning")."""

    use_sde: bool = field(default=False, metadata=STEPSTREAM_KEY)
    """The noise is ``latent(s) @ W``, the policy's last hidden layer times an exploration matrix ``W ~ N(0, sigma^2)``
    [hidden_units, C] that the processor holds per agent, drawn anew at its episode start and every
    ``sde_sample_freq`` steps; the log-prob is the Gaussian of the per-state std ``sqrt(latent^2 @ sigma^2)`` (SAC's
    then tanh-squashed). ``log_std_init`` is sigma's initial log. false: white noise (ML-Agents)."""
    sde_sample_freq: int = field(default=-1, metadata=STEPSTREAM_KEY)
    """With ``use_sde``: agent steps each agent keeps one exploration matrix; -1 (SB3's default): one trajectory
    segment, ``time_horizon`` steps (SB3 draws at each rollout start: PPO's ``n_steps``, SAC's ``train_freq``);
    >= 1 otherwise."""
    use_expln: bool = field(default=False, metadata=STEPSTREAM_KEY)
    """With ``use_sde``: sigma is ``expln(log_std)`` (``exp`` below 0, ``log1p(x) + 1`` above) instead of
    ``exp(log_std)`` (SB3's ``use_expln``)."""

    def _check_sde(self) -> None:
        require(
            self.sde_sample_freq == -1 or self.sde_sample_freq >= 1,
            "sde_sample_freq",
            f"must be -1 or >= 1, got {self.sde_sample_freq!r}",
        )


@dataclass(frozen=True, kw_only=True)
class PPOHyperparameters(StateDependentExploration):
    """``hyperparameters`` for ``trainer_type: ppo`` (Schulman et al. 2017, arXiv:1707.06347)."""

    batch_size: int = 1024
    """Experiences per gradient minibatch (agent steps); >= 1."""
    buffer_size: int = 10240
    """Experiences gathered before each update (agent steps); >= 1, best a multiple of batch_size."""
    learning_rate: float = 3.0e-4
    """Adam step size at the start of training (per gradient step); > 0."""
    learning_rate_schedule: ScheduleType = ScheduleType.LINEAR
    """``linear`` decays the learning rate towards 0 at max_steps; ``constant`` keeps it."""
    beta: float = 5.0e-3
    """Entropy bonus coefficient (dimensionless); >= 0."""
    epsilon: float = 0.2
    """Clip range of the policy probability ratio (dimensionless); > 0, usually 0.1-0.3."""
    lambd: float = 0.95
    """GAE lambda (dimensionless); in [0, 1]."""
    num_epoch: int = 3
    """Passes over the update buffer per update; >= 1."""
    beta_schedule: ScheduleType | None = None
    """Schedule of beta (linear ends at 1e-5); None follows learning_rate_schedule, as in ML-Agents."""
    epsilon_schedule: ScheduleType | None = None
    """Schedule of epsilon (linear ends at 0.1); None follows learning_rate_schedule, as in ML-Agents."""
    shared_critic: bool = False
    """One encoder and body feed both the policy and the value heads, trained by both losses (ML-Agents' key and
    default; its docs: useful with images); false: the critic has networks of its own."""
    # Stepstream's own keys (ML-Agents' YAML has none): the variants where the defaults follow SB3's PPO.
    clip_value_loss: bool = field(default=False, metadata=STEPSTREAM_KEY)
    """Clip the value loss around the old value estimates by epsilon, as ML-Agents does; false: SB3's plain MSE."""
    max_grad_norm: float | None = field(default=0.5, metadata=STEPSTREAM_KEY)
    """Clip each minibatch's global gradient norm to this (SB3's max_grad_norm); > 0; null: no clipping (ML-Agents)."""
    activation: ActivationType = field(default=ActivationType.TANH, metadata=STEPSTREAM_KEY)
    """Activation of the policy's and value network's hidden layers: tanh (SB3), relu, or swish (ML-Agents)."""
    orthogonal_init: bool = field(default=True, metadata=STEPSTREAM_KEY)
    """Orthogonal kernels (gain sqrt(2) hidden, 0.01 policy head, 1 value head) and zero biases: SB3's ``ortho_init``;
    false: SB3's ``ortho_init=False``, torch.nn.Linear's own start (kernels and biases uniform in +-1/sqrt(fan_in))."""
    proximal_clip: bool = field(default=False, metadata=STEPSTREAM_KEY)
    """Clip the ratio around the policy at the update's start and weight the advantages by pi_prox / pi_behaviour
    (decoupled PPO), so rows taken while the trainer updated (policy lag) still train; false: around the acting
    policy (ML-Agents, SB3). Helped Acrobot-v1, slowed CartPole-v1 (trainer/ppo.py, PPOLearner._proximal)."""
    normalize_reward: bool = field(default=False, metadata=STEPSTREAM_KEY)
    """Divide the extrinsic reward by the running std of its discounted return (SB3's VecNormalize, the reward half;
    RL-Zoo's ``normalize: true`` turns it on with the observations'); false: raw rewards, as ML-Agents."""
    log_std_init: float = field(default=0.0, metadata=STEPSTREAM_KEY)
    """Initial log standard deviation of the continuous actions' Gaussian (SB3's ``log_std_init``; 0: std 1, as
    ML-Agents and SB3's default); in [-20, 2], the clip of the policy's log_std. With ``use_sde`` it is the initial
    log std of every entry of gSDE's exploration matrix (SB3's meaning there too): an action's std is then
    ``sqrt(sum_j latent_j^2) * exp(log_std_init)``, ~5.7 times it for 64 tanh units near +-1."""
    noise_hold_steps: int = field(default=1, metadata=STEPSTREAM_KEY)
    """Agent steps each agent keeps one draw of its continuous actions' Gaussian noise (the processor's, per agent,
    redrawn every this many of its steps and at its episode start); >= 1; 1: fresh noise every step (ML-Agents). Held
    noise explores in time-correlated pushes, as SB3's gSDE with ``sde_sample_freq`` does; each step's action is
    still N(mean, std), so the log-prob is unchanged (``processor.exploration``)."""

    def __post_init__(self) -> None:
        at_least(self.batch_size, 1, "batch_size")
        at_least(self.buffer_size, 1, "buffer_size")
        positive(self.learning_rate, "learning_rate")
        at_least(self.beta, 0, "beta")
        positive(self.epsilon, "epsilon")
        require(0 <= self.lambd <= 1, "lambd", f"must be in [0, 1], got {self.lambd!r}")
        at_least(self.num_epoch, 1, "num_epoch")
        if self.max_grad_norm is not None:
            positive(self.max_grad_norm, "max_grad_norm")
        log_std_in_range(self.log_std_init)
        at_least(self.noise_hold_steps, 1, "noise_hold_steps")
        self._check_sde()
        # gSDE holds its own noise (the exploration matrix); holding the white noise too would be a second key for it.
        require(
            not (self.use_sde and self.noise_hold_steps > 1),
            "noise_hold_steps",
            f"must be 1 with use_sde (sde_sample_freq sets how long gSDE's noise is held), got {self.noise_hold_steps}",
        )

    @property
    def num_minibatches(self) -> int:
        """Full minibatches per epoch: ``buffer_size // batch_size``."""
        return self.buffer_size // self.batch_size

    @property
    def effective_beta_schedule(self) -> ScheduleType:
        """``beta_schedule``, or ``learning_rate_schedule`` when unset."""
        return self.beta_schedule or self.learning_rate_schedule

    @property
    def effective_epsilon_schedule(self) -> ScheduleType:
        """``epsilon_schedule``, or ``learning_rate_schedule`` when unset."""
        return self.epsilon_schedule or self.learning_rate_schedule

    def resolved(self) -> dict[str, Any]:
        """Fields whose written value is derived: what ``to_dict`` records instead of None."""
        return {"beta_schedule": self.effective_beta_schedule, "epsilon_schedule": self.effective_epsilon_schedule}


@dataclass(frozen=True, kw_only=True)
class POCAHyperparameters(PPOHyperparameters):
    """``hyperparameters`` for ``trainer_type: poca`` (MA-POCA, Cohen et al. 2021, arXiv:2111.05992): ML-Agents'
    POCASettings, whose keys and defaults are PPO's (``batch_size`` ... ``epsilon_schedule``). Of stepstream's own
    PPO keys, POCA takes ``activation``, ``orthogonal_init``, ``max_grad_norm``, ``log_std_init`` and
    ``clip_value_loss`` (default true here: ML-Agents' POCA clips both the value and the baseline loss); the
    others (gSDE, ``shared_critic``, ``proximal_clip``, ``normalize_reward``, ``noise_hold_steps``) stay at their
    defaults (``trainer/poca.py``)."""

    clip_value_loss: bool = field(default=True, metadata=STEPSTREAM_KEY)
    """Clip the value and baseline losses around their old estimates by epsilon (ML-Agents' POCA); false: plain MSE."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for key, default in (
            ("use_sde", False),
            ("shared_critic", False),
            ("proximal_clip", False),
            ("normalize_reward", False),
            ("noise_hold_steps", 1),
        ):
            value = getattr(self, key)
            require(value == default, key, f"is not supported by trainer_type poca yet (got {value!r}, only {default!r})")


@dataclass(frozen=True, kw_only=True)
class SACHyperparameters(StateDependentExploration):
    """``hyperparameters`` for ``trainer_type: sac`` (Haarnoja et al. 2018, arXiv:1812.05905)."""

    batch_size: int = 128
    """Experiences per gradient minibatch sampled from the replay buffer (agent steps); >= 1."""
    buffer_size: int = 50000
    """Replay buffer capacity (agent steps); >= 1."""
    learning_rate: float = 3.0e-4
    """Adam step size at the start of training (per gradient step); > 0."""
    learning_rate_schedule: ScheduleType = ScheduleType.CONSTANT
    """``constant`` keeps the learning rate; ``linear`` decays it towards 0 at max_steps."""
    buffer_init_steps: int = 0
    """Experiences gathered before the first update (agent steps); >= 0."""
    tau: float = 0.005
    """Soft-update rate of the target Q networks per update (dimensionless); in (0, 1]."""
    steps_per_update: float = 1.0
    """Agent steps per gradient update, on average (ratio); > 0."""
    save_replay_buffer: bool = False
    """Save the replay buffer with each checkpoint and reload it on resume."""
    init_entcoef: float = 1.0
    """Initial entropy coefficient alpha (dimensionless); > 0."""
    reward_signal_steps_per_update: float | None = None
    """Agent steps per reward-signal update (ratio); > 0; None means steps_per_update, as in ML-Agents."""
    # Stepstream's own keys: the networks' activation, a fixed entropy coefficient, gSDE (StateDependentExploration)
    # and its initial sigma.
    activation: ActivationType = field(default=ActivationType.SWISH, metadata=STEPSTREAM_KEY)
    """Activation of the policy's and critics' hidden layers: swish (ML-Agents), relu (SB3's SAC) or tanh."""
    learn_entcoef: bool = field(default=True, metadata=STEPSTREAM_KEY)
    """Tune the entropy coefficients towards their target entropies (ML-Agents, SB3's ``ent_coef: auto``); false
    holds them at ``init_entcoef`` (SB3's ``ent_coef: <float>``, as RL-Zoo's MountainCarContinuous entry)."""
    log_std_init: float = field(default=-3.0, metadata=STEPSTREAM_KEY)
    """With ``use_sde``: the initial log std of every entry of gSDE's exploration matrix (SB3's SAC ``log_std_init``,
    whose default is -3); in [-20, 2]. Without gSDE SAC's std is a head of the policy network and this is unused."""

    def __post_init__(self) -> None:
        self._check_sde()
        log_std_in_range(self.log_std_init)
        at_least(self.batch_size, 1, "batch_size")
        at_least(self.buffer_size, 1, "buffer_size")
        positive(self.learning_rate, "learning_rate")
        at_least(self.buffer_init_steps, 0, "buffer_init_steps")
        require(0 < self.tau <= 1, "tau", f"must be in (0, 1], got {self.tau!r}")
        positive(self.steps_per_update, "steps_per_update")
        positive(self.init_entcoef, "init_entcoef")
        if self.reward_signal_steps_per_update is not None:
            positive(self.reward_signal_steps_per_update, "reward_signal_steps_per_update")

    @property
    def effective_reward_signal_steps_per_update(self) -> float:
        """``reward_signal_steps_per_update``, or ``steps_per_update`` when unset."""
        if self.reward_signal_steps_per_update is None:
            return self.steps_per_update
        return self.reward_signal_steps_per_update

    def resolved(self) -> dict[str, Any]:
        """Fields whose written value is derived: what ``to_dict`` records instead of None."""
        return {"reward_signal_steps_per_update": self.effective_reward_signal_steps_per_update}


@dataclass(frozen=True, kw_only=True)
class BCHyperparameters:
    """``hyperparameters`` for ``trainer_type: bc``: supervised learning of the demonstrated actions.

    Stepstream's own (ML-Agents 0.12 called it ``offline_bc``; batch_size and learning_rate follow
    its defaults). Provisional until the BC trainer lands.
    """

    demo_path: str
    """Path of a ``.demo`` file, or a folder of them (required)."""
    demo_action_timing: DemoActionTiming = DemoActionTiming.AUTO
    """Which record holds the action chosen at an observation: ``auto`` (detected per file), ``same``, ``next``."""
    batch_size: int = 64
    """Demonstrated experiences per gradient minibatch (agent steps); >= 1."""
    num_epoch: int = 3
    """Passes over the demonstrations per update; >= 1."""
    learning_rate: float = 3.0e-4
    """Adam step size at the start of training (per gradient step); > 0."""
    learning_rate_schedule: ScheduleType = ScheduleType.CONSTANT
    """``constant`` keeps the learning rate; ``linear`` decays it towards 0 at max_steps."""

    def __post_init__(self) -> None:
        require(bool(self.demo_path), "demo_path", "must name a .demo file or folder, got ''")
        at_least(self.batch_size, 1, "batch_size")
        at_least(self.num_epoch, 1, "num_epoch")
        positive(self.learning_rate, "learning_rate")


Hyperparameters = PPOHyperparameters | SACHyperparameters | BCHyperparameters | POCAHyperparameters


# --- networks, reward signals, behavioural cloning ----------------------------------------


@dataclass(frozen=True, kw_only=True)
class MemorySettings:
    """``network_settings.memory``: an LSTM whose state the processor holds per agent (ML-Agents' ``MemorySettings``).

    The state is ``memory_size`` floats, the LSTM's h and c concatenated (ML-Agents' layout), so it is even.
    Trainers learn on sequences of ``sequence_length`` steps, which must fit one minibatch (checked by
    ``BehaviorSettings``, which knows the batch size).
    """

    sequence_length: int = 64
    """Steps per training sequence (agent steps); >= 1."""
    memory_size: int = 128
    """Size of the recurrent state (floats); > 0 and even."""

    def __post_init__(self) -> None:
        at_least(self.sequence_length, 1, "sequence_length")
        ok = self.memory_size > 0 and self.memory_size % 2 == 0
        require(ok, "memory_size", f"must be > 0 and even, got {self.memory_size!r}")


@dataclass(frozen=True, kw_only=True)
class NetworkSettings:
    """``network_settings``: the MLP body of the policy, the critics and the reward-signal models."""

    normalize: bool = False
    """Normalise vector observations with a running mean and variance."""
    hidden_units: int = 128
    """Units per hidden layer; >= 1."""
    num_layers: int = 2
    """Hidden layers; >= 1."""
    vis_encode_type: EncoderType = EncoderType.SIMPLE
    """Encoder for image observations (``trainer.encoders``); each has a minimum image side, checked against the
    behavior's observation specs when its trainer is built (a smaller image is a ConfigKeyError on this key)."""
    memory: MemorySettings | None = None
    """Recurrent memory (an LSTM after the MLP body); None: a feed-forward policy. Refused in a reward signal's
    ``network_settings``."""
    deterministic: bool = False
    """Act with the distribution's mode (the Gaussian's mean, each branch's arg-max) instead of sampling, in training
    runs and with ``--inference`` (ML-Agents' key; ``--deterministic`` sets it for every behavior)."""

    def __post_init__(self) -> None:
        at_least(self.hidden_units, 1, "hidden_units")
        at_least(self.num_layers, 1, "num_layers")


@dataclass(frozen=True, kw_only=True)
class RewardSignalSettings:
    """``reward_signals.extrinsic``, and the fields every reward signal shares."""

    gamma: float = 0.99
    """Discount factor per agent step (dimensionless); in [0, 1)."""
    strength: float = 1.0
    """Multiplier of this signal's reward (dimensionless); finite."""
    network_settings: NetworkSettings = field(default_factory=NetworkSettings)
    """Network of the signal's own model (GAIL discriminator, curiosity model); unused by extrinsic."""

    def __post_init__(self) -> None:
        require(0 <= self.gamma < 1, "gamma", f"must be in [0, 1), got {self.gamma!r}")
        if self.network_settings.memory is not None:
            raise NotSupportedKeyError("network_settings.memory", "not supported yet in a reward signal's network")
        require(abs(self.strength) < float("inf"), "strength", f"must be finite, got {self.strength!r}")


@dataclass(frozen=True, kw_only=True)
class LearnedSignalSettings(RewardSignalSettings):
    """What every signal with a model of its own shares (GAIL, curiosity, RND): its step size and the deprecated
    width key, with their checks."""

    learning_rate: float = 3.0e-4
    """Adam step size of the signal's model; > 0."""
    encoding_size: int | None = None
    """Deprecated by ML-Agents; sets network_settings.hidden_units when network_settings is absent."""

    def __post_init__(self) -> None:
        super().__post_init__()
        positive(self.learning_rate, "learning_rate")
        if self.encoding_size is not None:
            at_least(self.encoding_size, 1, "encoding_size")


@dataclass(frozen=True, kw_only=True)
class GAILSettings(LearnedSignalSettings):
    """``reward_signals.gail`` (Ho & Ermon 2016, arXiv:1606.03476)."""

    demo_path: str
    """Path of a ``.demo`` file, or a folder of them (required)."""
    demo_action_timing: DemoActionTiming = DemoActionTiming.AUTO
    """Which record holds the action chosen at an observation: ``auto`` (detected per file), ``same``, ``next``."""
    learning_rate: float = 3.0e-4
    """Adam step size of the discriminator; > 0."""
    use_actions: bool = False
    """Let the discriminator see actions as well as observations."""
    use_vail: bool = False
    """Use a variational information bottleneck in the discriminator (Peng et al. 2018)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(bool(self.demo_path), "demo_path", "must name a .demo file or folder, got ''")


@dataclass(frozen=True, kw_only=True)
class CuriositySettings(LearnedSignalSettings):
    """``reward_signals.curiosity`` (Pathak et al. 2017, arXiv:1705.05363)."""

    learning_rate: float = 3.0e-4
    """Adam step size of the forward and inverse models; > 0."""


@dataclass(frozen=True, kw_only=True)
class RNDSettings(LearnedSignalSettings):
    """``reward_signals.rnd``: Random Network Distillation (Burda et al. 2018, arXiv:1810.12894)."""

    learning_rate: float = 1.0e-4
    """Adam step size of the predictor network; > 0."""


REWARD_SIGNAL_SETTINGS_FOR: dict[RewardSignalType, type[RewardSignalSettings]] = {
    RewardSignalType.EXTRINSIC: RewardSignalSettings,
    RewardSignalType.GAIL: GAILSettings,
    RewardSignalType.CURIOSITY: CuriositySettings,
    RewardSignalType.RND: RNDSettings,
}
"""The settings class of each reward signal."""


@dataclass(frozen=True, kw_only=True)
class BehavioralCloningSettings:
    """``behavioral_cloning``: a BC loss added to a PPO or SAC update (ML-Agents' component)."""

    demo_path: str
    """Path of a ``.demo`` file, or a folder of them (required)."""
    demo_action_timing: DemoActionTiming = DemoActionTiming.AUTO
    """Which record holds the action chosen at an observation: ``auto`` (detected per file), ``same``, ``next``."""
    steps: int = 0
    """Agent steps over which strength decays linearly to 0; 0 keeps it constant; >= 0."""
    strength: float = 1.0
    """Weight of the BC loss relative to the RL loss (dimensionless); >= 0."""
    samples_per_update: int = 0
    """Demonstrated experiences used per update; 0 uses them all; >= 0."""
    num_epoch: int | None = None
    """Passes over the demonstrations per update; >= 1; None uses the trainer's num_epoch."""
    batch_size: int | None = None
    """Demonstrated experiences per minibatch; >= 1; None uses the trainer's batch_size."""

    def __post_init__(self) -> None:
        require(bool(self.demo_path), "demo_path", "must name a .demo file or folder, got ''")
        at_least(self.steps, 0, "steps")
        at_least(self.strength, 0, "strength")
        at_least(self.samples_per_update, 0, "samples_per_update")
        if self.num_epoch is not None:
            at_least(self.num_epoch, 1, "num_epoch")
        if self.batch_size is not None:
            at_least(self.batch_size, 1, "batch_size")


@dataclass(frozen=True, kw_only=True)
class SelfPlaySettings:
    """``self_play``: adversarial training against past snapshots (ML-Agents' ghost trainer; ``common.self_play``).

    ``save_steps`` and ``team_change`` count the learning team's trainer steps, ``swap_steps`` the opponents'
    steps, as ML-Agents counts them. Where ML-Agents only warns (a ratio outside [0, 1], ``team_change`` above
    ``max_steps``) the config is refused (the latter by ``BehaviorSettings``).
    """

    save_steps: int = 20000
    """A snapshot of the learning policy is saved every this many trainer steps (agent steps); >= 1."""
    team_change: int | None = None
    """The learning team changes every this many trainer steps (agent steps); >= 1; None: 5 x save_steps."""
    swap_steps: int = 2000
    """The opponents get a new snapshot every this many opponent steps (agent steps); >= 1."""
    window: int = 10
    """Snapshots kept to draw opponents from (the newest); >= 1."""
    play_against_latest_model_ratio: float = 0.5
    """Probability that a swap gives the opponents the latest policy instead of one drawn from the window; in [0, 1]."""
    initial_elo: float = 1200.0
    """The ELO rating a run starts with (ML-Agents' default, chess's initial rating); finite."""

    def __post_init__(self) -> None:
        at_least(self.save_steps, 1, "save_steps")
        if self.team_change is not None:
            at_least(self.team_change, 1, "team_change")
        at_least(self.swap_steps, 1, "swap_steps")
        at_least(self.window, 1, "window")
        ratio = self.play_against_latest_model_ratio
        require(0.0 <= ratio <= 1.0, "play_against_latest_model_ratio", f"must be in [0, 1], got {ratio!r}")
        require(math.isfinite(self.initial_elo), "initial_elo", f"must be finite, got {self.initial_elo!r}")

    @property
    def effective_team_change(self) -> int:
        """``team_change``, or ML-Agents' default of 5 x ``save_steps`` when unset (agent steps)."""
        return self.team_change if self.team_change is not None else 5 * self.save_steps
