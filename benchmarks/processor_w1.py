"""Workload W1 (../shared/yardsticks/README.md): trajectory assembly in the processor core.

One behavior, one session of A agents for S steps; obs 32 float32, 4 continuous actions whose
values and log-probs come from a fixed random table (W1 measures assembly, not inference). Each
agent's episode lasts uniform [50, 300] steps; on done the agent appears as done with its final obs
and a fresh agent id takes its row in the same step. time_horizon = 64. The stream is generated
before the clock starts, exactly as ``mlagents_w1.py`` does.

Figures, agent-steps/s = A * S / seconds (best of ``--repeats``):
    processor: ``TrajectoryAssembler.add`` over already-decoded BrainInfos (the peer's
        ``add_experiences`` also takes already-built step objects);
    processor_with_decode: the same plus ``decode_brain_info`` (validation) of the protobuf message;
    pipeline: assembly plus every trajectory into a trainer's update AgentBuffer, drained once per
        step as a trainer draining its queue would (``trajectories_to_rows`` + ``extend_rows``).

``--memory-size R`` (the cost of memory): the actions carry a recurrent state in and out of R floats per
row, and each step first reads the rows' held states (``TrajectoryAssembler.memories``), as the servicer does.

With ``--group-size K`` the rows are also in groups of ``K`` (by row: the agents of rows ``0..K-1`` form group
1, ...) and every step also goes through the group assembly (``processor.groups``): the cost of groups on the
hot path, against the same load without (``--group-size 0``, the default).

usage: processor_w1.py [--agents 256] [--steps 400] [--repeats 3] [--memory-size 0] [--group-size 0]
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import numpy as np

from common.buffer import AgentBuffer
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.tensors import to_tensor
from common.trajectory import trajectories_to_rows
from processor.assembly import StepActions, TrajectoryAssembler
from processor.groups import GroupInfo, SessionGroups
from processor.wire import DecodedBrainInfo, decode_brain_info
from protos import pb

log = logging.getLogger("benchmarks.processor_w1")
OBS_SIZE, ACTION_SIZE, TIME_HORIZON = 32, 4, 64


def make_stream(agents: int, steps: int, seed: int = 0, memory_size: int = 0) -> list[tuple[DecodedBrainInfo, StepActions]]:
    """The W1 stream: per step, the done rows (old ids) followed by the A decision rows; with ``memory_size`` R > 0
    each row's actions come with a state in and out of R floats."""
    rng = np.random.default_rng(seed)
    ids = np.arange(agents, dtype=np.int64)
    next_id = agents
    left = rng.integers(50, 301, size=agents)
    stream = []
    for _ in range(steps):
        obs = rng.standard_normal((agents, OBS_SIZE), dtype=np.float32)
        rewards = rng.standard_normal(agents).astype(np.float32)
        done = left <= 0
        term = np.flatnonzero(done)
        term_ids = ids[term].copy()
        for i in term:
            ids[i] = next_id
            next_id += 1
            left[i] = rng.integers(50, 301)
        left -= 1
        n_term = len(term)
        info = DecodedBrainInfo(
            behavior_name="W1",
            agent_ids=np.concatenate([term_ids, ids]),
            observations=[np.concatenate([obs[term], obs])],
            rewards=np.concatenate([rewards[term], np.where(done, 0.0, rewards).astype(np.float32)]),
            done=np.concatenate([np.ones(n_term, bool), np.zeros(agents, bool)]),
            max_reached=np.zeros(n_term + agents, bool),
            action_mask=None,
        )
        n = n_term + agents
        actions = StepActions(
            continuous_actions=rng.standard_normal((n, ACTION_SIZE), dtype=np.float32),
            discrete_actions=np.zeros((n, 0), np.int32),
            continuous_log_probs=rng.standard_normal((n, ACTION_SIZE), dtype=np.float32),
            discrete_log_probs=np.zeros((n, 0), np.float32),
            policy_version=0,
        )
        if memory_size:
            states = rng.standard_normal((2, n, memory_size), dtype=np.float32)
            actions = actions._replace(memories=states[0], next_memories=states[1])
        stream.append((info, actions))
    return stream


def to_message(info: DecodedBrainInfo) -> pb.BrainInfo:
    msg = pb.BrainInfo(behavior_name=info.behavior_name)
    to_tensor(info.agent_ids, msg.agent_ids)
    to_tensor(info.observations[0], msg.observations.add())
    to_tensor(info.rewards, msg.rewards)
    to_tensor(info.done, msg.done)
    to_tensor(info.max_reached, msg.max_reached)
    return msg


def group_infos(stream: list[tuple[DecodedBrainInfo, StepActions]], agents: int, group_size: int) -> list[GroupInfo]:
    """Per step, groups of ``group_size`` by row (a done row keeps the group of the row its id held)."""
    decision = np.arange(agents) // group_size + 1
    out = []
    for info, _ in stream:
        n_term = len(info.agent_ids) - agents
        held = {int(a): int(g) for a, g in zip(info.agent_ids[n_term:], decision, strict=True)}
        term = [held.get(int(a), 1) for a in info.agent_ids[:n_term]]
        ids = np.concatenate([np.array(term, np.int64), decision]).astype(np.int64)
        out.append(GroupInfo(ids, np.zeros(len(ids), np.float32)))
    return out


def run(
    stream: list[tuple[DecodedBrainInfo, StepActions]],
    params: BrainParameters,
    mode: str,
    groups: list[GroupInfo] | None = None,
) -> tuple[float, int, int]:
    """One pass; returns (seconds, trajectories, experiences appended to the update buffer)."""
    assembler = TrajectoryAssembler(params, "w1-session", TIME_HORIZON)
    session_groups = SessionGroups("w1-session")
    if groups is not None:
        session_groups.start(params, TIME_HORIZON, 64 << 20)
    update = AgentBuffer()
    messages = [to_message(info) for info, _ in stream] if mode == "decode" else []
    trajectories = 0
    start = time.perf_counter()
    for t, (info, actions) in enumerate(stream):
        step_info = decode_brain_info(messages[t], params) if mode == "decode" else info
        assembler.memories(step_info.agent_ids)  # the held states the inference pass would take (None without)
        cut = assembler.add(step_info, actions)
        if groups is not None:
            session_groups.add(params.behavior_name, step_info, groups[t], actions, cut)
        trajectories += len(cut)
        if mode == "pipeline" and cut:
            update.extend_rows(trajectories_to_rows(cut))
    seconds = time.perf_counter() - start
    experiences = update.num_experiences if mode == "pipeline" else assembler.counters.experiences
    return seconds, trajectories, experiences


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=256)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per figure; the best is reported")
    parser.add_argument("--memory-size", type=int, default=0, help="floats of recurrent state per row (0: none)")
    parser.add_argument("--group-size", type=int, default=0, help="agents per group; 0: no groups")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    params = BrainParameters("W1", (ObservationSpec((OBS_SIZE,), np.dtype(np.float32)),), ActionSpec(ACTION_SIZE))
    stream = make_stream(args.agents, args.steps, memory_size=args.memory_size)
    groups = group_infos(stream, args.agents, args.group_size) if args.group_size else None
    agent_steps = args.agents * args.steps
    figures: dict[str, float] = {}
    counts: dict[str, tuple[int, int]] = {}
    for mode in ("processor", "decode", "pipeline"):
        best = min(run(stream, params, mode, groups) for _ in range(args.repeats))
        figures[mode] = agent_steps / best[0]
        counts[mode] = (best[1], best[2])
        log.info(
            "W1 %-9s A=%d S=%d: %.0f agent-steps/s, %d trajectories, %d experiences",
            mode,
            args.agents,
            args.steps,
            figures[mode],
            best[1],
            best[2],
        )
    print(
        json.dumps(
            {
                "workload": "W1",
                "agents": args.agents,
                "group_size": args.group_size,
                "steps": args.steps,
                "memory_size": args.memory_size,
                "processor_agent_steps_per_s": round(figures["processor"]),
                "processor_with_decode_agent_steps_per_s": round(figures["decode"]),
                "pipeline_agent_steps_per_s": round(figures["pipeline"]),
                "trajectories": counts["processor"][0],
                "experiences": counts["pipeline"][1],
            }
        )
    )


if __name__ == "__main__":
    main()
