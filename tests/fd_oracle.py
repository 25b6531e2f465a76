"""The tests' finite-difference oracle: central differences in plain numpy, written here and nowhere else.

Independent of ``symgrad.test_utils`` (whose numeric engine is under test): a test that needs a derivative
computed without symgrad's checkers takes it from ``central_gradient``. Central differences of a smooth function
have error O(eps^2) from truncation and O(u / eps) from rounding (u = 2^-53 of the function's values): about 1e-10
relative at the default eps = 1e-6 on float64 inputs of order 1.
"""

import numpy as np


def central_gradient(f, x, eps=1e-6) -> np.ndarray:
    """``d f / d x`` of the scalar function ``f`` at the float64 array ``x``: ``(f(x + eps e_i) - f(x - eps e_i)) /
    (2 eps)`` for every element ``i``."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g
