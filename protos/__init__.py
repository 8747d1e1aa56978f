"""The wire contract: ``stepstream.proto`` and its generated code.

Regenerate the ``*_pb2*`` modules with ``make protos``; a test fails when they drift from the
``.proto`` file. This package is the bottom layer and imports nothing else of stepstream: numpy <->
``Tensor`` conversions, which raise stepstream's errors, are in ``common.tensors``.
"""

from protos import stepstream_pb2 as pb

#: Bumped whenever a change to ``stepstream.proto`` breaks an older peer. A Hello that carries
#: another version is refused with FAILED_PRECONDITION.
PROTOCOL_VERSION = 1

__all__ = ["PROTOCOL_VERSION", "pb"]
