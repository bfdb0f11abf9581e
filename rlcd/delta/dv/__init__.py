"""Deletion vectors: descriptors, Z85, and the DV file/bitmap codec. Pure: no IO, no clock.

Bytes in, bitmaps out (``pyroaring.BitMap64`` of 0-based physical row positions). Fetching the
bytes is the caller's job: :func:`dv_byte_range` says which range of which file
(:meth:`DeletionVectorDescriptor.file_path`) to GET, :func:`load_dv` checks and decodes them.
Spec: ``shared/docs/delta-protocol.md`` §3.
"""

from rlcd.delta.dv._codec import (
    FORMAT_VERSION,
    MAX_ROW_INDEX,
    NATIVE_MAGIC,
    PORTABLE_MAGIC,
    DVFormatError,
    decode_dv_file,
    decode_dv_range,
    decode_inline_dv,
    deserialize_bitmap,
    dv_byte_range,
    encode_dv_file,
    encode_dv_range,
    load_dv,
    serialize_bitmap,
)
from rlcd.delta.dv._z85 import z85_decode, z85_encode
from rlcd.delta.dv.descriptor import DeletionVectorDescriptor

__all__ = (
    "DeletionVectorDescriptor",
    "load_dv",
    "dv_byte_range",
    "serialize_bitmap",
    "deserialize_bitmap",
    "encode_dv_range",
    "encode_dv_file",
    "decode_dv_range",
    "decode_dv_file",
    "decode_inline_dv",
    "DVFormatError",
    "PORTABLE_MAGIC",
    "NATIVE_MAGIC",
    "FORMAT_VERSION",
    "MAX_ROW_INDEX",
    "z85_encode",
    "z85_decode",
)
__pure__ = True
