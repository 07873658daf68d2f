# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Attribute ids of many attribute blocks in one call (attr_blocks.py's AttrBlocks.ids, compiled).

Generated traces give every send and receive a unique comm_tag, so nearly every block is
distinct while the attributes that matter repeat: each block is keyed here by its bytes without
the attributes whose name says they are not wanted (the check AttrBlocks.single makes first),
and a block whose key was seen before takes that block's id. The first block of each key is
decoded by the caller's function, block by block in node order, so ids (rows interned in
first-seen order) and errors are those of the per-block decode. attr_blocks.py keeps the numpy
version, used wherever this module is not built.
"""

import numpy as np
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize


def block_ids(const uint8_t[::1] arr, const int64_t[::1] bs, const int64_t[::1] be, int t_attr,
              tuple wanted, dict memo, Py_ssize_t memo_limit, object decode, object lookup):
    """Attribute id of each block ``arr[bs[j]:be[j]]``, in node order.

    ``wanted``: the wanted attribute names (bytes); ``memo``: key -> id, kept across calls;
    ``decode(j, key)``: the id of block j, first of its key (-1: the node needs the schema's
    parse); ``lookup(j)``: the id of block j when it is not plain (a tag other than attr, a
    length of 3+ bytes, a torn attribute), which the caller decodes as a whole.
    """
    cdef Py_ssize_t m = bs.shape[0], j, w, nw = len(wanted)
    cdef int64_t pos, end, start, ln, b2, aend, nl, klen, longest = 0
    cdef bint plain, keep
    cdef const uint8_t* name
    cdef uint8_t* buf
    out = np.empty(m, dtype=np.int64)
    cdef int64_t[::1] ids = out
    cdef Py_ssize_t* wlen = <Py_ssize_t*>malloc((nw + 1) * sizeof(Py_ssize_t))
    cdef const char** wptr = <const char**>malloc((nw + 1) * sizeof(char*))
    for w in range(nw):
        wlen[w] = len(wanted[w])
        wptr[w] = PyBytes_AS_STRING(wanted[w])
    for j in range(m):
        if be[j] - bs[j] > longest:
            longest = be[j] - bs[j]
    buf = <uint8_t*>malloc(longest + 1)
    try:
        for j in range(m):
            pos, end, klen, plain = bs[j], be[j], 0, True
            while pos < end:
                start = pos
                if arr[pos] != t_attr or pos + 1 >= end:
                    plain = False
                    break
                ln = arr[pos + 1]
                pos += 2
                if ln >= 0x80:
                    if pos >= end:
                        plain = False
                        break
                    b2 = arr[pos]
                    if b2 >= 0x80:
                        plain = False
                        break
                    ln = (ln & 0x7F) | (b2 << 7)
                    pos += 1
                aend = pos + ln
                if aend > end:
                    plain = False
                    break
                # the name first (field 1), short: dropped unless wanted, as AttrBlocks.single decides
                keep = True
                if ln >= 2 and arr[pos] == 0x0A and arr[pos + 1] < 0x80 and 2 + arr[pos + 1] <= ln:
                    nl = arr[pos + 1]
                    name = &arr[pos + 2]
                    keep = False
                    for w in range(nw):
                        if wlen[w] == nl and memcmp(wptr[w], name, nl) == 0:
                            keep = True
                            break
                if keep:
                    memcpy(buf + klen, &arr[start], aend - start)
                    klen += aend - start
                pos = aend
            if not plain:
                ids[j] = lookup(j)
                continue
            key = PyBytes_FromStringAndSize(<char*>buf, klen)
            got = memo.get(key)
            if got is None:
                got = decode(j, key)
                if got >= 0 and len(memo) < memo_limit:
                    memo[key] = got
            ids[j] = got
    finally:
        free(buf)
        free(wlen)
        free(wptr)
    return out
