"""The old method spelling of result totals that are now properties (``result.energy_pj()`` ->
``result.energy_pj``): :class:`OldCall` is a float that may still be called, once with a
:class:`DeprecationWarning` line per call site."""

from __future__ import annotations

import warnings


class OldCall(float):
    """A float (the property's value) that returns itself when called, warning that the call is deprecated."""

    __slots__ = ("_name",)

    def __new__(cls, value: float, name: str) -> OldCall:
        out = super().__new__(cls, value)
        out._name = name
        return out

    def __call__(self) -> float:
        warnings.warn(f"'{self._name}()' is deprecated, use '{self._name}' (a property)", DeprecationWarning,
                      stacklevel=2)
        return float(self)

    def __reduce__(self):  # pickles (Dask, multiprocessing) as a plain float
        return (float, (float(self),))
