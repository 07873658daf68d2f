# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The fixed-order pass of fixed_order.py compiled, and the walk along critical paths of
causes.py: the same steps in the same order, so every end is the same double as the Python
loop's, and every path the same nodes.

The pass is one Python step per node of the joint graph (tens of thousands on a pipeline of
large classes), and the overlap optimize makes five of them; the walk is one step per node of
the critical paths, three times. Here each is one call. fixed_order.py and causes.py keep the
Python loops, used wherever this module is not built.
"""

import numpy as np
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


def walk_causes(const int64_t[::1] cause, ends):
    """causes.walk_causes on the causes as an int64 array (each in -2 .. n - 1): the same paths,
    as read-only int64 arrays, first node first; None if one reaches a tie (-2)."""
    cdef Py_ssize_t n = cause.shape[0], i, w
    cdef int64_t g
    path_of_a = np.full(n, -1, dtype=np.int64)
    at_a = np.zeros(n, dtype=np.int64)
    buf_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] path_of = path_of_a, at = at_a, buf = buf_a
    walked = []             # each path, its end first
    for w, end in enumerate(ends):
        g = end
        if g >= n:
            raise IndexError("a path's end is not a node")
        i = 0
        # each node is walked once over all paths, so a walk never holds more than n nodes
        while g >= 0 and path_of[g] < 0:
            path_of[g] = w
            at[g] = i
            buf[i] = g
            i += 1
            g = cause[g]
        if g == -2:
            return None
        if g >= 0:
            path = np.concatenate((buf_a[:i], walked[path_of[g]][at[g]:]))
        else:
            path = buf_a[:i].copy()
        path.flags.writeable = False
        walked.append(path)
    return [p[::-1] for p in walked]
