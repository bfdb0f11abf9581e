"""Delta's Z85 variant (protocol notes §3.2; Spark ``util/Codec.scala`` ``Base85Codec``). Pure.

Z85 proper (ZeroMQ RFC 32) only accepts input whose length is a multiple of 4. Delta zero-pads
unaligned input up to the next multiple of 4 before encoding, so decoding yields the *padded*
length and callers truncate (an inline DV to ``sizeInBytes``). Python 3.13's ``base64.z85encode``
instead emits a short final block for unaligned input (34 bytes -> 43 chars, Delta: 45), and the
project supports 3.11, so this module is the one codec rlcd uses.
"""

from __future__ import annotations

import struct

__all__ = ("ALPHABET", "z85_decode", "z85_encode")
__pure__ = True

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
"""The 85 ZeroMQ Z85 characters, digit value = index."""

_DECODE = {c: i for i, c in enumerate(ALPHABET)}
_POW85 = (85**4, 85**3, 85**2, 85, 1)


def z85_encode(data: bytes) -> str:
    """Encode ``data`` as Z85, zero-padding it to a multiple of 4 bytes first (Delta's variant).

    Each 4-byte big-endian word becomes 5 characters, most significant digit first, so 16 bytes
    (a UUID) are always 20 characters.
    """
    padded = bytes(data) + b"\x00" * (-len(data) % 4)
    out: list[str] = []
    for (word,) in struct.iter_unpack(">I", padded):
        out.extend(ALPHABET[(word // p) % 85] for p in _POW85)
    return "".join(out)


def z85_decode(text: str) -> bytes:
    """Decode Z85 ``text``; the result has the padded length (a multiple of 4).

    Raises:
        ValueError: the length is not a multiple of 5, a character is outside the alphabet, or a
            5-character group exceeds 2**32 - 1.
    """
    if len(text) % 5:
        raise ValueError(f"Z85 text length {len(text)} is not a multiple of 5")
    words: list[int] = []
    for start in range(0, len(text), 5):
        word = 0
        for ch in text[start : start + 5]:
            digit = _DECODE.get(ch)
            if digit is None:
                raise ValueError(f"invalid Z85 character {ch!r} at position {text.index(ch)}")
            word = word * 85 + digit
        if word > 0xFFFFFFFF:
            raise ValueError(f"Z85 group {text[start : start + 5]!r} exceeds 32 bits")
        words.append(word)
    return struct.pack(f">{len(words)}I", *words)
