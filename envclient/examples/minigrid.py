"""MiniGrid seen only as RGB images: the pixel workload T3 of ``../shared/yardsticks/README.md``.

``env_path: python:envclient.examples.minigrid:empty_5x5_rgb`` (``configs/minigrid_ppo.yaml``) makes
``MiniGrid-Empty-5x5-v0`` wrapped as the peer (``sb3_pixel.py``) wraps it: ``RGBImgObsWrapper(tile_size=8)``
(the fully observable grid drawn as pixels) then ``ImgObsWrapper`` (the image alone, no mission text or
direction), so the observation is ``Box(uint8, [40, 40, 3])``: 5 cells x 8 pixels a side. It passes through
the Gymnasium adapter as an image; the trainer scales it to [0, 1] at the network input.

MiniGrid is optional: ``pip install 'stepstream[bench]'``. Without it the factory raises a ConfigError
naming that extra (the adapter reports it with the module and function).
"""

from __future__ import annotations

from typing import Any

import gymnasium

from common.errors import ConfigError

EMPTY_5X5_ID = "MiniGrid-Empty-5x5-v0"
"""Fixed start, goal in the far corner, 7 discrete actions, 100 steps at most (4 x 5 x 5); optimal: 5 steps."""
TILE_SIZE = 8
"""Pixels per grid cell: 5 x 8 = 40, the peer's frame."""


def _import_minigrid() -> Any:
    try:
        import minigrid  # noqa: F401  (importing it registers the MiniGrid-* ids with Gymnasium)
        from minigrid import wrappers
    except ImportError as exc:
        raise ConfigError(
            f"MiniGrid is not installed ({exc}): install the bench extra, pip install 'stepstream[bench]'"
            " (or pip install 'minigrid>=3,<4')"
        ) from exc
    return wrappers


def rgb_only(env_id: str, tile_size: int = TILE_SIZE) -> gymnasium.Env[Any, Any]:
    """One MiniGrid env seen as its fully observable RGB image only.

    Args:
        env_id: a MiniGrid id, e.g. ``MiniGrid-Empty-5x5-v0``.
        tile_size: pixels per cell; the frame is ``[cells * tile_size, cells * tile_size, 3]``.

    Returns:
        The env, observation ``Box(0, 255, [H, W, 3], uint8)``, its own discrete actions.

    Raises:
        ConfigError: MiniGrid is not installed (names the extra).
    """
    wrappers = _import_minigrid()
    return wrappers.ImgObsWrapper(wrappers.RGBImgObsWrapper(gymnasium.make(env_id), tile_size=tile_size))


def empty_5x5_rgb() -> gymnasium.Env[Any, Any]:
    """``MiniGrid-Empty-5x5-v0`` as a ``[40, 40, 3]`` uint8 image (T3's workload); see ``rgb_only``."""
    return rgb_only(EMPTY_5X5_ID)
