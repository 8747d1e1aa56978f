"""Learning-quality suite (issue 15): every Gymnasium classic-control task, stepstream beside SB3 + RL-Zoo.

Each task's config in ``configs/`` is an ML-Agents trainer YAML translated from RL-Zoo's tuned entry for it
(PPO, and SAC where the zoo has one); the peer, ``benchmarks/classic_control_sb3.py``, runs in the SB3 side
environment and reads the zoo's own ``hyperparams/<algo>.yml`` from the installed ``rl_zoo3`` package. For each
task and seed both sides run the same declared budget, one after the other in the same run (these 2-core
machines are noisy: compare within a run).

| algo_env | config | threshold | budget (zoo's) |
| --- | --- | --- | --- |
| ppo-cartpole | cartpole_ppo.yaml | 475 | 100k (1e5) |
| ppo-acrobot | acrobot_ppo.yaml | -100 | 200k (1e6) |
| ppo-mountaincar | mountaincar_ppo.yaml | -110 | 300k (1e6) |
| ppo-mountaincarcontinuous | mountaincarcontinuous_ppo.yaml | 90 | 20k (2e4) |
| ppo-pendulum | pendulum_ppo.yaml | -200 | 100k (1e5) |
| sac-mountaincarcontinuous | mountaincarcontinuous_sac.yaml | 90 | 50k (5e4) |
| sac-pendulum | pendulum_sac.yaml | -200 | 20k (2e4) |

Thresholds are Gymnasium's ``reward_threshold`` (Pendulum has none: T2's -200). The zoo has no SAC entry for
the discrete tasks. Our budget is the config's ``max_steps`` (which also sets the length of linear schedules);
the peer gets the same number as ``total_timesteps``.

Deviations of the translation (each config's comments say which apply):

* ``normalize``: the zoo's ``normalize: true`` wraps the envs in ``VecNormalize``, which scales observations
  *and* rewards (by the running std of the discounted return). ML-Agents' ``network_settings.normalize`` scales
  observations only; stepstream's PPO key ``normalize_reward`` (follows ``normalize`` when unset) adds the reward
  half. SB3 updates the observation statistics every env step; ML-Agents when the trainer takes a trajectory in;
  stepstream's PPO with all of an update's trajectories, just before the update (since 2026-12-07).
* ``use_sde`` / ``sde_sample_freq`` / ``log_std_init`` / ``use_expln`` (MountainCarContinuous, Pendulum PPO):
  the PPO keys of the same names (gSDE, README "Design notes"; ``sde_sample_freq`` -1 = ``time_horizon``, the
  zoo's ``n_steps`` rollout). The zoo's ``log_std_init`` is sigma's, and the action std it gives scales with the
  latent features, so with the networks' start: ``orthogonal_init: false`` is PyTorch's, as SB3's (since
  2026-12-07; before, Keras' Glorot with zero biases, under which gSDE's noise vanished where MountainCar's
  episodes start: below). Without gSDE, held white noise is the PPO key ``noise_hold_steps``; measured below, not
  set in the configs.
* ``vf_coef`` (MountainCarContinuous PPO, 0.19): stepstream's value loss weight is fixed at 0.5.
* SAC ``ent_coef`` fixed (MountainCarContinuous, 0.1) -> ``init_entcoef`` 0.1 with SAC's ``learn_entcoef: false``
  (ML-Agents always learns it); ``use_sde`` / ``log_std_init`` / ``use_expln`` -> SAC's keys of the same names, with
  ``sde_sample_freq`` 32 for the zoo's ``train_freq`` rollout; SB3's SAC networks use relu -> SAC's ``activation:
  relu`` (ML-Agents' swish is the default); ``train_freq`` / ``gradient_steps`` 32 / 32 -> ``steps_per_update`` 1
  (the same ratio).
* ``policy_kwargs`` ``ortho_init=False`` -> ``orthogonal_init: false`` (torch.nn.Linear's own start, as SB3's);
  ``max_grad_norm`` -> ``max_grad_norm``;
  ``net_arch`` -> ``hidden_units`` / ``num_layers``.
* ``n_envs`` -> ``num_envs``, with ``buffer_size = n_envs * n_steps`` and ``time_horizon = n_steps`` (CartPole:
  32 x 8 instead of 8 x 32, see its config).

Figures per seed: ``final`` = the mean of the last 20 finished episodes at the end of the budget; ``solve_s``
= seconds until that mean first reached the threshold, on both sides from the process start, imports included
(ours TensorFlow's, the peer's PyTorch's and SB3's: ``episodes.csv``'s ``wall_seconds`` and the peer's
``solve_s_from_process_start``); null if never (Infinity in the median). ``sb3_solve_s_after_imports`` keeps the
peer's own clock, which starts after its imports. Runs recorded below before 2026-12-02 21:10 UTC give the peer's
``solve_s`` after its imports (1.8-2.7 s less: ``time python -c "import torch, stable_baselines3, gymnasium,
yaml"`` in the SB3 environment, three runs, load 0), ours from the process start. ``held`` (since 2026-12-07) = the
fraction of the windows that end in the budget's second half at or above the threshold, one window after each
episode (``benchmarks/episode_window.py``, both sides): a first crossing can be a touch the run never holds again
(MountainCar below); null if no window ended there (0 in the median).

usage: classic_control.py [--seeds 0 1 2] [--tasks ppo-acrobot ...] [--results-dir DIR] [--sb3-python PATH]
                          [--skip-sb3] [--config VARIANT.yaml (one task: our side runs it instead)]

Prints one JSON line last: ``{"workload": "classic_control", "date": ..., "<algo_env>": {"ours_final": [...],
"sb3_final": [...], "ours_solve_s": [...], "sb3_solve_s": [...], "ours_solve_steps": [...], "sb3_solve_steps":
[...], "sb3_solve_s_after_imports": [...], "ours_held": [...], "sb3_held": [...], "median_ours_final": ...,
"median_sb3_final": ..., "median_ours_solve_s": ..., "median_sb3_solve_s": ..., "median_sb3_solve_s_after_imports":
..., "median_ours_held": ..., "median_sb3_held": ...}, ...}``.

Why PPO trailed on Acrobot-v1 (issue 15), measured 2026-12-01 on the 2-core machine (load 8-9, other work
beside it), our side only, configs/acrobot_ppo.yaml with ``max_steps`` 80000 (constant schedules: the budget does
not change the learning), one variable at a time; figure: last-20 mean at 80k steps, seeds 0 / 1. The peer,
``classic_control_sb3.py ppo Acrobot-v1 0 80000 -100``: -106.6, threshold reached at 62.5k steps.

* as translated (``proximal_clip`` false, no reward scaling): -132.5 / -144.1;
* ``normalize_reward: true`` (SB3's reward scaling): -250.4 / -187 (all episodes time out until ~55k steps);
  with ``proximal_clip`` too, seed 0: -218.8. Not the cause; left off.
* ``max_policy_lag: 0`` (drop every trajectory an older policy took), seed 0: -113.6 at 80k trainer steps, but
  152 of ~470 trajectories were dropped (~39k env steps more than counted): about half of every update's rows
  come from the previous policy version, because the env clients act while the trainer updates.
* ``proximal_clip: true`` (decoupled PPO, trainer/ppo.py ``PPOLearner._proximal``): -114.1 / -131.0, nothing
  dropped. Kept in acrobot_ppo.yaml; off by default because CartPole-v1 (T1) needed more steps with it: seeds 0-2
  32.8k / 75.9k / 37.7k steps (48.7 / 61.8 / 38.4 s) against 26.2k / 39.2k / 29.8k (41.7 / 71.9 / 61.3 s) without
  (``benchmarks/time_to_solve.py ppo-cartpole SEED [--config a copy with proximal_clip: false]``).
* not the cause by inspection: the linear schedules (the zoo's Acrobot entry is constant), value bootstrapping
  at time limits (``PPOLearner._advantages`` bootstraps interrupted trajectories from ``V(next_obs)``; the gym
  adapter sends truncated as done + max_reached), advantage normalisation (per minibatch on both sides).
  Observation-normaliser timing is inside ``proximal_clip``'s effect (the ratio is taken after the update).
  The remaining gap (-114 against -107 on seed 0) is within what one seed shows.

Why PPO's time to the threshold trails on Acrobot-v1, measured 2026-12-02 05:48-06:35 (session 7; load 7.8-16, other
helpers' work beside it), our side only, the full 200k budget, ``classic_control.py --tasks ppo-acrobot --seeds S
--skip-sb3 [--config VARIANT.yaml]``, one variable at a time, variants alternated; figure: steps to -100 (k), seeds
0 / 1 / 2 (a second run of a seed after the comma), and the two phases of the last-20 mean: steps until it passes
-400 (finding the swing-up), then from -400 to -100 (refining it).

* as shipped (strength 1, obs clip 5, Adam epsilon 1e-8): 86.9, 81.3 / 127.8, 92.0 / 79.9, 80.6 (median 84.1k); to
  -400 in 27-47k, then 52-81k. A rerun of one seed moves by up to 36k: single runs decide nothing below ~15%.
* reward scale: ``normalize_reward: true`` 111.1 / 127.2 (to -400 60-71k, then 40-68k); extrinsic ``strength`` 0.03:
  133.8 / 125.3 (68-79k, then 55-58k); 0.1: 88.7 / 80.7 / 83.0 (36-50k, then 35-47k); 0.3: 74.4, 86.8 / 89.1, 78.6 /
  69.1, 65.3 (median 76.5k; 28-39k, then 36-51k). Why the trade: the critic starts at 0 under returns near -1 / (1 -
  gamma) = -100 and Adam's bounded steps fit it slowly (mean V estimate -1.7 / -16 / -30 / -40 at 12k / 20k / 30k /
  40k steps, value loss 30-100); that optimism drives the swing-up before any success, and its errors slow the
  refinement. Scaled down, the critic fits within a few updates: a faster climb, a later start. Kept: ``strength:
  0.3`` in configs/acrobot_ppo.yaml (a config translation of the zoo's reward normalisation). SB3's own run
  (VecNormalize, ``classic_control_sb3.py`` with an episode log, seed 0, 100k budget, load 12): first success at
  23.5k steps, last-20 -321 at 30k, -171 at 40k, -116 at 60k, -100 at 72.7k (62.5k on 2026-12-01): it starts as fast
  as our strength 1 and climbs as fast as our 0.1. Why its start does not slow under its reward scaling is not
  measured.
* observation clip 10 (SB3's ``clip_obs``; ours ML-Agents' 5, ``common.policy_contract.NORMALIZATION_CLIP``, a
  temporary env-var switch, not kept): 83.8 / 101.1 / 77.3. Under a random policy's statistics cos(theta1) has std
  0.2 around 0.98, so an energy-pumping policy's (``a = 2 if dtheta2 > 0 else 0``, return -87) arm-up states clip at
  5 in 7.5% of its steps (none at 10). Adam epsilon 1e-5 (SB3's for PPO; ours 1e-8, same switch): 78.8 / 102.5 /
  79.3; both: 84.1 / 84.2 / 76.8. Within the reruns' spread: not changed (the clip is the processor's and ONNX
  export's contract too).
* policy lag: mean lag at take-in 0.39-0.51 policy versions over every run, 0 trajectories dropped
  (``max_policy_lag`` 2), so trainer steps are env steps. 43-46 updates per 200k steps (each takes ~4.4k rows: the
  buffer fills past 4096 by the last trajectories' overshoot) against SB3's 48.8 of 4096: 8% fewer updates, not
  measured apart.
* the schedules: TensorBoard's learning rate 3e-4, epsilon 0.2 and beta 0 at every summary (constant, as the zoo's).
  Value bootstrapping at time limits and per-minibatch advantage normalisation: as SB3 (above).

Why PPO trailed on MountainCarContinuous-v0, measured 2026-12-02 on the 2-core machine (load 7-9, two runs at a
time), our side only: ``stepstream train`` of a copy of configs/mountaincarcontinuous_ppo.yaml (20k steps) with
one key changed, ``--seed S``, read by ``episode_figures``; figure: last-20 mean at 20k steps (steps to the
threshold 90), seeds 0 / 1 (/ 2). The 2026-12-01 suite run as translated: 44.9 / 20.9 / 86.5, never solved;
SB3: 77.1 / 91.1 / 92.6, solved at 5.3k / 5.7k / 3.5k steps.

* ``log_std_init`` 0 (as translated, rerun): 87.7 / -4.2, never solved. Std 1 pays ~-33 per failed episode in
  action cost, and a seed that does not find the flag in its first episodes learns to stand still.
* gSDE's initial action std, measured in SB3 with the zoo's settings: ~0.065 (log -2.74), its noise matrix held
  for each 8-step rollout. ``log_std_init: -2.74`` with white noise: 25.9 / -0.4, never solved (too little
  exploration without gSDE's correlation).
* ``log_std_init: -1.0``: 95.8 / 95.5 / 95.9, solved at 14.1k / 9.8k / 13.4k steps: the fix, set in the config.
  -1.5: 27.2 / 96.9 (- / 15.2k); -0.5: 93.9 / 91.7 (14.5k / 9.4k). The flag is first reached at 2.6-2.8k steps;
  the 20-episode window then needs ~10k steps, as our episodes to the flag stay 250-500 steps long (SB3's
  window fills by 3.5-5.7k steps: under ~280 steps an episode, its gSDE policy near-deterministic).
* with -1.0, ``vf_coef`` 0.19 (a temporary ``value_loss_coef`` key, not kept): 95.3 / 92.1, solved later
  (18.2k / 15.5k); ``normalize_reward: true``: 81.7 / 78.4, never solved; ``max_policy_lag: 0``: 95.4 / 93.2,
  solved at 10.2k / 6.0k trainer steps, but 3772 / 3482 stale 8-step trajectories dropped (~28-30k env steps
  more, 198 / 254 s against ~100-130 s): at lag 2, 1638 updates of ~12 rows each take 20k steps (mean lag 1.2),
  where SB3 makes 2500 updates of 8 on-policy rows. ``proximal_clip: true`` (which lets the stale rows train):
  84.5 / 94.7 (- / 12.0k), no better; left off.
* held exploration noise, 2026-12-02 (load 2-11, other helpers' work beside it): the PPO key ``noise_hold_steps``
  (each agent's Gaussian noise held for k of its steps by the processor, drawn anew at episode start; the
  per-step marginal and log-prob unchanged: ``processor/exploration.py``), our side only, 20k steps, alternating
  per seed (``/tmp`` driver: ``stepstream train`` of a copy of the config, figures by ``episode_figures``).
  Figures: last-20 mean, steps / s to 90, steps to the first flag, mean length of the last 20 episodes.
  With ``log_std_init: -1.0``: k 1 (as shipped): seed 0 95.8, 15.0k / 56.8 s, flag 8.4k, 274 steps; seed 1
  95.3, 11.3k / 115.6 s, flag 5.6k, 183 steps. k 8 (the zoo's 8-step rollout): seed 0 95.7, 16.8k / 176.5 s,
  flag 2.7k, 264 steps; seed 1 95.2, 14.8k / 70.6 s, flag 0.7k, 219 steps. k 32, seed 0: 94.3, 15.8k / 109.3 s,
  flag 5.4k, 164 steps. k 8 with ``normalize_reward``, seed 0: 77.4, never. k 8 with ``log_std_init`` -1.5:
  26.4, never (flag at 5.8k, then it learned to stand still); -2.0 and k 16 with -2.0: -1.8 / -1.6, never at
  the flag. Held noise finds the flag 3-8x sooner but does not shorten the time to 90: after the first
  flag our episodes stay 250-800 steps long for the next ~20 episodes (the window needs 20), where SB3's
  (``classic_control_sb3.py`` seed 0 with an episode log) failed twice (-4.7, -0.4: its gSDE start std is
  ~0.065, a failure costs little), reached the flag at 2.4k steps and then never failed, in 120-270 steps
  an episode. What is left is gSDE's state-dependent noise (``latent(s) @ W``, which the policy's features
  make near-deterministic per state) or the synchronous 8-row updates (our lag 1.2 versions): not built.
  Seed 2 (03:05, load 5.9-9.3, ``classic_control.py --tasks ppo-mountaincarcontinuous --seeds 2 --skip-sb3
  [--config the k 8 copy]``): k 8 95.4, 16.0k / 59.4 s; k 1 96.1, 14.3k / 62.0 s.
  Kept: ``noise_hold_steps`` 1 in configs/mountaincarcontinuous_ppo.yaml.

gSDE (``use_sde: true``), 2026-12-02 06:04-06:25 (load 7-15, other helpers' work beside it), our side only,
seed 0, 20k steps, ``classic_control.py --tasks ppo-mountaincarcontinuous --seeds 0 --skip-sb3 --config <copy>``
(one key changed per copy). Figures: last-20 mean, steps / s to 90, steps to the first flag. As the zoo's
(``log_std_init: -3.29``, ``sde_sample_freq: -1``): -0.2, never at the flag (initial action std ~0.03; the first
try also exported by full conversion every 8 steps, 765 s for 16k steps, fixed before every figure here).
``sde_sample_freq: -1``: ``log_std_init`` -2.0 80.5, never (flag 3.7k, then failures between successes); -1.75
90.3, 19.3k / 153.5 s (flag 2.9k); -1.5 86.2, 13.6k / 98.5 s (flag 0.8k; episodes 200-900 steps); -2.0 with
``normalize_reward: true`` 1.8, never (one flag, 9.2k). ``sde_sample_freq: 64`` (one matrix per 64 steps): -2.0
93.5, 16.7k / 121.6 s (flag 13.2k, then episodes 90-550 steps, none failed); -1.5 92.7, 16.1k / 82.2 s (flag
1.9k once, then 12.0k, then 77-320 steps an episode, as SB3's <280); -1.0 84.6, never (flag 1.8k, action cost:
episodes 70-94). Chosen for the 3-seed run below (2026-12-02 06:26): -1.5 with ``sde_sample_freq: 64``; it lost to
the shipped white noise there (lower final, one seed never at 90), so the config keeps ``use_sde`` off.

The networks' start on MountainCarContinuous-v0 (PPO), measured 2026-12-07 04:00-04:32 (two runs at a time; the
first four beside a loop of the fleet test), our side only, 20k steps, ``classic_control.py --tasks
ppo-mountaincarcontinuous --seeds S --skip-sb3 --config <copy>``. Figures: steps to 90 per seed, "-" never, and
finals. The zoo's ``ortho_init=False`` is torch.nn.Linear's own start (kernels and biases uniform in
+-1/sqrt(fan_in)); ``orthogonal_init: false`` gave Keras' Glorot with zero biases. With zero biases the body's
output, gSDE's noise scale, vanishes at the normalised observations' centre, where the episodes start: at the
zoo's ``log_std_init`` -3.29 the action std there is 0.006-0.010 (six initial networks, observations N(0, 0.1)),
PyTorch's start 0.054-0.074, SB3's ~0.065 (the earlier probe). ``orthogonal_init: false`` is now PyTorch's start
(``trainer.networks.WeightInit.PYTORCH``; tests/unit/test_gsde.py pins the std).

* the zoo's gSDE (``use_sde``, -3.29, ``sde_sample_freq`` -1) with PyTorch's start: a prototype (biases from TF's
  unseeded generator), seeds 0-3, twice: 8.9k / 6.2k / 7.5k / 8.0k, then 6.9k / 3.9k / - / 9.7k. As committed
  (seeded biases), seeds 0-8: - / 13.2k / - / 12.0k / 11.8k / - / 7.3k / 16.1k / 5.7k, finals 87.3 / 68.7 / 81.8 /
  75.0 / 92.7 / 18.1 / 90.2 / 85.5 / 40.2: it finds the flag, then relapses into 999-step failures on several
  seeds (seeds 0-2 from a suite run beside the peer, 04:08). With ``normalize_reward: true``: - / 7.6k / 17.1k /
  8.4k / - / - (seeds 0-5), finals 71.0 / 92.6 / 90.1 / 91.6 / 54.6 / 30.5. With ``proximal_clip: true``: 16.3k /
  13.3k / 6.6k / 15.9k / - / 10.2k, finals 90.1 / 76.1 / 87.0 / 95.0 / 81.8 / 90.9. The peer's gSDE relapses too
  (seed 2: at 90 by 3.5k steps, final 18.2).
* white noise (``log_std_init`` -1.0, as shipped) with PyTorch's start, seeds 0-5: 7.5k / 7.9k / 6.3k / 10.6k /
  11.1k / 6.8k, finals 95.8 / 95.9 / 95.4 / 96.2 / 96.1 / 90.0; with Glorot's (the 13:49 suite run of 2026-12-02):
  15.1k / 13.0k / 12.1k. Kept: white noise, now on PyTorch's start.

Start-up and collection on Acrobot-v1, measured 2026-12-02 13:20-14:46 on the quiet machine (load 0.4-1.8, nothing
beside it), our side only unless said, configs/acrobot_ppo.yaml; times to -100 in seconds from the process start.

* ml_dtypes: 0.7.0's import alone took 0.83-0.89 s, 0.6.0's and 0.5.4's 0.01 s (``python -c`` timing ``import
  ml_dtypes`` after numpy, two runs each); TensorFlow's import (scikit-learn hidden, as ``load_tensorflow``) fell
  from 3.5-3.7 s to 2.3-2.8 s. Pinned below 0.7 in pyproject.toml; "imports done" now reads 2.4-3.7 s in train.log
  (19 runs) where session 8 read 2.9-5.1 s.
* the first update: ``_trace_update`` (tracing and instantiating the update graph) takes 0.70-0.75 s alone (a
  learner built in a bare process; 0.56 s of it Python tracing, 1,099 ops, 0.21 s instantiating) but 1.7-1.8 s
  beside the acting envs, which share the GIL; the first update ends 2.1-2.6 s after the first export, and the
  envs act those seconds with version 0 (~8k steps). Started at the first export instead of the first trajectory
  (a one-line change in ``PPOLearner.export_policy``, not kept): that end came 0.46 s sooner, and the times to
  -100 were 14.8 / 13.4 / 14.7 s against 14.0 / 16.3 / 13.0 s as shipped, seeds 0 / 1 / 2 alternated: inside the
  runs' noise.
* acting before the first policy (a prototype, not kept: uniform actions with their log-probs as version -1,
  the env clients started before TensorFlow's import, which ran in a thread): the envs acted at 0.4-0.5 s, but
  TensorFlow's import, beside them, took 4.2-4.7 s, so the first policy came later (5.1 s against 3.6 s); times to
  -100 16.9 / 15.0 / 12.4 s against 14.0 / 16.3 / 13.0 s. A thread is not what slows it: ``load_tensorflow`` in a
  thread under an idle event loop (with or without a gRPC server) took 2.4-3.1 s, in the main thread 2.8-4.0 s (two
  runs each); the acting beside it did: the trajectory queue filled at the envs' first cuts (16 of 256 steps) and
  held them back only at their next, at the episodes' end (episodes.csv: the first 8,000 rows all uniform). The
  stderr capture of the import also swallowed the processor's log lines for its length (relayed after it, as
  native output): a thread would need its own. Capped at one buffer of uniform actions (4,096 rows, then the envs
  wait for the first policy; seed 2, 20k steps): the envs acted from 0.41 s and waited from 1.74 s, imports done at
  3.32 s (2.63 s without), and step 12,096 came at 5.85 s against 5.78 s: no gain, because the first update still
  waits for TensorFlow, the learner and the update graph's trace, which starts after the first export and runs
  beside the envs acting with version 0. What the timeline leaves room for (not built): trace before the first
  export, while the capped envs wait (0.7 s uncontended), then update on the uniform rows and publish that as the
  first policy: the first update would end at ~4.5 s instead of 5.4-6.1 s. The cap must let each env take the step
  that cuts its trajectory (the 4,096 rows sat in the assembler, 0 queued, until version 0 acted).
* ``max_queued_trajectories`` (the envs wait sooner while the trainer updates): 2 took 67.1k / 66.9k / 64.2k steps,
  14.7 / 13.9 / 15.3 s; 4 took 59.0k / 66.2k / 67.0k steps, 13.4 / 15.6 / 14.1 s; the shipped 16 (one buffer)
  77.1k / 80.6k / 67.0k steps, 15.2 / 13.7 / 13.3 s. Fewer steps, the same seconds: what the rows gain in
  freshness the envs lose waiting. Not set.
* more env clients (a prototype: the 16 envs as 2 clients of 8 or 4 of 4, one session each): 7.7k, 5.7k and 5.0k
  agent-steps/s over the first 30-40k steps: each extra round trip costs more than the overlap gains.
* where a run's time goes (``py-spy record --threads --idle``, 80k steps): the event loop's thread (env clients'
  ``SyncVectorEnv.step`` 22%, the processor's ``Step`` 10%, TensorFlow's import 18%) waits in epoll 33% of its
  time; the trainer's thread waits for trajectories 47.5% and runs the update graph 31%.
* the update graph traced at the first export, in the trainer's thread, before any env acts (2026-12-07 05:19-05:29,
  this session's machine, quiet, one run at a time, alternating with the shipped code per seed; a copy of the tree
  with the change): the first policy comes ~0.7 s later, but the trace has the CPU to itself, and the envs act with
  version 1 after 4.3-8.0k steps (3.7-4.5 s) instead of 12.2-16.0k (4.6-5.6 s). Times to -100, seeds 0 / 1 / 2, then
  3 / 4 / 5 / 0 / 1 / 2: 10.2 / 9.9 / 10.2, 11.5 / 8.5 / 9.1 / 11.0 / 9.4 / 10.9 s against 11.4 / 12.5 / 10.1, 10.2 /
  10.3 / 9.3 / 11.9 / 10.6 / 9.5 s: 6 of 9 pairs faster, by 0.58 s on average (+1.4 to -2.7 s: the steps to -100 vary
  by run); wall time at 40k steps, median 7.08 against 7.39 s (8 pairs). CartPole-v1 (T1), the same way, 05:28-05:34,
  seeds 0-7: 7.3 / 7.5 / 8.3 / 6.8 / 7.4 / 14.8 / 7.0 / 11.6 s (median 7.5 s) against 6.7 / 8.4 / 5.7 / 7.1 / 10.0 /
  10.9 / 8.7 / 10.9 s (median 8.5 s); the steps to 475 vary 24-88k by run, and neither side is slower to its first
  episodes. T3 (``time_to_solve.py ppo-pixel S``, 05:55-05:57, each seed before then after): the same steps (7,741 /
  6,749 / 6,726), 19.7 / 16.0 / 14.8 s against 19.9 / 16.0 / 15.3 s. Kept: ``PPOLearner.export_policy`` runs the
  warm-up (trainer/ppo.py).

Held noise on Pendulum-v1 (the zoo's ``sde_sample_freq: 4``), 2026-12-02 (load 7.6-10.3), our side only, 100k
steps, the same driver, seeds 0 / 1: ``noise_hold_steps`` 1 (as shipped) final -163.2 / -180.9, at -200 by 58.4k /
51.2k steps, 75.4 / 84.3 s (CPU 58.5 / 55.9 s); 4: -171.0 / -181.6, by 72.0k / 60.0k steps, 73.2 / 69.1 s (CPU
58.0 / 53.9 s). More steps with the noise held, seconds within the load's noise: not set in pendulum_ppo.yaml.

Why SAC never found MountainCarContinuous-v0's flag, measured 2026-12-07 01:37-02:08 (quiet machine, two runs at a
time), our side only, seed 0 unless said, 50k steps, ``classic_control.py --tasks sac-mountaincarcontinuous --seeds S
--skip-sb3 --config <copy>`` (one key changed per copy). Figures: final (last-20 mean at 50k), steps / s to 90.

* the cause was exploration: with white noise (2026-12-02) every episode ran to the 999-step limit. With gSDE
  (SAC's ``use_sde``, new in this session; ``sde_sample_freq`` 32 for the zoo's ``train_freq`` rollout, ``use_expln``)
  the flag came within the first 5k steps and the window passed 90 at 8.7-10.5k steps in every run below, against
  SB3's 18.9k / 15.1k (seeds 0 / 1).
* but with our default swish networks it relapsed: after 90 came runs of 999-step episodes at near full throttle
  (-40 to -90 each, mean action^2 0.6-0.9), and the finals were log_std_init -2.0 / -3.67: 15.1 / -13.4 with the
  entropy coefficient learned from 0.1, -13.5 / -22.9 held at 0.1 (``learn_entcoef: false``, the zoo's fixed
  ``ent_coef``); ``time_horizon`` 32 with ``max_queued_trajectories`` 2 (the acting policy at most ~64 gradient steps
  old, as SB3's 32): 84.2 / -61.2 at 37-38k steps, stopped there. SB3's own runs (``classic_control_sb3.py`` with an
  episode log) also fail a few 999-step episodes before 17k steps, then settle at 70-90-step episodes.
* SB3's SAC networks use relu: ``activation: relu`` (SAC's new key), the zoo's -3.67, coefficient held: 95.2, at 90 by
  11.0k steps / 51.2 s (beside another run); seed 1: 94.9, 10.8k / 59.4 s; learned from 0.1 instead, seed 0: 95.5,
  13.3k / 74.6 s. Kept in mountaincarcontinuous_sac.yaml: relu, the coefficient held (the zoo's), gSDE as the zoo's.
  Our initial action std at -3.67 is ~0.009 (relu; ~0.005 swish) where SB3's is ~0.028, measured over 200 random
  states of the initial networks on both sides.
* the acting policy's age (02:48-03:16, two runs at a time): the 3-seed suite run below with relu relapsed late on
  seed 2 (final 63.0). With ``time_horizon`` 64 and the derived queue (max(4, 512 / 64) = 8 trajectories) the trainer
  took ~500 rows at a time and the env acted on with a policy that many gradient steps old (SB3's is at most 32, one
  ``train_freq`` rollout). ``time_horizon`` 32 with ``max_queued_trajectories`` 2 (at most ~64): seeds 0 / 1 / 2
  final 94.2 / 94.9 / 93.8, at 90 by 8.6k / 9.1k / 8.1k steps, 35.9 / 37.6 / 34.9 s (two runs at a time), against
  95.2 / 94.9 / 63.0, 11.0k / 10.8k / 12.3k steps as before; seed 3 as before: 95.1, 9.5k steps / 38.3 s. Kept in
  mountaincarcontinuous_sac.yaml.

Where MountainCar's embedded run spends its time, measured 2026-12-07 08:16-09:27 on the quiet machine (our side only;
``/work/runs/s14`` drivers, not kept: ``stepstream train configs/mountaincar_ppo.yaml --seed S --max-steps 150000``,
steps/s from the 20k summary to the end, one run at a time, trees alternated per seed).

* the ceiling: ``--inference`` with a checkpoint (no trainer) acts at ~18k steps/s, the event loop's thread busy 0.96
  of a core (``/proc/<pid>/task/*/stat`` over 4 s); training, ~10.5k steps/s, that thread busy 0.66, the trainer's
  0.23, TensorFlow's compute thread 0.26: 1.25 of the 2 cores. Pinned apart with ``taskset`` (the loop on one core,
  the trainer and TensorFlow's thread on the other): the same 0.61-0.67. With ``buffer_size`` 1,000,000 (no update in
  150k steps) the loop acts at ~17k steps/s. ``perf trace -s`` of the loop's thread over 2 s: ``futex`` (the GIL and
  condition variables) 12,825 calls with updates against 1,614 without, at 2,291 against 3,205 round trips
  (``sendmsg``); ``epoll_wait`` 117 against 93 ms. So the updates cost the loop through the GIL, not the CPU: a
  thread beside ``--inference`` that spins pure Python 6 of every 25 ms slowed its 150k steps from 8.7 to 11.0 s,
  one that calls a traced 18 ms TensorFlow graph every 37 ms from 8.2 to 9.3 s (TensorFlow releases the GIL inside).
* the trainer's update cycle timed alone (16 take-ins of a 16-step trajectory, then rows, update, export): take-ins
  0.72 ms (an ``assign_add`` of the step variable each), rows 1.5 ms (value call 0.6, the normaliser's six eager
  ops 0.53, GAE 0.17), update 7.8 ms (the graph ~5.5), export 0.47 ms. Kept: the take-ins count in Python and add
  to the variable once per update (0.02 ms), and the update and value graphs are called as traced (a
  ``tf.function`` call binds its arguments first: 7.1 against 6.4 ms, 0.47 against 0.33 ms, medians of 7).
  Steps/s, seeds 1-7: 10.5 / 10.1 / 10.5 / 10.4 / 10.6 / 10.0 / 9.9k before, 10.5 / 11.0 / 11.2 (the take-ins'
  change alone), 11.0 / 10.8 / 10.8 / 10.7k (both) after: +6%. Then Adam's step as one fused ``ResourceApplyAdam``
  per variable (``trainer.optimizer.apply_adam``): the update graph 6.5 -> 5.3 ms, its trace 0.64 -> 0.44 s; over 5
  seeds the first policy came 0.65 s after the imports instead of 0.84 s, and steps/s 10.1k against 9.8k (under the
  noise).
* not kept: the normaliser's merge and the export's reads as one traced call each (eager TensorFlow ops per update
  from ~24 to 3): ``futex`` per round trip fell from 9.9 to 6.4, but each call costs ~0.3 ms of CPU, and steps/s
  over 8 seed pairs were 10.56k against 10.56k. A trainer that naps 5 or 10 ms before each take-in (fewer wake-ups):
  10.9 / 9.6k and 8.8 / 8.8k against 10.4 / 9.9k. ``sys.setswitchinterval`` 0.5 ms: no change. The three stack
  processes on loopback (``stepstream processor``, ``trainer``, ``env``): ~11k steps/s, the processor's thread busy
  0.43 and the env's 0.35 of a core; with two env clients of 8 envs each, 8.6k. SAC's optimisers through
  ``apply_adam``: Pendulum-v1, 6k steps in 54.4 / 62.1 s against 55.4 / 60.6 s: no gain, left as Keras'. uvloop as
  the embedded run's event loop (``uvloop.run``; grpc.aio runs on it): 11.6 / 10.9 / 11.1k against 10.6 / 10.9 / 10.9k
  steps/s (seeds 2-4): +2%, not worth a dependency.
* the learning, not the speed, is what is left: episodes binned by 20k steps (success fraction / mean return of the
  successful episodes), the peer's six logged seeds (2026-12-07 07:07) against this session's suite run at 08:53
  (three seeds): the peer succeeds in 58-74% of its first 20k steps' episodes and in 98-100% after, its successes at -124 to
  -145 in most 20k bins from 20k to 300k, -115 to -121 in a few late ones (a plateau it touches -110 from by a
  policy's fluctuation); ours succeed in 12-50% of the first 20k's, at -149 to -163 to 40k, then refine to -113 to
  -126 from 200k. One more candidate, our side, 200k steps: the policy's and the critic's gradients clipped to
  ``max_grad_norm`` apart (SB3 and ours clip them together, so early on the critic's large gradients shrink the
  policy's step): at -110 by never / 153.0k / 174.9k / 159.8k (seeds 0-3), no earlier than as shipped; not kept.

What MountainCar's early steps trade against its refinement, measured 2026-12-07 10:20-11:00 (quiet machine, two runs at
a time; our side only; ``stepstream train`` of a copy of configs/mountaincar_ppo.yaml, ``--seed S --max-steps 200000``,
seeds 0-5; the ``/work/exp/s15`` probes, not kept). Figures: steps to -110 per seed ("never" within 200k), and the
last-20 mean at 20k steps.

* ``strength`` 0.2: 123.0k / 124.2k / 183.5k / 183.2k / never / 176.4k (-158 to -182 at 20k); 0.3 (shipped): 119.4k /
  119.6k / 123.5k / 164.2k / 62.8k / 182.4k (-161 to -198); 0.5: 151.9k / 186.4k / 105.4k / 127.3k / 126.6k / 143.1k
  (-192 to -200). With 0.05-0.15 and VecNormalize's reward half (above) 0.3 stays the best scale measured.
* value-target normalisation (a prototype: the critic fits ``(R - m) / s`` of a running, count-weighted mean and
  variance of the returns, and GAE reads ``V = out * s + m``; it makes PPO blind to the reward's scale), strength 0.3
  and 1: never at -110 on any of the twelve runs; the windows sit at -121 to -155 from 60k on (-126 to -146 at 200k), the
  peer's plateau.
* the critic started at the returns (a prototype: a constant ``c`` added to V, set at the first update to ``k`` times
  the mean of that update's returns): ``k`` 1 (c -2.0 to -2.3): 184.3k / never / 179.8k / never / 147.7k / 107.6k; ``k``
  13 (c -28 to -30, the random policy's values): never on five seeds, 191.0k on one, and seed 2 never reached the flag.

So the refinement from the -130 plateau to -110 comes from the critic's optimism: V starts near 0, above every return,
and stays above its targets longest where the policy has not been (the faster swings the better policies need), which
pulls the policy there. Normalised targets or a critic started at the returns remove it, and the policy settles at -120
to -145 as the peer's does (VecNormalize divides by the std of the discounted return: 24 over a 200-step episode, 21
over a 130-step one, computed for -1 per step: a scale of 0.04-0.05). Its price, in our reading, is the slow start:
until the critic has moved from 0 to about -30 (Adam's bounded steps; order 100 updates by our estimate), the advantages
carry its error more than the actions' effects, and our success fraction in the first 20k steps is 12-50% against the
peer's 58-74% (measured, session 14). The peer's crossings are touches from its plateau (held 0-3%), reached by ~35k
steps on four of nine seeds.

The speed on two cores, the same session: a trainer in a process of its own (a prototype ``stepstream train
--trainer-processes``: the stack's trainer path over the loopback gRPC port, started by ``spawn``, its log records
relayed through a queue; not kept), MountainCar 150k steps, seconds to the last summary, thread against process, seeds
2-6 alternated: 16.83 / 17.95 / 16.44 / 17.88 / 17.15 against 18.98 / 15.16 / 16.90 / 18.03 / 16.43 (means 17.25 and
17.10 s: noise). The event loop's thread no longer waits for the GIL, but for a core: ``/proc/<tid>/schedstat`` over
4 s gives it 0.79 running and 0.14 on the run queue, the child's trainer thread 0.25 and 0.14, TensorFlow's compute
thread 0.25 and 0.12. Both cores are spent; in ``--inference`` alone the loop runs 0.96 of a core. XLA for the update
graph (``jit_compile=True``) does not convert (a dynamic slice of the empty continuous-action field ``[S, B, 0]``); the
graph is ~5.3 ms of the ~27 ms each update's 256 steps take, so it was not pursued.

Suite runs (record each with its date):

* 2026-12-01, ``classic_control.py --tasks ppo-acrobot --seeds 0`` (load 7.8-9.2, other work beside it):
  ours final -77.5, threshold at 70.2k steps / 131.6 s; SB3 final -89.3, threshold at 62.5k steps / 89.8 s.
  Not yet run: seeds 1-2, and every other task (a full 3-seed run of all seven takes hours on 2 cores).
* 2026-12-02, ``classic_control.py --tasks ppo-mountaincarcontinuous --seeds 0 1 2`` (``log_std_init: -1.0``;
  load 7-12, one A/B run beside it): ours final 95.3 / 96.4 / 96.2 (median 96.2), threshold at 15.6k / 10.6k /
  15.7k steps, 107.5 / 63.1 / 55.5 s (median 63.1 s); SB3 final 77.1 / 91.1 / 92.6 (median 91.1), threshold at
  5.3k / 5.7k / 3.5k steps, 80.1 / 60.1 / 30.8 s (median 60.1 s).
* 2026-12-02, ``classic_control.py --tasks ppo-mountaincarcontinuous ppo-cartpole --seeds 0 1 2`` (load 4.5-9.5,
  other work beside it). ppo-mountaincarcontinuous as translated before ``log_std_init`` (start std 1): ours
  final 44.9 / 20.9 / 86.5, never at the threshold; SB3 77.1 / 91.1 / 92.6, at 5.3k / 5.7k / 3.5k steps.
  ppo-cartpole: ours final 500 / 500 / 500, threshold at 30.3k / 25.8k / 27.1k steps, 13.3 / 14.0 / 56.2 s (median
  14.0 s); SB3 final 500 / 500 / 500, at 30.3k / 30.6k / 34.8k steps, 14.5 / 23.6 / 97.8 s (median 23.6 s).
* 2026-12-02 02:44 and 02:50, ``classic_control.py --tasks ppo-pendulum --seeds 0``, then ``--seeds 1 2`` (as
  shipped, fresh noise; load 5.9-12.3, other helpers' work beside it): ours final -182.6 / -180.1 / -190.8 (median
  -182.6), threshold at 58.4k / 51.2k / 52.0k steps, 75.7 / 71.5 / 50.5 s (median 71.5 s); SB3 (gSDE,
  ``sde_sample_freq`` 4) final -216.2 / -204.7 / -204.5 (median -204.7), at 67.2k / 46.4k / 52.0k steps, 135.7 /
  155.0 / 67.1 s (median 135.7 s). Goal met for ppo-pendulum.
* 2026-12-02, ``classic_control.py --tasks sac-pendulum --seeds 0`` (seeds 1-2 stopped for time; load 5-7): ours
  final -169.3, threshold at 6,864 steps / 371.5 s; SB3 final -159.9, at 8,400 steps / 281.0 s.
* 2026-12-02 06:26-06:58, gSDE against the shipped config, alternating per seed (load 8.3-11.7, other helpers'
  work beside it): ``classic_control.py --tasks ppo-mountaincarcontinuous --seeds S`` on a copy with ``use_sde:
  true``, ``log_std_init: -1.5``, ``sde_sample_freq: 64`` (both sides), then ``--seeds S --skip-sb3 --config``
  the shipped config (``log_std_init: -1.0``, white noise). gSDE: final 91.3 / 92.1 / 89.9 (median 91.3),
  threshold at 13.8k / 14.7k / never, 79.4 / 81.9 s / never (median 81.9 s). Shipped: final 96.4 / 96.3 / 96.0
  (median 96.3), at 16.1k / 11.2k / 12.1k steps, 104.8 / 71.5 / 51.0 s (median 71.5 s). SB3 (gSDE, the zoo's
  settings): final 86.6 / 93.0 / 18.2 (median 86.6), at 13.8k / 6.6k / 3.5k steps, 294.8 / 115.8 / 99.4 s
  (median 115.8 s; its 20k steps took ~7 min a seed at this load). Goal met in this run by the shipped config
  (96.3 >= 86.6, 71.5 <= 115.8 s); SB3 still needs fewer steps on 2 of 3 seeds.
* 2026-12-02 03:10, ``classic_control.py --tasks ppo-mountaincar --seeds 0`` (load 4.8-5.1, other work beside it):
  ours final -118.8, threshold at 223.9k steps / 74.1 s; SB3 final -134.6, never at the threshold within the
  300k budget (a peer that fails proves nothing: seeds 1-2 not run yet).
* 2026-12-02 03:15, ``classic_control.py --tasks ppo-acrobot --seeds 1 2`` (load 4.8-5.0, other work beside it):
  ours final -94.9 / -82.8, threshold at 106.7k / 80.6k steps, 38.2 / 42.1 s; SB3 final -75.3 / -85.9, at
  51.6k / 55.3k steps, 22.3 / 30.3 s. With 2026-12-01's seed 0: final medians -82.8 vs -85.9 (met), time
  medians 42.1 vs 30.3 s (not met: ours takes 1.3-1.9x the peer's steps).
* 2026-12-02 05:43-06:02, ``classic_control.py --tasks ppo-mountaincar --seeds 1 2`` (load 1.9 at the start, 5-12
  later, five helpers' work beside it): seed 1 ours final -112.0, threshold at 185.2k steps / 63.3 s; SB3 final
  -131.7, at 100.9k steps / 97.1 s. Seed 2: ours -128.8, SB3 -125.8, neither at the threshold. With 03:10's seed 0,
  3 seeds: final medians ours -118.8 vs SB3 -131.7 (met); time to -110 ours 74.1 / 63.3 s / never (median 74.1 s)
  vs SB3 never / 97.1 s / never (median Infinity). The peer solves 1 seed of 3, and there ours is faster (63.3 vs
  97.1 s): met where the task counts. The quiet run of 14:54 below, where the peer solves 2 seeds, changes this.
* 2026-12-02 06:34-06:58, ``classic_control.py --tasks ppo-acrobot --seeds 0 1 2`` with ``strength: 0.3`` (load
  7.2-11.7, other helpers' work beside it): ours final -81.6 / -79.0 / -89.6 (median -81.6), threshold at 75.5k /
  89.8k / 65.3k steps, 44.9 / 40.9 / 52.4 s (median 44.9 s); SB3 final -87.1 / -81.2 / -80.9 (median -81.2), at
  72.7k / 51.6k / 56.6k steps, 123.3 / 75.6 / 96.6 s (median 96.6 s). Final return met (within the seeds'
  spread); seconds met in this run, but only because the peer's single-threaded torch slowed ~3x under this
  load (03:15's run at load 4.8: 22-30 s): ours still takes 1.33x the peer's steps (median 75.5k vs 56.6k).
* 2026-12-02 06:22-07:15, ``classic_control.py --tasks sac-pendulum --seeds 1 2`` (load 8-10 falling to 1, five
  helpers' work beside it): seed 1 ours final -179.5, threshold at 7,064 steps / 361.6 s; SB3 -175.4, at 6,400
  steps / 453.5 s. Seed 2 ours -177.3, at 10,464 steps / 264.9 s; SB3 -170.9, at 10,000 steps / 188.4 s. With
  seed 0 (above): final medians ours -177.3 vs SB3 -170.9 (the spreads overlap: -179.5..-169.3 vs -175.4..-159.9);
  time medians 361.6 vs 281.0 s (not met, 1.29x) at about the same steps (6.9k / 7.1k / 10.5k vs 8.4k / 6.4k /
  10.0k): what is left is our SAC's cost per step, not its sample efficiency.
* 2026-12-02 08:21-08:27, ``classic_control.py --tasks ppo-acrobot --seeds 0 1 2`` on the quiet machine (load
  0.0-1.4, nothing beside it; configs/acrobot_ppo.yaml with ``strength: 0.3``): ours final -81.4 / -81.6 / -94.0
  (median -81.6), threshold at 73.7k / 77.9k / 64.2k steps, 19.1 / 24.1 / 17.3 s (median 19.1 s); SB3 -87.1 /
  -81.2 / -80.9 (median -81.2), at 72.7k / 51.6k / 56.6k steps, 29.5 / 15.0 / 17.1 s (median 17.1 s). Final met
  within the spread; time 1.12x, not met. Of our 17-24 s, 3-5 s is start-up before the first step (train.log
  "imports done 5.088 s" in seed 2's run, 2.9 s in a later warm run; TensorFlow's import alone 1.8-3.5 s), which
  the peer's clock leaves out;
  per step ours is faster (~6k vs ~3.3k steps/s), and it needs 1.3x the peer's steps (median 73.7k vs 56.6k).
* 2026-12-02 13:24-13:29, ``classic_control.py --tasks ppo-acrobot --seeds 0 1 2`` on the quiet machine (load
  0.8-1.4, nothing beside it), after the ml_dtypes pin: ours final -79.1 / -86.0 / -83.4 (median -83.4), threshold
  at 67.0k / 79.1k / 70.1k steps, 15.9 / 16.3 / 15.4 s (median 15.9 s); SB3 -87.1 / -81.2 / -80.9 (median -81.2),
  at 72.7k / 51.6k / 56.6k steps (the same as every run: SB3 is deterministic per seed), 20.9 / 11.6 / 12.6 s
  (median 12.6 s; session 8's quiet run: 17.1 s). Final met within the spread; time 1.26x, not met. Ours less its
  start-up (imports done at 3.5 s in seed 2's train.log) is 11.9-12.8 s, the peer's clock. Our side alone, 6 more
  runs of the shipped config in the next 20 minutes: 15.2 / 13.7 / 13.3 and 14.0 / 16.3 / 13.0 s (medians 13.7 and
  14.0 s, 1.09x and 1.11x the peer's 12.6 s).
* 2026-12-02 13:49-13:54, ``classic_control.py --tasks ppo-mountaincarcontinuous --seeds 0 1 2`` on the quiet
  machine (load 1.1-1.6): ours final 95.1 / 95.6 / 95.8 (median 95.6), threshold at 15.1k / 13.0k / 12.1k steps,
  37.2 / 34.1 / 27.5 s (median 34.1 s); SB3 86.6 / 93.0 / 18.2 (median 86.6), at 13.8k / 6.6k / 3.5k steps, 41.4 /
  24.2 / 12.2 s (median 24.2 s). Final met; time 1.41x, not met (session 7's 71.5 against 115.8 s came from the
  load slowing the peer). Per step ours is faster (~2.6 ms against ~3.7 ms); it needs 2x the peer's steps (median
  13.0k against 6.6k): gSDE's exploration, above.
* 2026-12-02 13:57-14:25, ``classic_control.py --tasks sac-pendulum --seeds 0 1 2`` on the quiet machine (load
  1.0-1.6): ours final -169.3 / -179.5 / -177.3 (median -177.3), threshold at 6,864 / 7,064 / 10,464 steps, 80.1 /
  73.5 / 114.2 s (median 80.1 s); SB3 -165.7 / -175.4 / -170.9 (median -170.9), at 8,400 / 6,400 / 10,000 steps,
  134.3 / 103.0 / 155.6 s (median 134.3 s). Time met (0.60x); final within the seeds' spread (-179.5..-169.3
  against -175.4..-165.7). The steps are those of the runs at load 8-10, and so are the finals but SB3's seed 0
  (-165.7 here, -159.9 then): there the load had put our seconds above the peer's.
* 2026-12-02 14:48-14:55, ``classic_control.py --tasks ppo-cartpole --seeds 0 1 2``, then ``--tasks ppo-pendulum``,
  on the quiet machine (load 0.5-1.4, nothing beside it): ppo-cartpole ours final 500 / 500 / 500, threshold at
  29.6k / 37.9k / 29.6k steps, 8.5 / 9.0 / 8.2 s (median 8.5 s); SB3 500 / 500 / 500, at 25.1k / 25.5k / 32.5k
  steps, 8.6 / 6.8 / 8.9 s (median 8.6 s): met, by 0.04 s. ppo-pendulum ours final -189.3 / -180.0 / -184.7 (median
  -184.7), at 58.4k / 51.2k / 52.0k steps, 17.9 / 14.6 / 15.2 s (median 15.2 s); SB3 -168.0 / -164.2 / -193.1
  (median -168.0), at 52.8k / 60.8k / 51.2k steps, 19.3 / 25.2 / 21.6 s (median 21.6 s): time met (0.70x), final
  within the peer's spread (-193.1..-164.2) but below its median. SB3's steps here differ from the earlier rows'
  (Acrobot's repeated exactly on this new machine and its rebuilt side venv; why these did not is not looked into).
* 2026-12-02 14:54-15:00, ``classic_control.py --tasks ppo-mountaincar --seeds 0 1 2`` on the quiet machine (load
  1.2-1.5): ours final -118.9 / -114.1 / -117.1 (median -117.1), threshold at 193.2k / 253.1k / 106.6k steps, 35.9 /
  37.5 / 16.9 s (median 35.9 s); SB3 -120.7 / -131.7 / -125.8 (median -125.8), at 35.2k / 100.9k steps / never, 7.2
  / 16.0 s / never (median 16.0 s). Final met; time **2.2x, not met**: on this machine the peer's seed 0 solves (at
  35.2k steps; -134.6 and never in the 03:10 run), so the task now counts on 2 seeds of 3, and ours takes 2.5-5.5x
  the peer's steps there (per step ours is a little faster: 5.4k against 4.9k steps/s on seed 0).
  Our side, one variable at a time (15:01-15:10, load 0.3-1.8, seeds 0 / 1 / 2; ``--skip-sb3 --config`` a copy):
  ``proximal_clip: true`` -115.8 / -123.8, 180.3k / 129.3k steps, 31.5 / 24.1 s; extrinsic ``strength: 0.3`` (as
  acrobot_ppo.yaml) -104.4 / -104.9 / -103.9, 122.3k / 173.2k / 163.2k steps, 23.8 / 28.7 / 28.1 s (median 28.1 s);
  both -110.7 / -119.4, 257.7k / 160.4k steps, 43.1 / 25.4 s; strength 1 (shipped) on seed 2 again: -115.3, 180.1k
  steps, 24.9 s. Kept: ``strength: 0.3`` in mountaincar_ppo.yaml (a better final on every seed, 1.76x the peer's
  time instead of 2.2x): still not met; the steps are what is left (1.7-3.5x the peer's where it solves).
* 2026-12-02 14:24-14:37, ``classic_control.py --tasks sac-mountaincarcontinuous --seeds 0`` (the first run of this
  task; ours on the quiet machine, load 1.0-1.3; the peer beside the test suite, so its seconds are high): ours
  final -0.8, never at the threshold (50 episodes, every one to the 999-step limit: it never found the flag); SB3
  (gSDE, ``ent_coef`` fixed at 0.1) final 93.3, threshold at 18,912 steps / 200.8 s. Not met: the zoo's exploration
  (gSDE, a fixed entropy coefficient) is what our SAC lacks (mountaincarcontinuous_sac.yaml's deviations). Seeds
  1-2 not run. The coefficient held at 0.1 (a temporary switch skipping its update, not kept; our side, seed 0,
  14:39-14:44): final -25.9, again every episode to the limit, none at the flag: near-uniform actions in [-1, 1]
  pay the action cost and never climb. What is left is gSDE's held, state-dependent noise in our SAC: not built.
* 2026-12-07 02:12-02:45, ``classic_control.py --tasks sac-mountaincarcontinuous --seeds 0 1 2`` on the quiet machine
  (load 1.0-1.6, nothing beside it), with SAC's gSDE, ``activation: relu`` and ``learn_entcoef: false`` (above): ours
  final 95.2 / 94.9 / 63.0 (median 94.9), at 90 by 11.0k / 10.8k / 12.3k steps, 48.6 / 52.3 / 41.7 s (median 48.6
  s); SB3 93.3 / 93.7 / 94.1 (median 93.7), at 18.9k / 15.1k / 15.4k steps, 110.7 / 97.8 / 87.5 s from its process
  start (109.1 / 96.4 / 86.3 after its imports). Met: final median above the peer's, time 0.50x. Seed 2 relapsed
  late (999-step failures at 22-45k steps, final 63.0) where every peer seed settled into 70-90-step episodes; seed
  0's figures repeated the earlier run's exactly (one env: our run is deterministic per seed).
* 2026-12-07 02:54-03:24, the same with the shipped ``time_horizon`` 32 and ``max_queued_trajectories`` 2 (quiet
  machine; load 2.5 at the start as two A/B runs ended, then 1.0-1.6): ours final 94.2 / 94.9 / 94.2 (median 94.2), at
  90 by 8.6k / 9.1k / 8.1k steps, 31.0 / 45.6 / 35.8 s (median 35.8 s); SB3 93.3 / 93.7 / 94.1 (median 93.7), at
  18.9k / 15.1k / 15.4k steps, 112.1 / 91.4 / 108.1 s from its process start (110.2 / 90.2 / 106.8 after its
  imports). Met: the final above the peer's on every seed, time 0.33x.
* 2026-12-07 03:24-03:31, ppo-mountaincar, our side only, seeds 0 / 1, two runs at a time (``--skip-sb3 --config`` a
  copy of mountaincar_ppo.yaml): ``normalize_reward: true`` with strength 1 (VecNormalize's reward half instead of
  the constant 0.3): final -115.8 / -144.0, at -110 by 253.0k steps / never; ``max_queued_trajectories`` 4 (a fresher
  acting policy, as SAC's fix above): -109.2 / -106.2, by 195.3k / 214.6k steps. The shipped config took 122k / 173k
  (2026-12-02 15:01) and 209k / 119k (21:07) on these seeds: neither is the missing lever; not kept.
* 2026-12-07 04:32-04:38, ``classic_control.py --tasks ppo-mountaincarcontinuous --seeds 0 1 2`` on the quiet machine
  (load 4.0 at the start as killed A/B runs ended, then 1.3-2.0; nothing beside it), with ``orthogonal_init: false``
  as PyTorch's start (above): ours final 95.9 / 95.6 / 95.5 (median 95.6), at 90 by 6.8k / 9.0k / 6.5k steps, 14.5 /
  16.9 / 12.2 s (median 14.5 s); SB3 86.6 / 93.0 / 18.2 (median 86.6), at 13.8k / 6.6k / 3.5k steps, 38.0 / 17.4 /
  10.6 s from its process start (median 17.4 s; 16.2 s after its imports). **Met**: final above the peer's on
  every seed, time 0.84x. (2026-12-02 13:49's run, Glorot's start: 34.1 against 24.2 s, 1.41x.) Again 04:45-04:51
  (load 1.2-1.9): ours 95.5 / 95.7 / 95.6 (median 95.6), at 7.9k / 7.9k / 9.1k steps, 14.6 / 17.3 / 18.1 s (median
  17.3 s); SB3 the same finals and steps, 36.0 / 19.7 / 11.3 s (median 19.7 s; 18.4 s after its imports): met, 0.88x.
* 2026-12-07 04:51-04:58, ``classic_control.py --tasks ppo-acrobot ppo-mountaincar --seeds 0 1 2`` (this session's
  machine, quiet, load 0.6-1.3; shipped configs). Acrobot: ours final -109.9 / -82.1 / -74.9 (median -82.1), at -100 by
  67.2k / 77.8k / 72.8k steps, 10.3 / 11.3 / 10.8 s (median 10.8 s); SB3 -87.1 / -81.2 / -80.9 (median -81.2), 72.7k /
  51.6k / 56.6k steps, 14.9 / 10.5 / 12.1 s (median 12.1 s): 0.89x. MountainCar: ours -110.4 / -123.4 / -109.6 (median
  -110.4), at -110 by 162.8k / 126.1k / 125.0k steps, 26.0 / 18.4 / 19.3 s (median 19.3 s); SB3 -120.7 / -131.7 /
  -125.8 (median -125.8), 35.2k / 100.9k steps / never, 7.4 / 17.6 s / never (median 17.6 s): final met, time 1.10x,
  not met. Both machines' clocks ran faster than 2026-12-02's (ours 6.5-7k steps/s with start-up, imports done at
  2.8 s). Acrobot again, 04:58-05:02 (``--tasks ppo-acrobot``, load 1.0-1.3): ours -79.5 / -82.6 / -80.0 (median
  -80.0), 70.0k / 76.9k / 68.0k steps, 11.0 / 12.7 / 12.7 s (median 12.7 s); SB3 the same finals and steps, 14.2 /
  10.9 / 11.4 s (median 11.4 s): 1.11x, not met. At parity within run-to-run noise; ours still needs 1.2-1.5x the
  peer's steps on seeds 1-2 and ~1.6 s more start-up (its imports end 1.2-1.4 s after its process start).
  PyTorch's start on these two (``orthogonal_init: false``, not the zoo's: a probe, our side only, 05:03-05:06, one
  Acrobot and one MountainCar run at a time): Acrobot at -100 by 73.3k / 68.2k / 69.6k steps, finals -93.0 / -75.2 /
  -91.8 (no fewer steps than orthogonal's 67-78k, worse finals); MountainCar at -110 by 170.3k / 116.0k / 55.2k,
  finals -124.3 / -109.9 / -116.4. Not kept: neither is the zoo's setting, and neither gain is clear.
  Adam's epsilon as SB3's ActorCriticPolicy sets it (1e-5; ours is ML-Agents' and PyTorch's 1e-8; a copy of the tree
  with ``trainer.ppo.ADAM_EPSILON`` changed, 05:12-05:17, the same pairing): Acrobot at -100 by 72.4k / 88.5k /
  61.9k steps, finals -83.7 / -81.9 / -81.7; MountainCar at -110 by 243.8k / 156.7k / 202.6k, finals -109.6 / -121.4 /
  -120.9. No fewer steps on Acrobot, more on MountainCar: not kept.
* 2026-12-07 05:41-05:46, ``classic_control.py --tasks ppo-mountaincarcontinuous --seeds 0 1 2`` (quiet), after the
  trace change: ours final 95.5 / 73.4 / 95.2 (median 95.2), at 90 by 7.2k / 10.9k / 7.1k steps, 15.1 / 23.6 / 14.2 s
  (median 15.1 s); SB3 86.6 / 93.0 / 18.2 (median 86.6), 40.5 / 19.4 / 10.5 s (median 19.4 s): met, 0.78x. Seed 1
  relapsed in its last episodes (4 of the last 6 at 999 steps, after 40 successes), where the two runs before ended
  it at 95.6 and 95.7: one of the runs' timing, which moves each run's policy lag.
* 2026-12-07 05:34-05:41, ``classic_control.py --tasks ppo-acrobot ppo-cartpole --seeds 0 1 2`` (quiet, load 1.1-1.4),
  with the update graph traced at the first export (above). Acrobot: ours final -93.0 / -80.0 / -82.4 (median -82.4),
  at -100 by 68.8k / 67.2k / 72.2k steps, 14.1 / 12.1 / 12.6 s (median 12.6 s); SB3 -87.1 / -81.2 / -80.9 (median
  -81.2), the same steps as ever, 17.7 / 10.5 / 12.3 s (median 12.3 s): 1.02x, not met (both sides' seed 0 ran ~3 s
  slower than in the runs before). CartPole (T1): ours 500 x 3, at 475 by 47.6k / 28.1k / 40.6k steps, 8.2 / 5.8 /
  7.4 s (median 7.4 s); SB3 500 x 3, 25.1k / 25.5k / 32.5k steps, 8.0 / 7.6 / 9.9 s (median 8.0 s): met, 0.93x.
* 2026-12-02 21:07-21:22, ``classic_control.py --tasks ppo-acrobot ppo-mountaincar --seeds 0 1 2`` (quiet machine,
  load 0.2-1.2; the first run with the peer on the process-start clock too). Acrobot: ours final -77.8 / -80.1 /
  -94.0 (median -80.1), at -100 by 74.3k / 84.3k / 68.2k steps, 21.2 / 23.3 / 18.4 s (median 21.2 s); SB3 -89.3 /
  -75.3 / -85.9 (median -85.9), 62.5k / 51.6k / 55.3k steps, 19.7 / 16.1 / 24.9 s from its process start (18.1 /
  13.9 / 22.7 s after its imports; medians 19.7 / 18.1 s). Final met; time 1.08x on the same clock (1.17x against
  the peer's own), **not met**. MountainCar: ours -115.4 / -112.0 / -119.3 (median -115.4), at -110 by 208.8k /
  118.6k / 184.9k steps, 49.3 / 27.3 / 47.3 s (median 47.3 s); SB3 -134.6 / -121.7 / -123.3 (median -123.3),
  solved on seed 2 only, at 256.8k steps, 69.3 s (67.2 s after imports): median Infinity. Ours is ahead on this
  run's every figure, but the peer solved 2 of 3 seeds in the 14:54 run above and 1 of 3 here: left open, not met.
* 2026-12-07 06:21-06:30, the peer alone on six more seeds (``classic_control_sb3.py ppo Acrobot-v1 S 200000 -100``
  and ``ppo MountainCar-v0 S 300000 -110``, seeds 3-8, one at a time, our A/B runs beside some of them; its steps do
  not depend on the load). Acrobot, steps to -100: 57.2k / 71.3k / 57.7k / 66.4k / 55.0k / 67.7k; with seeds 0-2
  (72.7k / 51.6k / 56.6k) the nine seeds' median is 57.7k. MountainCar, steps to -110: 211.1k / 35.4k / 36.8k / 34.8k /
  183.3k / 218.0k; with seeds 0-2 (35.2k / 100.9k / never) the median is 100.9k, and 4 of 9 seeds reach it by 37k. Its
  seed-0 episodes (the peer with an episode log, a ``/tmp`` wrapper of ``Watch``): first success at 5.6k steps, the
  last-20 mean -151 at 14k and -136 at 21k, then between -120 and -150, touching -110 once at 35.2k. Ours on seed 0
  (06:13): first success at 11.4k, -185 at 20k, -165 at 30k, -150 at 50k; ours reached -110 at 103k-209k in 24 runs today
  (some with the variants below), never by 37k.
* 2026-12-07 06:14-06:20, ``epoch_minibatches`` drawing ``num_epoch * N // batch_size`` minibatches from the epochs'
  permutations back to back (so an update of 286 rows, where 4 of 64 rows a pass are dropped, takes 17 steps, not 16,
  as SB3's 16 per 256), a copy of the tree, A and B of a seed side by side (``ab.sh``), MountainCar seeds 0-5: steps to
  -110 208.6k / 114.6k / 154.2k / 200.8k / 164.1k / 150.9k as shipped, 153.4k / 157.2k / 182.7k / 102.6k / 151.2k /
  128.8k with it (medians 159k and 152k): inside the noise; not kept.
* Reward scale on MountainCar, 2026-12-07 06:36-06:38, our side only, two runs at a time, 150k steps (``stepstream
  train`` of a copy, ``--seed S --max-steps 150000``); figures: first success, last-20 mean at 20k / 40k / 60k / 100k
  steps, seeds 0 / 1 / 2. ``strength`` 0.3 (shipped): 12.4k / 11.4k / 12.0k; -182, -151, -132, -141 / -166, -153,
  -130, -118 / -173, -160, -120, -111. 0.1: 8.7k / 7.7k / 8.5k; -162, -148, -148, -144 / -160, -149, -132, -133 /
  -146, -138, -141, -129. 0.05: 8.5k / 8.5k / 5.3k; -152, -150, -128, -145 / -161, -154, -138, -124 / -154, -141,
  -128, -121. ``normalize_reward: true`` with strength 1: 8.5k / 7.9k / 5.3k; -161, -134, -128, -137 / -175, -144,
  -147, -144 / -153, -135, -130, -127. The smaller scales start as the peer does (first success ~8k, -150 by 20k),
  then stay at -125 to -150 where 0.3 goes on to -111 to -141 by 100k: none reaches the peer's 35k mode; not changed.
* What the trainer's thread spends its CPU on, MountainCar, 2026-12-07 06:21 (``py-spy record --threads`` of
  ``stepstream train configs/mountaincar_ppo.yaml --seed 0 --max-steps 150000``, 200 Hz, the peer running beside it):
  ``PPOLearner.add_trajectories`` 2,955 samples, ``update`` 1,027. The 16-step trajectories came in one or two per
  take-in, and each take-in made one value-network call and the normaliser's eager ops: 373 us a call, 1.13 ms for
  two trajectories (a ``/tmp`` timing of the learner alone). The env clients' event loop meanwhile sat in
  ``select`` for 37% of its samples. Since 065ec6d the trajectories wait for the update, which turns them into rows
  in one pass (``PPOLearner.add_trajectories``). A / B, one run at a time alternating per seed
  (``ab_seq.sh``: ``classic_control.py --tasks ppo-mountaincar --seeds S --skip-sb3`` from each tree), seeds 0-3,
  06:30-06:35: 300k steps took 40.3 / 38.9 / 39.9 / 34.3 s after the imports before (mean 38.4 s, 7.8k steps/s),
  34.5 / 34.0 / 32.7 / 30.3 s after (mean 32.9 s, 9.1k steps/s: +17%); 1,061-1,066 updates before, 1,113-1,118
  after (the rows of an update fall from ~282 to ~269 as the trainer reacts sooner). Steps to -110 164.5k / 128.2k /
  127.1k / 203.6k before, 185.1k / 175.2k / 151.4k / 185.1k after: no change in learning beyond the noise. The second
  profile (06:38, quiet machine): the trainer's thread 2,161 samples, ``update`` 1,074, turning trajectories into rows 349.
* 2026-12-07 06:44-06:54, ``classic_control.py --tasks ppo-mountaincar ppo-acrobot ppo-cartpole --seeds 0 1 2`` on the
  quiet machine (load 1.1-2.0, nothing beside it), after 065ec6d. MountainCar: ours final -111.8 / -107.7 / -126.0
  (median -111.8), at -110 by 139.5k / 202.2k / 162.6k steps, 20.4 / 22.7 / 19.4 s (median 20.4 s); SB3 -120.7 /
  -131.7 / -125.8 (median -125.8), 35.2k / 100.9k / never, 7.5 / 17.0 s / never (median 17.0 s): final met, time
  1.20x, **not met**. Acrobot: ours -85.8 / -85.6 / -79.7 (median -85.6), at -100 by 76.5k / 74.3k / 64.0k steps,
  10.0 / 9.9 / 9.0 s (median 9.9 s); SB3 -87.1 / -81.2 / -80.9 (median -81.2), 72.7k / 51.6k / 56.6k steps, 13.8 /
  10.4 / 11.0 s (median 11.0 s): time 0.90x, final within the spread (-85.8..-79.7 against -87.1..-80.9). CartPole
  (T1): ours 500 x 3, at 475 by 23.3k / 44.9k / 23.4k steps, 5.3 / 6.6 / 5.3 s (median 5.3 s); SB3 500 x 3, 25.1k /
  25.5k / 32.5k steps, 7.3 / 7.3 / 8.8 s (median 7.3 s): met, 0.72x.
* 2026-12-07 06:54-07:05, ``classic_control.py --tasks ppo-acrobot ppo-pendulum ppo-mountaincarcontinuous --seeds 0 1 2``
  (quiet, load 0.9-1.6), after 065ec6d. Acrobot: ours -80.7 / -86.2 / -103.4 (median -86.2), at -100 by 73.0k / 80.6k /
  63.8k steps, 9.8 / 10.3 / 9.2 s (median 9.8 s); SB3 the same finals and steps as ever, 13.7 / 10.3 / 11.3 s (median
  11.3 s): 0.87x, final median inside the peer's spread. With 06:44's run, Acrobot's time is **met in both runs**.
  Pendulum (PPO): ours -189.3 / -179.6 / -191.2 (median -189.3), at -200 by 58.4k / 51.2k / 51.2k steps, 14.6 / 12.6 /
  12.4 s (median 12.6 s); SB3 -168.0 / -164.2 / -193.1 (median -168.0), 52.8k / 60.8k / 51.2k, 19.4 / 22.6 / 19.9 s
  (median 19.9 s): 0.63x, final inside the peer's spread, below its median (as on 2026-12-02). MountainCarContinuous
  (PPO): ours 95.5 / 95.5 / 89.2 (median 95.5), at 90 by 8.5k / 8.5k / 7.4k steps, 14.6 / 15.0 / 13.0 s (median 14.6 s);
  SB3 86.6 / 93.0 / 18.2 (median 86.6), 13.8k / 6.6k / 3.5k, 35.9 / 18.1 / 10.2 s (median 18.1 s): met, 0.81x.
* MountainCar, two more candidates, 2026-12-07 07:04-07:07, our side only, 150k steps, two runs at a time (``stepstream
  train`` of the tree or a copy), figures as in the reward-scale item above. Observation clip 10 (SB3's ``clip_obs``; a
  copy of the tree with ``NORMALIZATION_CLIP`` 10): first success 15.1k / 11.7k / 9.0k; -180, -173, -140, -130 / -163,
  -149, -137, -149 / -171, -148, -130, -129 (seed 0 at -110 by 124.1k); with ``strength`` 0.1 too: -160, -133, -133,
  -125 / -191, -149, -149, -138 / -157, -132, -137, -122. No better than the shipped 5. ``max_policy_lag: 0`` (every
  stale trajectory dropped: 5.4-6.3k of them, each update on-policy): -188, -150, -143, -130 / -176, -142, -136, -136
  / -176, -149, -149, -138 per trainer step (seeds 1-2 at -110 by 87.9k / 112.6k trainer steps, ~100k more env
  steps): no faster per trainer step than with the lag, so asynchronous collection is not what the peer's 35k mode
  has over us.
* 2026-12-07 07:14-07:23, ``classic_control.py --tasks ppo-mountaincar ppo-acrobot ppo-cartpole --seeds 0 1 2`` on the
  quiet machine (load 0.8-1.4), with the ``held`` figure. MountainCar: ours final -105.7 / -112.3 / -115.1 (median
  -112.3), at -110 by 175.6k / 169.3k / 157.6k steps, 20.1 / 21.0 / 19.8 s (median 20.1 s), held 0.17 / 0.10 / 0.23
  (median 0.17); SB3 -120.7 / -131.7 / -125.8 (median -125.8), 35.2k / 100.9k / never, 7.3 / 17.1 s / never (median
  17.1 s), held 0.03 / 0.00 / 0.00 (median 0.00): final met, time 1.18x, **not met**; the peer's crossings are
  touches it does not hold (2.6% of its second half's windows on seed 0, none on seeds 1-2), ours hold 10-23%.
  The peer's own episode logs (``/tmp`` wrapper of ``Watch``, seeds 0-5, 300k, 07:07-07:12) say the same: its
  last-20 mean sits at -121 to -140 at 100k and 200k on every seed and is at -110 in 0-2% of the windows after 100k;
  ours (the six 300k runs of 06:27-06:54 after 065ec6d) -107 to -119 at 200k, 8-17% after 100k. Acrobot: ours -81.3 /
  -83.7 / -86.3 (median -83.7), 75.3k / 70.0k / 68.1k steps, 10.0 / 9.2 / 9.0 s (median 9.2 s), held 0.93 / 0.98 /
  0.91; SB3 -87.1 / -81.2 / -80.9 (median -81.2), 13.7 / 10.2 / 11.1 s (median 11.1 s), held 0.93 / 0.98 / 0.96:
  **met** a third time (0.83x; finals within the spread). CartPole (T1): ours 500 x 3, 32.9k / 53.8k / 31.3k steps,
  6.7 / 9.8 / 6.3 s (median 6.7 s); SB3 500 x 3, 8.5 / 7.5 / 9.3 s (median 8.5 s): met, 0.79x.
* MountainCar's ``strength`` 0.15 (between the peer-like 0.05-0.1 and the shipped 0.3), our side only, 150k steps,
  07:12-07:13: first success 8.5k / 11.4k / 8.2k / 8.7k, at -110 by 118.5k / 118.7k / - / 117.7k (seeds 0-3), the
  last-20 mean -126 / -119 / -121 / -124 at 100k. At the full budget (``ab_cfg.sh``: ``classic_control.py --tasks
  ppo-mountaincar --seeds S --skip-sb3`` with the shipped config and ``--config`` the copy, side by side per seed,
  07:47-07:51), seeds 0-5: at -110 by 206.2k / 196.2k / never / 219.0k / 116.2k / 173.8k steps (median ~201k), finals
  -119.3 / -110.4 / -127.7 / -126.6 / -113.4 / -122.2, held 0.13 / 0.09 / 0.00 / 0.05 / 0.15 / 0.14; the shipped 0.3
  beside it 126.2k / 283.6k / 180.6k / 128.3k / 120.4k / 178.3k (median ~153k), finals -116.1 / -119.5 / -110.8 /
  -111.3 / -112.0 / -111.1, held 0.16 / 0.04 / 0.16 / 0.20 / 0.09 / 0.13: 0.15 is later and holds less; not changed.
* 2026-12-07 07:23-07:46, ``classic_control.py --tasks sac-pendulum --seeds 0 1 2`` (T2; quiet, load 1.0-1.4; SAC is
  untouched since the 2026-12-02 runs): ours final -169.3 / -179.5 / -177.3 (median -177.3), at -200 by 6,864 / 7,064 /
  10,464 steps, 59.5 / 62.7 / 91.8 s (median 62.7 s), held 1.00 / 1.00 / 0.94; SB3 -165.7 / -175.4 / -170.9 (median
  -170.9), 8,400 / 6,400 / 10,000 steps, 104.6 / 78.9 / 128.1 s (median 104.6 s), held 1.00 / 1.00 / 0.98: time 0.60x,
  final within the seeds' spread (-179.5..-169.3 against -175.4..-165.7), as on 2026-12-02.
* 2026-12-07 08:53-08:58, ``classic_control.py --tasks ppo-mountaincar --seeds 0 1 2`` (quiet, load 1.1-1.7), with the
  take-ins counted in Python (7cfb983): ours final -107.5 / -117.1 / -110.9 (median -110.9), at -110 by 268.4k / 102.3k /
  189.9k steps, 27.2 / 12.6 / 20.9 s (median 20.9 s), held 0.03 / 0.17 / 0.13; SB3 -120.7 / -131.7 / -125.8 (median
  -125.8), 35.2k / 100.9k / never, 7.5 / 16.5 s / never (median 16.5 s), held 0.03 / 0.00 / 0.00: final met, time
  1.27x, **not met** (seed 1 at 12.6 s shows the speed; seeds 0 and 2 took 1.6-2.6x its steps).
* 2026-12-07 09:22-09:33, ``classic_control.py --tasks ppo-mountaincar ppo-acrobot ppo-cartpole --seeds 0 1 2`` (quiet,
  load 1.3-2.3), with ``apply_adam`` too (30e3bb5). MountainCar: ours final -114.0 / -110.0 / -120.6 (median -114.0), at
  -110 by 173.8k / 156.1k / 129.9k steps, 18.7 / 17.7 / 15.2 s (median 17.7 s), held 0.09 / 0.20 / 0.14; SB3 the same
  finals and steps as ever, 7.4 / 16.5 s / never (median 16.5 s), held 0.03 / 0.00 / 0.00: final met, time 1.07x, **not
  met**. Acrobot: ours -83.4 / -100.5 / -79.8 (median -83.4), 74.2k / 81.7k / 72.5k steps, 9.3 / 10.1 / 9.5 s (median
  9.5 s), held 0.97 / 0.96 / 0.98; SB3 -87.1 / -81.2 / -80.9 (median -81.2), 13.6 / 10.3 / 11.1 s (median 11.1 s),
  held 0.93 / 0.98 / 0.96: met (0.86x; final median inside the peer's spread). CartPole (T1): ours 500 x 3, 34.9k /
  33.5k / 33.9k steps, 5.8 / 6.4 / 5.8 s (median 5.8 s); SB3 500 x 3, 7.6 / 8.9 / 9.1 s (median 8.9 s): met, 0.65x.
* 2026-12-07 09:33-09:40, ``classic_control.py --tasks ppo-pendulum ppo-mountaincarcontinuous --seeds 0 1 2`` (quiet, load
  0.1-1.1), the same tree. Pendulum: ours final -183.8 / -180.0 / -198.3 (median -183.8), at -200 by 53.6k / 51.2k /
  52.0k steps, 12.6 / 12.0 / 12.4 s (median 12.4 s); SB3 -168.0 / -164.2 / -193.1 (median -168.0), 52.8k / 60.8k /
  51.2k, 19.3 / 21.8 / 19.4 s (median 19.4 s): time 0.64x, final inside the peer's spread, below its median (as
  before). MountainCarContinuous: ours 90.1 / 95.9 / 95.7 (median 95.7), at 90 by 7.9k / 7.9k / 7.3k steps, 12.1 / 12.6
  / 11.4 s (median 12.1 s), held 1.00 x 3; SB3 86.6 / 93.0 / 18.2 (median 86.6), 33.7 / 17.7 / 10.1 s (median 17.7 s):
  met, 0.69x.
* 2026-12-07 09:45-09:51, ``classic_control.py --tasks ppo-mountaincar --seeds 0 1 2`` again (quiet), the same tree: ours
  final -104.8 / -109.9 / -108.7 (median -108.7), at -110 by 100.2k / 159.8k / 258.2k steps, 12.2 / 17.0 / 27.1 s
  (median 17.0 s), held 0.15 / 0.23 / 0.05; SB3 as ever, 7.3 / 16.4 s / never (median 16.4 s): final met, time 1.04x,
  **not met**. The session's three runs: 1.27x, 1.07x, 1.04x.
* 2026-12-07 09:54-10:03, ``classic_control.py --tasks ppo-mountaincar --seeds 3 4 5 6 7 8`` (quiet, load 0.5-1.2), the
  same tree, for a nine-seed picture: ours final -118.3 / -121.7 / -113.6 / -129.2 / -110.3 / -113.0, at -110 by 158.1k /
  122.8k / 155.1k / never / 123.9k / 188.3k steps, 20.3 / 16.1 / 18.7 s / never / 15.3 / 19.5 s, held 0.18 / 0.16 / 0.19
  / 0.00 / 0.18 / 0.09; SB3 -112.1 / -103.0 / -136.7 / -140.7 / -137.7 / -131.9, at 211.1k / 35.4k / 36.8k / 34.8k /
  183.3k / 218.0k steps (as on 2026-12-07 06:21), 34.9 / 10.0 / 7.9 / 7.0 / 28.8 / 33.5 s, held 0.02 / 0.02 / 0.01 / 0.00
  / 0.00 / 0.01. With the 09:45 run's seeds 0-2, nine seeds: final median ours -113.0 against -131.7; time median ours
  18.7 s against 16.4 s (1.14x). The peer's times are bimodal (7.0-10.0 s on four seeds, 28.8-34.9 s on three, 16.4 s,
  never); ours lie between 12.2 and 27.1 s, never on one.
* 2026-12-07 10:56-11:02, ``classic_control.py --tasks ppo-mountaincar --seeds 0 1 2`` (quiet but for a 2 s import
  timing during the peer's seed 0; load 0.6-1.5), the same tree: ours final -120.5 / -116.4 / -112.7 (median -116.4),
  at -110 by 212.7k / 103.2k / 193.2k steps, 23.5 / 12.6 / 25.9 s (median 23.5 s), held 0.13 / 0.20 / 0.15; SB3 -120.7
  / -131.7 / -125.8 (median -125.8), 35.2k / 100.9k / never, 7.6 / 17.7 s / never (median 17.7 s), held 0.03 / 0.00 /
  0.00: final met, time 1.33x, **not met**. Our 300k steps took 32.0-39.0 s here, ~30 s at session 14's ~10.9k
  steps/s. Over the seven 3-seed runs since 04:51 the time has been 1.04-1.33x, never at or under the peer's.
* 2026-12-07 11:20-11:37, ``classic_control.py --tasks ppo-acrobot ppo-cartpole ppo-pendulum ppo-mountaincarcontinuous
  --seeds 0 1 2`` (quiet, load 1.0-1.6; training code as in session 14). Acrobot: ours final -82.1 / -79.3 / -85.1
  (median -82.1), at -100 by 70.8k / 79.3k / 65.4k steps, 12.5 / 13.4 / 13.1 s (median 13.1 s); SB3 -87.1 / -81.2 /
  -80.9 (median -81.2), the same steps as ever, 17.2 / 15.6 / 15.3 s (median 15.6 s): met, 0.84x, final inside the
  peer's spread. CartPole (T1): ours 500 x 3, 23.3k / 26.8k / 47.6k steps, 5.6 / 5.7 / 9.2 s (median 5.7 s); SB3 500 x
  3, 8.5 / 10.8 / 11.5 s (median 10.8 s): met, 0.53x. Pendulum: ours -188.2 / -180.5 / -190.1 (median -188.2), 48.0k /
  51.2k / 51.2k steps, 13.9 / 15.3 / 13.7 s (median 13.9 s); SB3 -168.0 / -164.2 / -193.1 (median -168.0), 24.7 / 29.6 /
  23.6 s (median 24.7 s): time 0.56x, final inside the peer's spread, below its median (as every run).
  MountainCarContinuous: ours 95.8 / 90.7 / 95.6 (median 95.6), 7.2k / 7.7k / 7.2k steps, 18.6 / 15.6 / 12.7 s (median
  15.6 s); SB3 86.6 / 93.0 / 18.2 (median 86.6), 41.6 / 26.4 / 12.1 s (median 26.4 s): met, 0.59x. Both sides' seconds
  ran higher than in session 14's runs (Acrobot: ours 12.5-13.4 s against 9.3-10.1 s at 09:22, the peer's 15.3-17.2 s
  against 10.3-13.6 s).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* as package modules

from benchmarks.episode_window import WINDOW, EpisodeWindow
from benchmarks.time_to_solve import REPO, Workload, run

log = logging.getLogger("benchmarks.classic_control")
SB3_PYTHON = Path.home() / ".cache" / "stepstream-yardsticks" / "sb3" / "bin" / "python"
PEER = REPO / "benchmarks" / "classic_control_sb3.py"


@dataclass(frozen=True)
class Task:
    """One suite entry: our config (its max_steps is the budget), the zoo's algo and env id, the threshold."""

    config: str
    algo: str
    gym_id: str
    threshold: float
    budget: int


TASKS = {
    "ppo-cartpole": Task("cartpole_ppo.yaml", "ppo", "CartPole-v1", 475.0, 100_000),
    "ppo-acrobot": Task("acrobot_ppo.yaml", "ppo", "Acrobot-v1", -100.0, 200_000),
    "ppo-mountaincar": Task("mountaincar_ppo.yaml", "ppo", "MountainCar-v0", -110.0, 300_000),
    "ppo-mountaincarcontinuous": Task("mountaincarcontinuous_ppo.yaml", "ppo", "MountainCarContinuous-v0", 90.0, 20_000),
    "ppo-pendulum": Task("pendulum_ppo.yaml", "ppo", "Pendulum-v1", -200.0, 100_000),
    "sac-mountaincarcontinuous": Task("mountaincarcontinuous_sac.yaml", "sac", "MountainCarContinuous-v0", 90.0, 50_000),
    "sac-pendulum": Task("pendulum_sac.yaml", "sac", "Pendulum-v1", -200.0, 20_000),
}


@dataclass
class Figures:
    """One side's figures for one seed."""

    final: float | None
    solve_steps: int | None
    solve_s: float | None
    solve_s_after_imports: float | None = None
    """The peer's own clock (after its imports); None on our side."""
    held: float | None = None
    """The fraction of the budget's second half's windows at or above the threshold (``benchmarks.episode_window``)."""


def episode_figures(csv_path: Path, threshold: float, budget: int) -> Figures:
    """The figures of ``benchmarks.episode_window`` from a run's ``episodes.csv`` (rows in the order the trainer took
    the episodes in), and the ``wall_seconds`` of the first window at or above ``threshold``."""
    episodes = EpisodeWindow(threshold, budget)
    solve_s: float | None = None
    with open(csv_path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            if episodes.add(float(row["episode_reward"]), int(row["agent_steps"])):
                solve_s = float(row["wall_seconds"])
    return Figures(episodes.mean, episodes.solve_steps, solve_s, held=episodes.held)


def run_ours(name: str, task: Task, seed: int, results_dir: Path, config: Path | None = None) -> Figures:
    """``stepstream train`` for the whole budget (no early stop: the final mean is a figure too); ``config``
    replaces the task's own (an A/B variant)."""
    config = config or REPO / "configs" / task.config
    never = Workload(config, window=WINDOW, threshold=math.inf)
    outcome, run_ok = run(name, seed, results_dir, wall_limit_s=7200.0, poll_s=1.0, workload=never)
    if not run_ok:
        return Figures(None, None, None)
    del outcome
    behavior_dirs = [p for p in (results_dir / f"{name}-seed{seed}").iterdir() if (p / "episodes.csv").exists()]
    return episode_figures(behavior_dirs[0] / "episodes.csv", task.threshold, task.budget)


def run_sb3(task: Task, seed: int, sb3_python: Path) -> Figures:
    """The peer in the SB3 environment; its last output line is its JSON."""
    command = [str(sb3_python), str(PEER), task.algo, task.gym_id, str(seed), str(task.budget), str(task.threshold)]
    log.info("peer: %s", " ".join(command))
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log.error("the peer failed (exit %d):\n%s", done.returncode, done.stderr[-4000:])
        return Figures(None, None, None)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return Figures(
        result["final"], result["solve_steps"], result["solve_s_from_process_start"], result["solve_s"], result.get("held")
    )


def median(values: list[float | None], missing: float | None) -> float:
    """The median, with None counted as ``missing`` (Infinity for times) or left out (``missing`` None: returns of a
    run that failed); NaN when nothing is left."""
    kept = [v for v in values if v is not None]
    if missing is not None:
        kept += [missing] * (len(values) - len(kept))
    return statistics.median(kept) if kept else math.nan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=list(TASKS))
    parser.add_argument("--results-dir", type=Path, help="keep our runs here (default: a temporary folder)")
    parser.add_argument("--sb3-python", type=Path, default=SB3_PYTHON, help=f"the peer's interpreter ({SB3_PYTHON})")
    parser.add_argument("--skip-sb3", action="store_true", help="our side only (A/B runs); sb3 lists stay empty")
    parser.add_argument("--config", type=Path, help="our side runs this config instead of the task's (one task only)")
    args = parser.parse_args(argv)
    if args.config is not None and len(args.tasks) != 1:
        parser.error("--config needs exactly one --tasks entry")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in args.tasks:  # the budget lives in the config: check they agree before hours of running
        from common.config import load_config

        path = args.config or REPO / "configs" / TASKS[name].config
        options = load_config(path)
        behavior = next(iter(options.env_settings.behavior_names))
        if options.settings_for(behavior).max_steps != TASKS[name].budget:
            raise SystemExit(f"{name}: {path} max_steps differs from the budget {TASKS[name].budget}")
    with tempfile.TemporaryDirectory(prefix="stepstream-cc-") as tmp:
        results_dir = (args.results_dir or Path(tmp)).resolve()
        results_dir.mkdir(parents=True, exist_ok=True)
        report: dict[str, Any] = {"workload": "classic_control", "date": datetime.datetime.now(datetime.UTC).isoformat()}
        report["load_average"] = [round(x, 2) for x in os.getloadavg()]
        for name in args.tasks:
            task = TASKS[name]
            entry: dict[str, list[Any]] = {k: [] for k in ("ours_final", "sb3_final", "ours_solve_s", "sb3_solve_s")}
            entry.update({"ours_solve_steps": [], "sb3_solve_steps": [], "sb3_solve_s_after_imports": []})
            entry.update({"ours_held": [], "sb3_held": []})
            for seed in args.seeds:
                sides = [("ours", run_ours(name, task, seed, results_dir, args.config))]
                if not args.skip_sb3:
                    sides.append(("sb3", run_sb3(task, seed, args.sb3_python)))
                for side, figures in sides:
                    entry[f"{side}_final"].append(figures.final)
                    entry[f"{side}_solve_s"].append(figures.solve_s)
                    entry[f"{side}_solve_steps"].append(figures.solve_steps)
                    entry[f"{side}_held"].append(figures.held)
                    if side == "sb3":
                        entry["sb3_solve_s_after_imports"].append(figures.solve_s_after_imports)
                    log.info("%s seed %d %s: %s", name, seed, side, figures)
            summary: dict[str, Any] = dict(entry)
            for side in ("ours", "sb3"):
                summary[f"median_{side}_final"] = median(entry[f"{side}_final"], None)
                summary[f"median_{side}_solve_s"] = median(entry[f"{side}_solve_s"], math.inf)
                summary[f"median_{side}_held"] = median(entry[f"{side}_held"], 0.0)
            summary["median_sb3_solve_s_after_imports"] = median(entry["sb3_solve_s_after_imports"], math.inf)
            report[name] = summary
    print(json.dumps(report))  # json writes inf as Infinity
    return 0


if __name__ == "__main__":
    sys.exit(main())
