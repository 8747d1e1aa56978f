"""The .demo reader against the real ML-Agents files and their MANIFEST, its errors, and ``stepstream demo inspect``.

The files are never copied into the repository: ``STEPSTREAM_DEMO_DIR`` names their folder
(default ``../shared/data/mlagents-demos`` next to the checkout); the tests that need them skip
when it is absent. MANIFEST figures are rounded to 3 decimals, hence the small absolute tolerance
beside the relative one.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from common import demo_images
from common import trajectory as tr
from common.demo import (
    DemoError,
    DemoFormatError,
    DemoNotFoundError,
    DemoPathError,
    DemoSpecMismatchError,
    DemoVersionError,
    check_demo_spec,
    demo_action_timings,
    demo_summary,
    demo_to_buffer,
    encode_demo,
    load_demonstration,
)
from common.demo_images import PNG_SIGNATURE, decode_image
from common.errors import StepstreamError
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from protos import mlagents_demo_pb2 as demo_pb

REPO = Path(__file__).resolve().parents[2]
DEMO_DIR = Path(os.environ.get("STEPSTREAM_DEMO_DIR", REPO.parent / "shared" / "data" / "mlagents-demos"))
MANIFEST_PATH = DEMO_DIR / "MANIFEST.json"
MANIFEST: dict[str, dict[str, Any]] = json.loads(MANIFEST_PATH.read_text()) if MANIFEST_PATH.is_file() else {}
needs_demos = pytest.mark.skipif(not MANIFEST, reason=f"no demo files at {DEMO_DIR} (set STEPSTREAM_DEMO_DIR)")
SMALL = "ExpertBasic.demo"


def approx(value: float) -> Any:
    return pytest.approx(value, rel=1e-4, abs=6e-4)


def _sum(buffer: Any, key: str) -> float:
    return float(np.asarray(buffer[key].data, dtype=np.float64).sum())


# -- every real file against MANIFEST ------------------------------------------------------------


@needs_demos
@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_inspect_figures_match_manifest(name: str) -> None:
    expected = MANIFEST[name]
    got = demo_summary(load_demonstration(DEMO_DIR / name))
    assert got["records"] == expected["records"]
    assert got["episodes_done"] == expected["episodes_done"]
    assert got["sum_reward"] == approx(expected["sum_reward"])
    assert got["observation_shapes"] == expected["observation_shapes"]
    assert got["continuous_actions"] == expected["continuous_actions"]
    assert got["discrete_branches"] == expected["discrete_branches"]


@needs_demos
@pytest.mark.parametrize("name", sorted(n for n, e in MANIFEST.items() if "buffer_rows" in e))
def test_buffer_figures_match_manifest(name: str) -> None:
    expected = MANIFEST[name]
    spec, buffer = demo_to_buffer(DEMO_DIR / name, 1, action_timing="same")  # MANIFEST holds ML-Agents' pairing
    rows = expected["buffer_rows"]
    assert rows == expected["records"] - 1
    assert buffer.num_experiences == rows and buffer.check_length()
    assert [list(o.shape) for o in spec.observation_specs] == expected["observation_shapes"]
    sums = [_sum(buffer, tr.obs_key(k)) for k in range(len(spec.observation_specs))]
    assert sums == [approx(s) for s in expected["buffer_obs_sums"]]
    assert _sum(buffer, tr.CONTINUOUS_ACTIONS) == approx(expected["buffer_continuous_action_sum"])
    assert _sum(buffer, tr.DISCRETE_ACTIONS) == expected["buffer_discrete_action_sum"]
    assert _sum(buffer, tr.REWARDS) == approx(expected["buffer_reward_sum"])
    assert int(np.asarray(buffer[tr.DONE].data).sum()) == expected["buffer_done_count"]
    for k, obs_spec in enumerate(spec.observation_specs):
        obs = np.asarray(buffer[tr.obs_key(k)].data)
        assert obs.shape == (rows, *obs_spec.shape) and obs.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(buffer[tr.next_obs_key(k)].data)[:-1], obs[1:])
        if len(obs_spec.shape) == 3:
            assert 0.0 <= obs.min() and obs.max() <= 1.0


@needs_demos
def test_channels_last_image_is_read_by_the_layout_rule() -> None:
    """testdcvis declares [84, 84, 3] for an 84x84 RGB PNG (ML-Agents raises): read as [H, W, C]; a [0] obs too."""
    assert "buffer_rows" not in MANIFEST["testdcvis.demo"]
    spec, buffer = demo_to_buffer(DEMO_DIR / "testdcvis.demo", 1)
    image = np.asarray(buffer[tr.obs_key(0)].data)
    assert image.shape == (37, 84, 84, 3) and 0.0 <= image.min() and image.max() <= 1.0
    assert np.asarray(buffer[tr.obs_key(1)].data).shape == (37, 0)
    assert spec.action_spec == ActionSpec(0, (3, 3, 3, 2))
    assert np.asarray(buffer[tr.ACTION_MASK].data).shape == (37, 11)


def test_image_layout_rule_and_mismatch_error() -> None:
    from PIL import Image

    rgb = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    png_file = __import__("io").BytesIO()
    Image.fromarray(rgb).save(png_file, format="PNG")
    png = png_file.getvalue()
    chw = decode_image(png, (3, 4, 5), [], "t")
    np.testing.assert_allclose(chw, rgb.transpose(2, 0, 1) / 255.0, rtol=1e-6)
    np.testing.assert_allclose(decode_image(png, (4, 5, 3), [], "t"), rgb / 255.0, rtol=1e-6)
    np.testing.assert_allclose(decode_image(png, (1, 4, 5), [], "t")[0], rgb.mean(axis=2) / 255.0, rtol=1e-5)
    np.testing.assert_allclose(decode_image(png + png, (5, 4, 5), [], "t")[3:], chw[:2], rtol=1e-6)
    mapped = decode_image(png, (2, 4, 5), [0, 1, 1], "t")
    np.testing.assert_allclose(mapped[1], chw[1:].mean(axis=0), rtol=1e-6)
    with pytest.raises(DemoFormatError, match=r"declared shape \[8, 8, 3\].*4x5 with 3 channels"):
        decode_image(png, (8, 8, 3), [], "t")
    with pytest.raises(DemoFormatError, match="declares 4 channels"):
        decode_image(png, (4, 4, 5), [], "t")


# -- errors and edge cases -----------------------------------------------------------------------


def _pair(obs: list[float], action: list[float], reward: float = 0.0, done: bool = False) -> demo_pb.AgentInfoActionPairProto:
    pair = demo_pb.AgentInfoActionPairProto()
    pair.agent_info.reward = reward
    pair.agent_info.done = done
    observation = pair.agent_info.observations.add(shape=[len(obs)])
    observation.float_data.data.extend(obs)
    pair.action_info.vector_actions_deprecated.extend(action)
    return pair


def _crafted(path: Path, records: int = 6, api_version: int = 1, number_steps: int | None = None) -> Path:
    meta = demo_pb.DemonstrationMetaProto(api_version=api_version, demonstration_name="crafted", number_episodes=2)
    meta.number_steps = records if number_steps is None else number_steps
    brain = demo_pb.BrainParametersProto(brain_name="Crafted", vector_action_space_type_deprecated=demo_pb.continuous)
    brain.vector_action_size_deprecated.append(1)
    pairs = [_pair([float(i), 1.0], [0.5 * i], reward=float(i), done=i == 2) for i in range(records)]
    path.write_bytes(encode_demo(meta, brain, pairs))
    return path


def test_crafted_file_rows_follow_the_pairing_rule(tmp_path: Path) -> None:
    spec, buffer = demo_to_buffer(_crafted(tmp_path / "c.demo"), 1)
    assert spec == BrainParameters("Crafted", (ObservationSpec((2,), np.dtype(np.float32)),), ActionSpec(1, ()))
    assert buffer.num_experiences == 5
    np.testing.assert_array_equal(np.asarray(buffer[tr.obs_key(0)].data)[:, 0], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(np.asarray(buffer[tr.CONTINUOUS_ACTIONS].data)[:, 0], [0, 0.5, 1, 1.5, 2])
    np.testing.assert_array_equal(np.asarray(buffer[tr.REWARDS].data), [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(np.asarray(buffer[tr.DONE].data), [False, True, False, False, False])
    # Previous action: record i-1's, zeros at the file's and each episode's start (record 3 follows the done record 2).
    np.testing.assert_array_equal(np.asarray(buffer[tr.PREV_CONTINUOUS_ACTIONS].data)[:, 0], [0, 0, 0.5, 0, 1.5])
    assert np.asarray(buffer[tr.DISCRETE_ACTIONS].data).shape == (5, 0)
    # Sequences of 2 per episode (rows 0-1 | rows 2-4, padded to 4).
    _, sequences = demo_to_buffer(tmp_path / "c.demo", 2)
    assert sequences.num_experiences == 6


def test_missing_path_and_wrong_extension(tmp_path: Path) -> None:
    with pytest.raises(DemoNotFoundError, match="does not exist"):
        load_demonstration(tmp_path / "absent.demo")
    with pytest.raises(FileNotFoundError):
        demo_to_buffer(tmp_path / "absent.demo", 1)
    wrong = tmp_path / "demo.txt"
    wrong.write_bytes(b"")
    with pytest.raises(DemoPathError, match=r"\.demo extension"):
        demo_to_buffer(wrong, 1)
    with pytest.raises(DemoPathError, match=r"no \.demo files"):
        load_demonstration(tmp_path)


def test_bad_api_version(tmp_path: Path) -> None:
    with pytest.raises(DemoVersionError, match="api version 7 is not supported") as err:
        load_demonstration(_crafted(tmp_path / "v7.demo", api_version=7))
    assert isinstance(err.value, StepstreamError)


def test_truncated_tail_keeps_complete_records(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    full = _crafted(tmp_path / "full.demo", records=6)
    cut = tmp_path / "cut.demo"
    cut.write_bytes(full.read_bytes()[:-3])  # the last record loses its end
    with caplog.at_level(logging.WARNING):
        demo = load_demonstration(cut)
    assert demo.records == 5 and demo.files[0].truncated
    assert "counts 6 records but the file ends after 5" in caplog.text
    assert demo_to_buffer(cut, 1)[1].num_experiences == 4
    # A header count shorter than the records: reading stops there; junk after it is never parsed.
    short = tmp_path / "short.demo"
    short.write_bytes(_crafted(tmp_path / "s.demo", records=6, number_steps=4).read_bytes() + b"\x08\x01\x12junk")
    assert load_demonstration(short).records == 4 and not load_demonstration(short).files[0].truncated


def test_corrupt_record_before_the_count(tmp_path: Path) -> None:
    data = _crafted(tmp_path / "ok.demo", records=2, number_steps=3).read_bytes()
    (tmp_path / "bad.demo").write_bytes(data + b"\x03\x0f\x00\x00")  # a complete record, wire type 7: invalid
    with pytest.raises(DemoFormatError, match="record 2 at byte"):
        load_demonstration(tmp_path / "bad.demo")


@needs_demos
def test_directory_reads_every_file(tmp_path: Path) -> None:
    for copy in ("a.demo", "b.demo"):
        shutil.copy(DEMO_DIR / SMALL, tmp_path / copy)
    (tmp_path / "notes.txt").write_text("ignored")
    records = MANIFEST[SMALL]["records"]
    demo = load_demonstration(tmp_path)
    assert [f.path.name for f in demo.files] == ["a.demo", "b.demo"] and demo.records == 2 * records
    _, buffer = demo_to_buffer(tmp_path, 1)
    assert buffer.num_experiences == 2 * (records - 1)  # rows never pair records of different files
    shutil.copy(DEMO_DIR / "Expert3DBall.demo", tmp_path / "c.demo")
    with pytest.raises(DemoFormatError, match="differs from"):
        load_demonstration(tmp_path)


@needs_demos
# -- declared image sizes are bounded ------------------------------------------------------------


def png_claiming(width: int, height: int, colour: int = 2) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` pixels, with next to no image data behind it."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0)
    return PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def png_of(width: int, height: int, mode: str = "L") -> bytes:
    """A real, all-black PNG of ``width`` x ``height``: it compresses to a few bytes per thousand pixels."""
    from PIL import Image

    out = io.BytesIO()
    Image.new(mode, (width, height)).save(out, format="PNG")
    return out.getvalue()


def image_demo(path: Path, png: bytes, shape: list[int], records: int) -> Path:
    """A .demo file of ``records`` records, each one compressed observation ``png`` of declared ``shape``."""
    meta = demo_pb.DemonstrationMetaProto(api_version=1, demonstration_name="images", number_steps=records)
    brain = demo_pb.BrainParametersProto(brain_name="Images", action_spec=demo_pb.ActionSpecProto(num_continuous_actions=1))
    pair = demo_pb.AgentInfoActionPairProto(
        agent_info=demo_pb.AgentInfoProto(observations=[demo_pb.ObservationProto(shape=shape, compressed_data=png)]),
        action_info=demo_pb.AgentActionProto(continuous_actions=[0.0]),
    )
    path.write_bytes(encode_demo(meta, brain, [pair] * records))
    return path


def test_png_header_claiming_20000x20000_is_a_format_error(tmp_path: Path) -> None:
    """Regression: Pillow raised its uncaught DecompressionBombError; now the header is read first."""
    path = image_demo(tmp_path / "bomb.demo", png_claiming(20_000, 20_000), [3, 84, 84], records=2)
    with pytest.raises(DemoFormatError, match=r"record 0 observation 0: PNG 0 declares 20000x20000 pixels, over the 4194304"):
        demo_to_buffer(path)


def test_four_5000x5000_images_are_refused_before_decoding(tmp_path: Path) -> None:
    """Regression: a ~100 KiB file of four 5000x5000 images loaded into gigabytes; the per-image bound refuses it."""
    path = image_demo(tmp_path / "big.demo", png_of(5000, 5000), [1, 5000, 5000], records=4)
    assert path.stat().st_size < 150_000
    with pytest.raises(DemoFormatError, match=r"PNG 0 declares 5000x5000 pixels.*MAX_IMAGE_PIXELS"):
        demo_to_buffer(path)


def test_a_file_decoding_past_max_decoded_bytes_is_refused_before_allocating(tmp_path: Path) -> None:
    """65 records of 2048x2048 images (each within MAX_IMAGE_PIXELS) would decode to 1040 MiB."""
    path = image_demo(tmp_path / "many.demo", png_of(2048, 2048), [1, 2048, 2048], records=65)
    with pytest.raises(
        DemoFormatError, match=r"observation 0 of shape \[1, 2048, 2048\] in 65 records decodes to 1090519040 bytes"
    ):
        demo_to_buffer(path)
    assert demo_images.MAX_IMAGE_PIXELS == 2048 * 2048 and demo_images.MAX_DECODED_BYTES == 2**30


def test_the_decode_budget_counts_the_pngs_being_decoded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrays that fit, with an observation whose PNG pixels, while they decode, do not."""
    # Declared [1, 4, 5] (80 bytes a record) from RGB PNGs (240 bytes each while they decode): 4 records
    # hold 320 bytes of arrays, and each record's decode needs 240 more for a moment.
    monkeypatch.setattr(demo_images, "MAX_DECODED_BYTES", 320 + 240 - 1, raising=False)
    path = image_demo(tmp_path / "budget.demo", png_of(5, 4, "RGB"), [1, 4, 5], records=4)
    with pytest.raises(
        DemoFormatError, match=r"record 0 observation 0: its PNG data \(4x5x3\) decodes to 240 bytes.*320 bytes held"
    ):
        demo_to_buffer(path)
    monkeypatch.setattr(demo_images, "MAX_DECODED_BYTES", 320 + 240)
    assert demo_to_buffer(path)[1].num_experiences == 3


def test_pngs_of_another_size_than_declared_are_refused_from_their_headers() -> None:
    """The header decides, before decoding: a mismatch, a missing IHDR, PNGs of two sizes."""
    with pytest.raises(DemoFormatError, match=r"declared shape \[3, 84, 84\].*64x48 with 3 channels"):
        decode_image(png_claiming(48, 64), (3, 84, 84), [], "t")
    with pytest.raises(DemoFormatError, match="does not start with an IHDR header"):
        decode_image(PNG_SIGNATURE + b"\0\0\0\0IEND\xae\x42\x60\x82", (3, 84, 84), [], "t")
    with pytest.raises(DemoFormatError, match=r"its PNGs differ in size: \['4x3', '3x4'\]"):
        decode_image(png_of(3, 4) + png_of(4, 3), (4, 3, 4), [], "t")


def test_spec_mismatch_with_the_trained_behavior() -> None:
    spec, _ = demo_to_buffer(DEMO_DIR / SMALL, 1, expected_spec=load_demonstration(DEMO_DIR / SMALL).spec)
    other = BrainParameters("Basic", spec.observation_specs, ActionSpec(0, (2,)))
    with pytest.raises(DemoSpecMismatchError, match=r"branches \[3\] in the demo, 0 continuous \+ branches \[2\] expected"):
        demo_to_buffer(DEMO_DIR / SMALL, 1, expected_spec=other)
    wide = BrainParameters("Basic", (ObservationSpec((21,), np.dtype(np.float32)),), spec.action_spec)
    with pytest.raises(DemoSpecMismatchError, match=r"\[\[20\]\] in the demo, \[\[21\]\] expected"):
        check_demo_spec(spec, wide)


# -- the command ---------------------------------------------------------------------------------


@needs_demos
def test_cli_inspect_json() -> None:
    command = [sys.executable, "-m", "cli.main", "demo", "inspect", str(DEMO_DIR / SMALL), "--json"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    expected = MANIFEST[SMALL]
    assert set(got) == {
        "records",
        "episodes_done",
        "sum_reward",
        "observation_shapes",
        "continuous_actions",
        "discrete_branches",
        "action_timing",
    }
    timing = got.pop("action_timing")
    assert list(timing) == [SMALL] and timing[SMALL]["timing"] == "same" and timing[SMALL]["episode_starts"] == 11
    assert {k: v for k, v in got.items() if k != "sum_reward"} == {k: expected[k] for k in got if k != "sum_reward"}
    assert got["sum_reward"] == approx(expected["sum_reward"])


def test_cli_inspect_summary_and_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import main

    assert main(["demo", "inspect", str(_crafted(tmp_path / "c.demo"))]) == 0
    out = capsys.readouterr().out
    assert "records        6" in out and "1 continuous" in out and "behavior 'Crafted'" in out
    assert "action timing  c.demo: same (by default;" in out
    assert main(["demo", "inspect", str(tmp_path / "absent.demo")]) == 2


# -- action timing (common.demo_timing) ----------------------------------------------------------

EXPECTED_TIMING = {
    # name: (timing, decided_by). The evidence, measured with `stepstream demo inspect FILE`
    # (inverse-dynamics score of record t's action | of record t+1's, on the rows where they differ;
    # episode starts with an all-zero action), and a 5-NN inverse-dynamics check where the linear fit
    # is close (leave-one-out accuracy on those rows, record t | t+1):
    "Expert3DBall.demo": ("same", "inverse_dynamics"),  # R^2 0.9996 | 0.208 on 547 rows
    "Expert3DBallHard.demo": ("same", "inverse_dynamics"),  # R^2 0.957 | -0.401 on 274 rows
    "ExpertBasic.demo": ("same", "episode_start_zeros"),  # one constant action: no rows to fit; 0/11 zero starts
    "ExpertGridWorld.demo": (
        "next",
        "episode_start_zeros",
    ),  # images, 23 rows: 0.087 | 0.174; 13/14 zero starts (5% elsewhere)
    "ExpertHallway.demo": ("same", "episode_start_zeros"),  # 0.617 | 0.635 on 1257 rows; 8/91 zero starts; 5-NN 0.656 | 0.623
    "ExpertPushBlock.demo": (
        "same",
        "episode_start_zeros",
    ),  # 0.592 | 0.577 on 1206 rows; 2/96 zero starts; 5-NN 0.464 | 0.376
    "ExpertPyramid.demo": ("next", "inverse_dynamics"),  # accuracy 0.479 | 0.812 on 643 rows; 7/10 zero starts
    "test.demo": ("next", "inverse_dynamics"),  # R^2 0.179 | 0.992 on 2122 rows; 18/22 zero starts
    "testdcvis.demo": ("same", "default"),  # 6 rows to fit, one episode start: nothing decides
    "testhybridvis.demo": ("same", "default"),  # 24 rows, one episode start
}


@needs_demos
def test_every_shared_file_has_an_expected_timing() -> None:
    assert set(EXPECTED_TIMING) == set(MANIFEST)


@needs_demos
@pytest.mark.parametrize("name", sorted(EXPECTED_TIMING))
def test_action_timing_of_each_shared_file(name: str) -> None:
    (evidence,) = demo_action_timings(load_demonstration(DEMO_DIR / name))
    assert (evidence.timing, evidence.decided_by) == EXPECTED_TIMING[name], evidence
    if evidence.decided_by == "inverse_dynamics":
        assert evidence.same_fit is not None and evidence.next_fit is not None
        assert abs(evidence.next_fit - evidence.same_fit) > 0.3  # far from the 0.05 margin


def _next_pairing_expected(name: str) -> dict[str, float]:
    """The ``next`` rows' figures computed from the raw records, not through ``_file_rows``."""
    demo = load_demonstration(DEMO_DIR / name)
    infos = [pair.agent_info for pair in demo.pairs]
    kept = [t for t in range(len(infos) - 1) if not infos[t].done]  # record t+1 in t's episode

    c = demo.spec.action_spec.continuous_size

    def action_sum(t: int, field: str) -> float:
        action = demo.pairs[t].action_info
        if len(action.continuous_actions) or len(action.discrete_actions):
            return float(sum(getattr(action, field)))
        values = list(action.vector_actions_deprecated)  # older files: the first C continuous, then discrete
        return float(sum(values[:c] if field == "continuous_actions" else values[c:]))

    return {
        "rows": len(kept),
        "reward": sum(infos[t + 1].reward for t in kept),
        "done": sum(infos[t + 1].done for t in kept),
        "continuous": sum(action_sum(t + 1, "continuous_actions") for t in kept),
        "discrete": sum(action_sum(t + 1, "discrete_actions") for t in kept),
    }


@needs_demos
@pytest.mark.parametrize("name", sorted(n for n, (timing, _) in EXPECTED_TIMING.items() if timing == "next"))
def test_detected_next_pairing_drops_the_pairs_across_episodes(name: str) -> None:
    expected = _next_pairing_expected(name)
    manifest = MANIFEST[name]
    _, buffer = demo_to_buffer(DEMO_DIR / name, 1)  # auto: detected next
    assert buffer.num_experiences == expected["rows"] == manifest["records"] - 1 - manifest["episodes_done"]
    assert buffer.check_length()
    assert _sum(buffer, tr.REWARDS) == approx(expected["reward"])
    assert int(np.asarray(buffer[tr.DONE].data).sum()) == expected["done"] == manifest["episodes_done"]
    assert _sum(buffer, tr.CONTINUOUS_ACTIONS) == approx(expected["continuous"])
    assert _sum(buffer, tr.DISCRETE_ACTIONS) == expected["discrete"]
    # Row i's previous action is record i's (zeros at an episode's start), its action record i+1's.
    actions = np.asarray(
        buffer[tr.CONTINUOUS_ACTIONS].data if manifest["continuous_actions"] else buffer[tr.DISCRETE_ACTIONS].data
    )
    prev = np.asarray(
        buffer[tr.PREV_CONTINUOUS_ACTIONS].data if manifest["continuous_actions"] else buffer[tr.PREV_DISCRETE_ACTIONS].data
    )
    within = ~np.r_[True, np.asarray(buffer[tr.DONE].data, bool)[:-1]]
    np.testing.assert_array_equal(prev[1:][within[1:]], actions[:-1][within[1:]])
    # Forcing ML-Agents' pairing gives MANIFEST's rows back (test_buffer_figures_match_manifest checks the sums).
    assert demo_to_buffer(DEMO_DIR / name, 1, action_timing="same")[1].num_experiences == manifest["buffer_rows"]


def _crafted_next(path: Path) -> Path:
    """The crafted file of ``_crafted`` in Unity's order: record t carries record t-1's action, zeros at a start."""
    meta = demo_pb.DemonstrationMetaProto(api_version=1, demonstration_name="crafted", number_steps=6)
    brain = demo_pb.BrainParametersProto(brain_name="Crafted")
    brain.action_spec.num_continuous_actions = 1
    chosen = [0.5 * i for i in range(6)]
    stored = [0.0, chosen[0], chosen[1], 0.0, chosen[3], chosen[4]]  # record 3 opens an episode (record 2 is done)
    pairs = [_pair([float(i), 1.0], [stored[i]], reward=float(i), done=i == 2) for i in range(6)]
    path.write_bytes(encode_demo(meta, brain, pairs))
    return path


def test_next_pairing_rule_on_a_crafted_file(tmp_path: Path) -> None:
    _, buffer = demo_to_buffer(_crafted_next(tmp_path / "n.demo"), 1, action_timing="next")
    # Rows for records 0, 1, 3, 4: record 2 is done, so its pair with record 3's action is dropped.
    assert buffer.num_experiences == 4 and buffer.check_length()
    np.testing.assert_array_equal(np.asarray(buffer[tr.obs_key(0)].data)[:, 0], [0, 1, 3, 4])
    np.testing.assert_array_equal(np.asarray(buffer[tr.next_obs_key(0)].data)[:, 0], [1, 2, 4, 5])
    np.testing.assert_array_equal(np.asarray(buffer[tr.CONTINUOUS_ACTIONS].data)[:, 0], [0, 0.5, 1.5, 2])
    np.testing.assert_array_equal(np.asarray(buffer[tr.PREV_CONTINUOUS_ACTIONS].data)[:, 0], [0, 0, 0, 1.5])
    np.testing.assert_array_equal(np.asarray(buffer[tr.REWARDS].data), [1, 2, 4, 5])
    np.testing.assert_array_equal(np.asarray(buffer[tr.DONE].data), [False, True, False, False])
    _, sequences = demo_to_buffer(tmp_path / "n.demo", 2, action_timing="next")
    assert sequences.num_experiences == 4  # episodes of 2 and 2 rows


def test_a_bad_action_timing_is_an_error_naming_the_value(tmp_path: Path) -> None:
    with pytest.raises(DemoError, match="action_timing must be one of auto, same, next, got 'later'"):
        demo_to_buffer(_crafted(tmp_path / "c.demo"), 1, action_timing="later")


# -- our own writer in each order ----------------------------------------------------------------


class DriftEnv:
    """A point that each action moves (obs = its position), so the observation change shows the action.

    Continuous: 2 actions, position += 0.1 x action. Discrete: one branch of 4 (+x, -x, +y, -y,
    0 = +x is never zero-sized). Episodes are truncated after 12 steps; next-step auto-reset.
    """

    def __init__(self, n: int, continuous: bool) -> None:
        self.n, self.continuous = n, continuous
        self.position = np.zeros((n, 2), np.float32)
        self.steps = np.zeros(n, int)
        self.ended = np.zeros(n, bool)
        actions = ActionSpec(2, ()) if continuous else ActionSpec(0, (4,))
        self.params = BrainParameters("Drift", (ObservationSpec((2,), np.dtype(np.float32)),), actions)

    @property
    def num_agents(self) -> int:
        return self.n

    @property
    def brain_parameters(self) -> BrainParameters:
        return self.params

    def reset(self) -> list[np.ndarray]:
        self.position[:] = 0
        return [self.position.copy()]

    def step(
        self, continuous: np.ndarray, discrete: np.ndarray
    ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        moves = 0.1 * continuous if self.continuous else 0.1 * np.array([[1, 0], [-1, 0], [0, 1], [0, -1]])[discrete[:, 0]]
        self.position = np.where(self.ended[:, None], 0.0, self.position + moves).astype(np.float32)
        self.steps = np.where(self.ended, 0, self.steps + 1)
        truncated = self.steps >= 12
        self.ended = truncated
        return [self.position.copy()], np.full(self.n, 0.1, np.float32), np.zeros(self.n, bool), truncated


def _random_policy(seed: int) -> Any:
    rng = np.random.default_rng(seed)

    def act(observations: list[np.ndarray], spec: ActionSpec) -> tuple[np.ndarray, np.ndarray]:
        n = len(observations[0])
        continuous = rng.uniform(-1, 1, (n, spec.continuous_size)).astype(np.float32)
        discrete = (
            np.stack([rng.integers(0, b, n) for b in spec.discrete_branches], axis=1)
            if spec.num_branches
            else np.zeros((n, 0), int)
        )
        return continuous, discrete

    return act


def _unity_order(pairs: list[demo_pb.AgentInfoActionPairProto]) -> list[demo_pb.AgentInfoActionPairProto]:
    """Unity's recording order: each record stores the previous record's action, zeros at an episode's first."""
    out, previous = [], None
    for pair in pairs:
        moved = demo_pb.AgentInfoActionPairProto()
        moved.agent_info.CopyFrom(pair.agent_info)
        if previous is None:
            zeros = demo_pb.AgentActionProto()
            zeros.continuous_actions.extend([0.0] * len(pair.action_info.continuous_actions))
            zeros.discrete_actions.extend([0] * len(pair.action_info.discrete_actions))
            zeros.vector_actions_deprecated.extend([0.0] * len(pair.action_info.vector_actions_deprecated))
            moved.action_info.CopyFrom(zeros)
        else:
            moved.action_info.CopyFrom(previous.action_info)
        out.append(moved)
        previous = None if pair.agent_info.done else pair
    return out


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous", "discrete"])
def test_our_recorder_is_read_as_same_and_unitys_order_as_next(continuous: bool, tmp_path: Path) -> None:
    from cli.record import demo_bytes, record_episodes, scripted_actor

    env = DriftEnv(2, continuous)
    pairs, returns = record_episodes(env, scripted_actor(_random_policy(1), env.params, "random"), 20)
    for order, records in (("same", pairs), ("next", _unity_order(pairs))):
        path = tmp_path / f"{order}.demo"
        path.write_bytes(demo_bytes("drift", env.params, records, returns))
        (evidence,) = demo_action_timings(load_demonstration(path))
        assert (evidence.timing, evidence.decided_by) == (order, "inverse_dynamics"), evidence
        # The detected pairing gives every row the action that moved obs to next_obs.
        _, buffer = demo_to_buffer(path, 1)
        obs, next_obs = np.asarray(buffer[tr.obs_key(0)].data), np.asarray(buffer[tr.next_obs_key(0)].data)
        # ML-Agents' pairing (same) keeps the row from a terminal record into the next episode: skip it.
        done = np.asarray(buffer[tr.DONE].data, bool)
        moved = ~np.r_[False, done[:-1]]
        if continuous:
            np.testing.assert_allclose(
                (next_obs - obs)[moved], 0.1 * np.asarray(buffer[tr.CONTINUOUS_ACTIONS].data)[moved], atol=1e-5
            )
        else:
            directions = np.array([[1, 0], [-1, 0], [0, 1], [0, -1]])[np.asarray(buffer[tr.DISCRETE_ACTIONS].data)[:, 0]]
            np.testing.assert_allclose((next_obs - obs)[moved], 0.1 * directions[moved], atol=1e-5)


# -- the demo_action_timing key ------------------------------------------------------------------

TIMING_SECTIONS = {
    "bc": {"trainer_type": "bc", "hyperparameters": {"demo_path": "d.demo"}},
    "gail": {"reward_signals": {"gail": {"demo_path": "d.demo"}}},
    "behavioral_cloning": {"behavioral_cloning": {"demo_path": "d.demo"}},
}


def _timing_section(behavior: dict[str, Any], where: str) -> dict[str, Any]:
    if where == "bc":
        return behavior["hyperparameters"]
    return behavior["reward_signals"]["gail"] if where == "gail" else behavior["behavioral_cloning"]


@pytest.mark.parametrize("where", sorted(TIMING_SECTIONS))
def test_demo_action_timing_key_parses_strictly(where: str) -> None:
    import copy

    from common.config import DemoActionTiming, parse_config

    def settings(value: str | None) -> Any:
        behavior = copy.deepcopy(TIMING_SECTIONS[where])
        if value is not None:
            _timing_section(behavior, where)["demo_action_timing"] = value
        parsed = parse_config({"behaviors": {"B": behavior}}, "t.yaml").behaviors["B"]
        if where == "bc":
            return parsed.hyperparameters
        return parsed.reward_signals["gail"] if where == "gail" else parsed.behavioral_cloning

    assert settings(None).demo_action_timing is DemoActionTiming.AUTO
    assert settings("next").demo_action_timing is DemoActionTiming.NEXT
    assert settings("same").demo_action_timing is DemoActionTiming.SAME
    key = {
        "bc": "behaviors.B.hyperparameters.demo_action_timing",
        "gail": "behaviors.B.reward_signals.gail.demo_action_timing",
        "behavioral_cloning": "behaviors.B.behavioral_cloning.demo_action_timing",
    }[where]
    with pytest.raises(StepstreamError, match=rf"{key}: expected one of auto, same, next, got str 'previous'"):
        settings("previous")
