"""Image observations through the learners: PPO, SAC and BC update on synthetic camera rows (with a vector beside
the camera), GAIL and curiosity encode images too, BC and GAIL learn from ``testdcvis.demo`` (84x84 RGB), a visual
policy checkpoints and resumes, and the exported artifact acts as TensorFlow does, in the processor's runtime
(TFLite, uint8 frames in) and in ONNX (onnxruntime, NCHW floats in [0, 1], ML-Agents' boundary).

Shapes: ``T`` steps, ``H, W, C`` a frame (channels last), ``N`` rows.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tensorflow as tf

from common.config import (
    BCHyperparameters,
    BehaviorSettings,
    CuriositySettings,
    EncoderType,
    GAILSettings,
    NetworkSettings,
    PPOHyperparameters,
    RewardSignalSettings,
    RewardSignalType,
    SACHyperparameters,
    TrainerType,
)
from common.errors import ProtocolError
from common.policy_contract import ACTION_MASKS, DETERMINISTIC_CONTINUOUS_ACTIONS, DETERMINISTIC_DISCRETE_ACTIONS
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.trajectory import Trajectory, TrajectoryId
from processor.inference import Policy
from trainer.bc import BCLearner
from trainer.checkpoint import Checkpointer
from trainer.networks import SharedValueHeads
from trainer.onnx_export import policy_to_onnx
from trainer.ppo import PPOLearner
from trainer.sac import SACLearner
from trainer.summaries import CLONING_LOSS, CURIOSITY_FORWARD_LOSS, CURIOSITY_INVERSE_LOSS, GAIL_LOSS

FRAME = (20, 20, 3)  # the smallest side ``simple`` takes
HYBRID = ActionSpec(1, (3,))
UINT8, FLOAT32 = np.dtype(np.uint8), np.dtype(np.float32)
DEMO_DIR = Path(
    os.environ.get("STEPSTREAM_DEMO_DIR", Path(__file__).resolve().parents[3] / "shared" / "data" / "mlagents-demos")
)
VIS_DEMO = DEMO_DIR / "testdcvis.demo"
#: testdcvis.demo's spec: an 84x84 RGB camera read as [H, W, C] (its documented rule), an empty vector, 4 branches.
VIS_DEMO_ACTIONS = ActionSpec(0, (3, 3, 3, 2))


def brain(frame_dtype: np.dtype = UINT8, frame: tuple[int, int, int] = FRAME) -> BrainParameters:
    specs = (ObservationSpec((3,), FLOAT32), ObservationSpec(frame, frame_dtype, "camera"))
    return BrainParameters("Camera", specs, HYBRID)


def network(encoder: EncoderType = EncoderType.SIMPLE, normalize: bool = True) -> NetworkSettings:
    return NetworkSettings(normalize=normalize, hidden_units=16, num_layers=1, vis_encode_type=encoder)


def trajectory(
    steps: int, seed: int = 0, frame_dtype: np.dtype = UINT8, spec: ActionSpec = HYBRID, frame: tuple[int, int, int] = FRAME
) -> Trajectory:
    """Random vector and frames (uint8 0-255, or float32 in [0, 1]) and actions; log-probs are placeholders."""
    rng = np.random.default_rng(seed)
    c, b = spec.continuous_size, spec.num_branches

    def frames(*lead: int) -> np.ndarray:
        if frame_dtype == UINT8:
            return rng.integers(0, 256, (*lead, *frame)).astype(np.uint8)
        return rng.random((*lead, *frame)).astype(np.float32)

    discrete = np.stack([rng.integers(0, n, steps) for n in spec.discrete_branches], 1) if b else np.zeros((steps, 0))
    return Trajectory(
        id=TrajectoryId("s", 0, seed),
        behavior_name="Camera",
        obs=[rng.normal(size=(steps, 3)).astype(np.float32), frames(steps)],
        next_obs=[rng.normal(size=3).astype(np.float32), frames()],
        continuous_actions=rng.normal(size=(steps, c)).astype(np.float32),
        discrete_actions=discrete.astype(np.int32),
        continuous_log_probs=-np.ones((steps, c), np.float32),
        discrete_log_probs=-np.ones((steps, b), np.float32),
        prev_continuous_actions=np.zeros((steps, c), np.float32),
        prev_discrete_actions=np.zeros((steps, b), np.int32),
        action_mask=np.ones((steps, spec.mask_width), bool) if b else None,
        rewards=rng.normal(size=steps).astype(np.float32),
        done=np.zeros(steps, bool),
        policy_versions=np.zeros(steps, np.int64),
        done_reached=False,
        interrupted=False,
    )


def ppo_settings(
    encoder: EncoderType = EncoderType.SIMPLE, shared_critic: bool = False, **signals: RewardSignalSettings
) -> BehaviorSettings:
    rewards = {RewardSignalType.EXTRINSIC: RewardSignalSettings()}
    rewards.update({RewardSignalType(k): v for k, v in signals.items()})
    hyperparameters = PPOHyperparameters(
        batch_size=8, buffer_size=32, num_epoch=2, learning_rate=1e-3, shared_critic=shared_critic
    )
    return BehaviorSettings(
        hyperparameters=hyperparameters,
        network_settings=network(encoder),
        reward_signals=rewards,
    )


def visual_weights(module: tf.Module) -> list[np.ndarray]:
    """The weights of a network's visual encoders (its ``encoder``)."""
    encoder = module.encoder  # type: ignore[attr-defined]
    assert encoder is not None and encoder.has_images
    return [v.numpy().copy() for v in encoder.trainable_variables]


def changed(before: list[np.ndarray], after: list[np.ndarray]) -> bool:
    return any(not np.array_equal(a, b) for a, b in zip(before, after, strict=True))


def observations(n: int, seed: int, frame_dtype: np.dtype, frame: tuple[int, int, int]) -> list[np.ndarray]:
    return trajectory(n, seed, frame_dtype, frame=frame).obs


# -- updates ----------------------------------------------------------------------------------------


def test_ppo_updates_policy_and_value_encoders_and_keeps_uint8_frames_in_its_buffer() -> None:
    learner = PPOLearner(brain(), ppo_settings(), warm_up=False)
    policy_before, value_before = visual_weights(learner.policy), visual_weights(learner.value)
    learner.add_trajectories([trajectory(32)])
    assert learner.update_buffer["obs_1"].data.dtype == np.uint8  # images stay uint8 up to the network
    assert learner.normalizers[1] is None and learner.normalizers[0] is not None  # vectors only
    stats = learner.update()
    assert np.isfinite(stats["Losses/Policy Loss"]) and np.isfinite(stats["Losses/Value Loss"])
    assert changed(policy_before, visual_weights(learner.policy))
    assert changed(value_before, visual_weights(learner.value))
    assert learner.policy.encoder is not learner.value.encoder  # separate encoders, as ML-Agents' PPO


def test_ppo_shared_critic_trains_one_trunk_that_checkpoints_and_exports_the_actor(tmp_path: Path) -> None:
    """``shared_critic`` (ML-Agents' SharedActorCritic): one encoder and body feed the policy and value heads, the
    value loss reaches that trunk, each weight is in the optimiser once, and checkpoint, resume and the exported
    artifact (the actor alone) work as without it."""
    learner = PPOLearner(brain(), ppo_settings(shared_critic=True), warm_up=False)
    assert isinstance(learner.value, SharedValueHeads) and learner.value.policy is learner.policy
    conv_kernels = [v for v in learner._variables if len(v.shape) == 4]
    assert len(conv_kernels) == 2  # ``simple``'s two convolutions, once: the critic has none of its own
    assert len({id(v) for v in learner._variables}) == len(learner._variables)
    obs = [tf.constant(o) for o in observations(4, 3, UINT8, FRAME)]
    with tf.GradientTape() as tape:
        values = learner.value.evaluate(learner._normalized(obs))
    assert values.shape == (4, 1)
    gradients = tape.gradient(values, learner.policy.encoder.trainable_variables)
    assert all(g is not None and np.any(g.numpy() != 0) for g in gradients)  # V's gradient reaches the trunk

    before = visual_weights(learner.policy)
    learner.add_trajectories([trajectory(32)])
    stats = learner.update()
    assert np.isfinite(stats["Losses/Policy Loss"]) and np.isfinite(stats["Losses/Value Loss"])
    assert changed(before, visual_weights(learner.policy))

    Checkpointer(tmp_path, learner, keep_checkpoints=2).save(step=32, version=1)
    target = PPOLearner(brain(), ppo_settings(shared_critic=True), seed=2, warm_up=False)
    assert Checkpointer(tmp_path, target, keep_checkpoints=2).restore_latest() == (32, 1)
    for a, b in zip(learner._variables, target._variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    restored = visual_weights(target.policy)
    target.add_trajectories([trajectory(32, seed=5)])
    target.update()
    assert changed(restored, visual_weights(target.policy))

    expected = target.policy(*target._normalized(obs))
    policy = Policy.from_update(target.export_policy(version=2, trainer_step=64))
    got = policy.forward([o.numpy() for o in obs])
    np.testing.assert_allclose(got["mean"], expected["mean"].numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["logits"], expected["logits"].numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("frame_dtype", [UINT8, FLOAT32], ids=["uint8", "float32"])
def test_sac_updates_the_encoders_of_policy_and_critics(frame_dtype: np.dtype) -> None:
    settings = BehaviorSettings(
        trainer_type=TrainerType.SAC,
        hyperparameters=SACHyperparameters(batch_size=8, buffer_size=64, buffer_init_steps=0, learning_rate=1e-3),
        network_settings=network(EncoderType.MATCH3),
        reward_signals={RewardSignalType.EXTRINSIC: RewardSignalSettings()},
    )
    learner = SACLearner(brain(frame_dtype), settings, jit_compile=False)
    # The policy reads Q1's encoder, which only the critic loss trains (trainer/sac.py's POLICY_ENCODER).
    assert learner.policy.encoder is learner.q1.encoder
    encoder_ids = {id(v) for v in learner.q1.encoder.trainable_variables}
    assert encoder_ids and not encoder_ids & {id(v) for v in learner._policy_vars}
    assert encoder_ids <= {id(v) for v in learner._q_vars}
    policy_before, q_before = visual_weights(learner.policy), visual_weights(learner.q1)
    target_before = visual_weights(learner.target_q1)
    np.testing.assert_array_equal(
        np.concatenate([w.ravel() for w in q_before]), np.concatenate([w.ravel() for w in target_before])
    )
    learner.add_trajectories([trajectory(32, frame_dtype=frame_dtype)])
    assert learner.replay["next_obs_1"].data.dtype == frame_dtype
    stats = learner.update()
    assert np.isfinite(stats["Losses/Q1 Loss"]) and np.isfinite(stats["Losses/Policy Loss"])
    assert changed(policy_before, visual_weights(learner.policy)) and changed(q_before, visual_weights(learner.q1))
    assert changed(target_before, visual_weights(learner.target_q1))  # the Polyak step reaches the target's encoder


def test_gail_and_curiosity_encode_images_with_encoders_of_their_own(tmp_path: Path) -> None:
    """PPO with GAIL (from testdcvis.demo, 84x84 RGB) and curiosity on the demo's own spec."""
    params = BrainParameters(
        "VisualFoodCollectorLearning",
        (ObservationSpec((84, 84, 3), FLOAT32), ObservationSpec((0,), FLOAT32)),
        VIS_DEMO_ACTIONS,
    )
    small = network(EncoderType.SIMPLE, normalize=False)
    # GAIL normalises its vector observations only (the demo's empty one), each with its own statistics.
    gail = GAILSettings(demo_path=str(VIS_DEMO), network_settings=network(EncoderType.SIMPLE), use_actions=True)
    curiosity = CuriositySettings(network_settings=small)
    settings = ppo_settings(EncoderType.SIMPLE, gail=gail, curiosity=curiosity)
    learner = PPOLearner(params, settings, warm_up=False)
    signals = {s.name: s for s in learner.signals}
    discriminator, model = signals["gail"].discriminator, signals["curiosity"].model  # type: ignore[attr-defined]
    assert discriminator.encoder is not None and model.visual is not None
    assert discriminator.normalizer is None and discriminator.vector_normalizers[0] is None
    assert discriminator.vector_normalizers[1] is not None
    gail_before = [v.numpy().copy() for v in discriminator.encoder.trainable_variables]
    curiosity_before = [v.numpy().copy() for v in model.visual.trainable_variables]
    rng = np.random.default_rng(0)
    steps = 32
    traj = trajectory(steps, spec=VIS_DEMO_ACTIONS)
    traj.obs = [rng.random((steps, 84, 84, 3)).astype(np.float32), np.zeros((steps, 0), np.float32)]
    traj.next_obs = [rng.random((84, 84, 3)).astype(np.float32), np.zeros(0, np.float32)]
    learner.add_trajectories([traj])
    stats = learner.update()
    for key in (GAIL_LOSS, CURIOSITY_FORWARD_LOSS, CURIOSITY_INVERSE_LOSS):
        assert np.isfinite(stats[key]), key
    assert changed(gail_before, [v.numpy() for v in discriminator.encoder.trainable_variables])
    assert changed(curiosity_before, [v.numpy() for v in model.visual.trainable_variables])
    path = Checkpointer(tmp_path, learner, keep_checkpoints=1).save(step=32, version=1)
    assert path is not None
    restored = PPOLearner(params, settings, seed=3, warm_up=False)
    assert Checkpointer(tmp_path, restored, keep_checkpoints=1).restore_latest() == (32, 1)
    again = {s.name: s for s in restored.signals}
    for a, b in zip(discriminator.trainable_variables, again["gail"].discriminator.trainable_variables, strict=True):  # type: ignore[attr-defined]
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("frame_dtype", [FLOAT32, UINT8], ids=["as-recorded", "uint8-camera"])
def test_bc_learns_from_visual_demonstrations(frame_dtype: np.dtype) -> None:
    """testdcvis.demo's frames decode to float32 in [0, 1]; a uint8 camera's behavior gets them back as uint8."""
    params = BrainParameters(
        "VisualFoodCollectorLearning",
        (ObservationSpec((84, 84, 3), frame_dtype), ObservationSpec((0,), FLOAT32)),
        VIS_DEMO_ACTIONS,
    )
    settings = BehaviorSettings(
        trainer_type=TrainerType.BC,
        hyperparameters=BCHyperparameters(demo_path=str(VIS_DEMO), batch_size=8, num_epoch=2, learning_rate=1e-3),
        network_settings=network(EncoderType.SIMPLE),
        max_steps=100,
    )
    learner = BCLearner(params, settings)
    rows = learner.load_demonstrations(VIS_DEMO, holdout_fraction=0.0)
    assert rows > 0 and learner.demonstrations["obs_0"].data.dtype == frame_dtype
    before = visual_weights(learner.policy)
    learner.add_passes(rows * 2)
    stats = learner.update()
    assert np.isfinite(stats[CLONING_LOSS])
    assert changed(before, visual_weights(learner.policy))
    frames = learner.demonstrations["obs_0"].data[:4]
    policy = Policy.from_update(learner.export_policy(1, 0))
    got = policy.forward([frames, np.zeros((4, 0), np.float32)])
    want = learner.policy(tf.constant(frames), tf.zeros([4, 0]))
    np.testing.assert_allclose(got["logits"], want["logits"].numpy(), rtol=1e-4, atol=1e-4)


# -- checkpoint and resume --------------------------------------------------------------------------------


def test_a_visual_policy_checkpoints_and_resumes(tmp_path: Path) -> None:
    source = PPOLearner(brain(), ppo_settings(EncoderType.RESNET), seed=1, warm_up=False)
    source.add_trajectories([trajectory(32)])
    source.update()
    Checkpointer(tmp_path, source, keep_checkpoints=2).save(step=32, version=1)
    target = PPOLearner(brain(), ppo_settings(EncoderType.RESNET), seed=2, warm_up=False)
    assert changed(visual_weights(source.policy), visual_weights(target.policy))
    assert Checkpointer(tmp_path, target, keep_checkpoints=2).restore_latest() == (32, 1)
    for a, b in zip(source.policy.trainable_variables, target.policy.trainable_variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(source.value.trainable_variables, target.value.trainable_variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert int(target.optimizer.iterations.numpy()) == int(source.optimizer.iterations.numpy()) > 0
    # Resumed, it trains on: the next update moves the restored encoder.
    restored = visual_weights(target.policy)
    target.add_trajectories([trajectory(32, seed=5)])
    target.update()
    assert changed(restored, visual_weights(target.policy))


# -- the exported artifact --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoder", "frame_dtype"),
    [(EncoderType.NATURE_CNN, UINT8), (EncoderType.SIMPLE, FLOAT32)],
    ids=["nature_cnn-uint8", "simple-float32"],
)
def test_exported_artifact_acts_as_tensorflow_in_tflite_and_onnx(encoder: EncoderType, frame_dtype: np.dtype) -> None:
    frame = (36, 36, 3) if encoder is EncoderType.NATURE_CNN else FRAME
    learner = PPOLearner(brain(frame_dtype, frame), ppo_settings(encoder), warm_up=False)
    learner.add_trajectories([trajectory(32, frame_dtype=frame_dtype, frame=frame)])  # the normaliser moves off identity
    rng = np.random.default_rng(0)
    for variable in learner.policy.trainable_variables:  # weights far from the small initial heads
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype(np.float32))
    update = learner.export_policy(version=2, trainer_step=32)
    assert len(update.artifact.normalizers) == 1  # the vector's; the camera has none
    obs = observations(6, 7, frame_dtype, frame)
    masks = np.ones((6, 3), bool)
    masks[::2, 0] = False
    expected = learner.policy(*learner._normalized([tf.constant(o) for o in obs]))
    want_mean = np.clip(expected["mean"].numpy(), -1.0, 1.0)  # PPO's clip mode, clip 1
    want_choice = np.where(masks, expected["logits"].numpy(), -np.inf).argmax(axis=1)

    policy = Policy.from_update(update)
    assert policy.observation_dtypes[1] == frame_dtype
    got = policy.forward(obs)
    np.testing.assert_allclose(got["mean"], expected["mean"].numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["logits"], expected["logits"].numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(policy.env_continuous_actions(got["mean"]), want_mean, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(np.where(masks, got["logits"], -np.inf).argmax(axis=1), want_choice)

    session = ort.InferenceSession(policy_to_onnx(update).SerializeToString(), providers=["CPUExecutionProvider"])
    inputs = {i.name: i.shape for i in session.get_inputs()}
    assert inputs["obs_1"] == ["batch", frame[2], frame[0], frame[1]]  # NCHW, ML-Agents' boundary
    in_unit = obs[1].astype(np.float32) / np.float32(255.0) if frame_dtype == UINT8 else obs[1]
    nchw = np.ascontiguousarray(in_unit.transpose(0, 3, 1, 2))
    feed = {"obs_0": obs[0], "obs_1": nchw, ACTION_MASKS: masks.astype(np.float32)}
    out = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed), strict=True))
    np.testing.assert_allclose(out[DETERMINISTIC_CONTINUOUS_ACTIONS], want_mean, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(out[DETERMINISTIC_DISCRETE_ACTIONS][:, 0], want_choice)

    # Normaliser state is per vector observation: one for the camera too is refused, by name.
    update.artifact.normalizers.add().CopyFrom(update.artifact.normalizers[0])
    with pytest.raises(ProtocolError, match=r"artifact\.normalizers: 2 given for 1 vector observations"):
        Policy.from_update(update)
