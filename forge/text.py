"""Reading a text file a user handed over (a profile, a program): UTF-8 or a message that says where it is not.

    from forge.text import decode_utf8
    text = decode_utf8(path.read_bytes(), path)    # NotUTF8Error: "profile.yaml:3:7: not UTF-8 text (byte 0xff)"
"""

from __future__ import annotations

import os

from forge.errors import InputError


class NotUTF8Error(InputError):
    """A text file (a profile, a source file) holds bytes that are not UTF-8; the message says where."""


def decode_utf8(data: bytes, path: str | os.PathLike) -> str:
    """``data`` as text (a leading byte-order mark dropped), or :class:`NotUTF8Error` naming ``path``, the line
    and the column of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise NotUTF8Error(f"{path}:{line}:{column}: not UTF-8 text (byte 0x{data[err.start]:02x})") from None
