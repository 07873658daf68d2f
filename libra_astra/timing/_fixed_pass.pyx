# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The fixed-order pass of fixed_order.py compiled: the same steps, one addition and one maximum
each, in the same order, so every end is the same double as the Python loop's.

The pass is one Python step per node of the joint graph (tens of thousands on a pipeline of
large classes), and the overlap optimize makes five of them; here a pass is one call.
fixed_order.py keeps the Python loop, used wherever this module is not built.
"""

from libc.stdint cimport int64_t


def longest_paths(const int64_t[::1] order, const int64_t[::1] first, const int64_t[::1] second,
                  double[::1] ends):
    """Each step g = order[i] adds to ends[g] (its duration until then) the larger of
    ends[first[i]] and ends[second[i]] (the first where they are equal), in place."""
    cdef Py_ssize_t i, n = order.shape[0]
    cdef double x, y
    if first.shape[0] != n or second.shape[0] != n:
        raise ValueError("a step without its two inputs")
    with nogil:
        for i in range(n):
            x = ends[first[i]]
            y = ends[second[i]]
            if y > x:
                x = y
            ends[order[i]] += x
