"""Values crossing the sandbox boundary as tagged JSON of plain Python values.

The same text runs inside the batch harness (prepended to ``_harness.py``) and here: arguments are encoded by
Forge and decoded by the submission's process, return values the other way. Only exact built-in types are
encoded (``type(x) is int``, never a subclass), so an object with an always-true ``__eq__`` or a lying
``__repr__`` cannot leave the sandbox; the decoder builds nothing but plain values.
"""

# This module must stay self-contained (no imports): its source text is shipped into the sandbox.


def encode(x, depth=0):
    if depth > 64:
        raise TypeError("value nested too deeply")
    t = type(x)
    if x is None or t is bool or t is int or t is str:
        return x
    if t is float:
        return x if abs(x) < float("inf") else {"$f": repr(x)}
    if t is list:
        return [encode(v, depth + 1) for v in x]
    if t is tuple:
        return {"$t": [encode(v, depth + 1) for v in x]}
    if t is set or t is frozenset:
        return {"$s": [encode(v, depth + 1) for v in x]}
    if isinstance(x, dict):
        # Counter, OrderedDict, defaultdict: their items cross as a plain dict (dict.items cannot be overridden
        # to lie, and the decoded value is a plain dict, so no subclass method ever runs outside)
        return {"$d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(x)]}
    if t is bytes:
        return {"$b": x.hex()}
    if t is complex:
        return {"$c": [x.real, x.imag]}
    raise TypeError(f"cannot return a {t.__name__} (only plain values cross the sandbox)")


def decode(x):
    if type(x) is list:
        return [decode(v) for v in x]
    if type(x) is dict:
        ((tag, v),) = x.items()
        if tag == "$t":
            return tuple(decode(e) for e in v)
        if tag == "$s":
            return {decode(e) for e in v}
        if tag == "$d":
            return {decode(k): decode(e) for k, e in v}
        if tag == "$f":
            return float(v)
        if tag == "$b":
            return bytes.fromhex(v)
        if tag == "$c":
            return complex(*v)
        raise ValueError(tag)
    return x
