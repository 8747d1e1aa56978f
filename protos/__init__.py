"""The wire contract: ``stepstream.proto``, its generated code, and numpy <-> message conversions.

Regenerate the ``*_pb2*`` modules with ``make protos``; a test fails when they drift from the
``.proto`` file.
"""

from protos import stepstream_pb2 as pb
from protos.tensors import from_tensor, to_tensor

#: Bumped whenever a change to ``stepstream.proto`` breaks an older peer. A Hello that carries
#: another version is refused with FAILED_PRECONDITION.
PROTOCOL_VERSION = 1

__all__ = ["PROTOCOL_VERSION", "from_tensor", "pb", "to_tensor"]
