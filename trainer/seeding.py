"""Seeding a learner's initial weights: the one way every learner, reward signal and component does it.

Keras 3 gives each initializer built without a seed a seed drawn from Python's ``random`` (its
``make_default_seed``). So the weights of every network built inside ``seeded_initializers(seed)`` follow
from ``seed`` alone, whatever ran before in the process. Python's ``random`` is restored on exit, so
seeding a learner changes nothing outside it (``keras.utils.set_random_seed`` would also reseed numpy's and
TensorFlow's global generators for the whole process). Everything else random in a learner (minibatch
shuffles, SAC's action noise, GAIL's sampling) draws from generators of its own, seeded from the same ``seed``.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator


@contextlib.contextmanager
def seeded_initializers(seed: int) -> Iterator[None]:
    """Inside the block, Keras' unseeded initializers draw their seeds from ``random.seed(seed)``; on exit
    Python's ``random`` is back where it was."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)
