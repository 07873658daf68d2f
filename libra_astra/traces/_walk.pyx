# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""One pass over a batch of rank files (framing.py, wire.py and the block keys of _attr_keys.pyx,
compiled together).

The numpy reader frames every file with a Python loop over its length prefixes, and reads the
top-level fields of all messages in lockstep with one numpy call per field; on a 4,096-rank set
those fixed costs add up to more than the bytes' worth. Here each message is framed and walked
once, in the schema's field order, with the same rules: a field that does not fit its message,
a torn packed run, a varint of more than 10 bytes or a length of 2**62 or more marks the message
slow (the schema parses it), and a damaged frame (an empty or truncated file, a zero-length
message) gives None, so that the caller frames file by file and raises that file's error.

Attribute blocks are keyed as _attr_keys.pyx keys them (the block without the attributes whose
name says they are not wanted), and each plain block points to the first block of the batch with
the same key: only those are decoded. A block with the bytes of an earlier one (the one at the
same place in the previous file, else any, found by a hash) takes that block's pointer without
being keyed. batch.py falls back to the numpy path (framing.py, wire.py) wherever this module is
not built.
"""

import numpy as np
from libc.stdint cimport int64_t, uint64_t, uint8_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy
from cpython.bytes cimport PyBytes_AS_STRING

cdef uint64_t MAX_LEN = (<uint64_t>1) << 62     # no length is this long: the file is damaged

cdef enum Kind:
    K_ID = 0
    K_LEN = 1
    K_TYPE = 2
    K_DEPS = 3
    K_SKIP = 4
    K_DURATION = 5


cdef inline bint _varint(const uint8_t* a, int64_t pos, int64_t lim, uint64_t* out, int64_t* after) noexcept nogil:
    """The varint at pos, all of its (at most 10) bytes before lim."""
    cdef uint64_t v = 0
    cdef int k
    cdef uint8_t b
    for k in range(10):
        if pos >= lim:
            return False
        b = a[pos]
        pos += 1
        v |= (<uint64_t>(b & 0x7F)) << (7 * k)
        if b < 0x80:
            out[0] = v
            after[0] = pos
            return True
    return False


cdef inline uint64_t _mix(const uint8_t* p, int64_t n) noexcept nogil:
    cdef uint64_t h = 0x243F6A8885A308D3ULL ^ <uint64_t>n, w
    while n >= 8:
        memcpy(&w, p, 8)
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL
        h ^= h >> 29
        p += 8
        n -= 8
    w = 0
    if n:
        memcpy(&w, p, n)
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL
    h ^= h >> 32
    return h


cdef struct Grow:
    uint8_t* data
    int64_t used
    int64_t size


cdef inline bint _reserve(Grow* g, int64_t extra) noexcept nogil:
    cdef int64_t want = g.used + extra
    cdef int64_t size = g.size
    cdef uint8_t* d
    if want <= size:
        return True
    while size < want:
        size = size * 2 if size else 4096
    d = <uint8_t*>realloc(g.data, size)
    if d == NULL:
        return False
    g.data, g.size = d, size
    return True


cdef struct Table:
    # open addressing: the message of each slot (-1: free) and its hash; kept at most half full,
    # sized by the distinct blocks (a few thousand), not the messages, so that it stays in cache
    int64_t* idx
    uint64_t* hsh
    uint64_t mask
    uint64_t count


cdef bint _table_init(Table* t, uint64_t cap) noexcept nogil:
    cdef uint64_t q
    t.idx = <int64_t*>malloc(cap * sizeof(int64_t))
    t.hsh = <uint64_t*>malloc(cap * sizeof(uint64_t))
    t.mask, t.count = cap - 1, 0
    if t.idx == NULL or t.hsh == NULL:
        return False
    for q in range(cap):
        t.idx[q] = -1
    return True


cdef bint _table_add(Table* t, uint64_t slot, int64_t i, uint64_t h) noexcept nogil:
    """Fill the free ``slot`` with message i; doubles the table once it is half full."""
    cdef Table bigger
    cdef uint64_t q, r
    t.idx[slot], t.hsh[slot] = i, h
    t.count += 1
    if 2 * t.count <= t.mask + 1:
        return True
    if not _table_init(&bigger, 2 * (t.mask + 1)):
        free(bigger.idx)
        free(bigger.hsh)
        return False
    for q in range(t.mask + 1):
        if t.idx[q] >= 0:
            r = t.hsh[q] & bigger.mask
            while bigger.idx[r] >= 0:
                r = (r + 1) & bigger.mask
            bigger.idx[r], bigger.hsh[r] = t.idx[q], t.hsh[q]
    bigger.count = t.count
    free(t.idx)
    free(t.hsh)
    t[0] = bigger
    return True


def walk_batch(const uint8_t[::1] arr, const int64_t[::1] lo, const int64_t[::1] hi, bytes step_tags,
               bytes step_kinds, int t_attr, int t_metadata, tuple wanted):
    """Frame and walk the rank files ``arr[lo[f]:hi[f]]``; None if any file's framing is damaged.

    Returns (meta_body_start, meta_end per file, first message of each file (F + 1), header
    offsets, body starts, body ends, ids, types, durations, attribute-block starts, has_attr,
    slow, dependency message, dependency value, key_rep) with offsets into ``arr``; ``key_rep[i]``
    is the first message of the batch whose attribute block has message i's key (i itself when
    the block is not plain, the message is slow or has no attributes).
    """
    cdef Py_ssize_t nf = lo.shape[0], f, w, nw = len(wanted), nsteps = len(step_tags)
    cdef const uint8_t* a = &arr[0] if arr.shape[0] else NULL
    cdef const uint8_t* tags = <const uint8_t*>PyBytes_AS_STRING(step_tags)
    cdef const uint8_t* kinds = <const uint8_t*>PyBytes_AS_STRING(step_kinds)
    cdef int64_t pos, end, size, n = 0, i, s, e, cur, p, lim, q, plen, j, start, ln, aend, nl, klen
    cdef uint64_t v = 0, h, slot
    cdef int k
    cdef bint bad, plain, keep, found
    cdef int last
    cdef int step_of[256]          # step of each one-byte tag (wire._Tags.steps), -1: not walked
    cdef int64_t[::1] dfv
    cdef uint64_t[::1] dvv
    for k in range(256):
        step_of[k] = -1
    for k in range(nsteps):
        step_of[tags[k]] = k
    meta_s = np.empty(nf, dtype=np.int64)
    meta_e = np.empty(nf, dtype=np.int64)
    first = np.empty(nf + 1, dtype=np.int64)
    cdef int64_t[::1] ms = meta_s, me = meta_e, fi = first
    # pass 1: frames, counted and checked
    for f in range(nf):
        pos, end = lo[f], hi[f]
        if pos >= end or not _varint(a, pos, end, &v, &pos) or v >= MAX_LEN or <int64_t>v > end - pos:
            return None
        ms[f] = pos
        pos += <int64_t>v
        me[f] = pos
        fi[f] = n
        while pos < end:
            if not _varint(a, pos, end, &v, &pos) or v >= MAX_LEN or v == 0 or <int64_t>v > end - pos:
                return None
            pos += <int64_t>v
            n += 1
    fi[nf] = n
    heads_a = np.empty(n, dtype=np.int64)
    starts_a = np.empty(n, dtype=np.int64)
    ends_a = np.empty(n, dtype=np.int64)
    ids_a = np.zeros(n, dtype=np.uint64)
    types_a = np.zeros(n, dtype=np.int64)
    durs_a = np.zeros(n, dtype=np.uint64)
    attr_a = np.empty(n, dtype=np.int64)
    has_a = np.zeros(n, dtype=np.bool_)
    slow_a = np.zeros(n, dtype=np.bool_)
    rep_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] hd = heads_a, st = starts_a, en = ends_a, ty = types_a, at = attr_a, rep = rep_a
    cdef uint64_t[::1] ids = ids_a, du = durs_a
    cdef uint8_t[::1] has = has_a.view(np.uint8), slw = slow_a.view(np.uint8)
    # dependency (message, value) pairs, and the attribute keys of the first block of each key
    cdef Grow dm, dv, arena, scratch
    dm.data = NULL; dm.used = 0; dm.size = 0
    dv.data = NULL; dv.used = 0; dv.size = 0
    arena.data = NULL; arena.used = 0; arena.size = 0
    scratch.data = NULL; scratch.used = 0; scratch.size = 0
    cdef Table keys, raws      # blocks by their key; by their bytes
    keys.idx = keys.hsh = raws.idx = raws.hsh = NULL
    cdef int64_t* koff = <int64_t*>malloc((n + 1) * sizeof(int64_t))     # key of a first block: arena range
    cdef int64_t* klen_of = <int64_t*>malloc((n + 1) * sizeof(int64_t))
    cdef Py_ssize_t* wlen = <Py_ssize_t*>malloc((nw + 1) * sizeof(Py_ssize_t))
    cdef const uint8_t** wptr = <const uint8_t**>malloc((nw + 1) * sizeof(uint8_t*))
    if (not _table_init(&keys, 1024) or not _table_init(&raws, 1024) or koff == NULL or klen_of == NULL
            or wlen == NULL or wptr == NULL):
        free(keys.idx); free(keys.hsh); free(raws.idx); free(raws.hsh)
        free(koff); free(klen_of); free(wlen); free(wptr)
        raise MemoryError()
    for w in range(nw):
        wlen[w] = len(wanted[w])
        wptr[w] = <const uint8_t*>PyBytes_AS_STRING(wanted[w])
    try:
        i = 0
        for f in range(nf):
            pos, end = me[f], hi[f]
            while pos < end:
                hd[i] = pos
                _varint(a, pos, end, &v, &pos)
                s, e = pos, pos + <int64_t>v
                st[i], en[i] = s, e
                pos = e
                # the top-level fields, in the schema's field order (wire._walk)
                cur, bad, last = s, False, -1
                while cur < e:
                    k = step_of[a[cur]]
                    if k <= last:          # not a walked field, or out of order: left for the schema
                        break
                    last = k
                    if not _varint(a, cur + 1, e, &v, &p):
                        bad = True
                        break
                    if kinds[k] == K_LEN or kinds[k] == K_DEPS:
                        if v >= MAX_LEN or <int64_t>v > e - p:
                            bad = True
                            break
                        p += <int64_t>v
                    cur = p
                    if kinds[k] == K_DEPS:
                        plen = <int64_t>v
                        if plen == 0:
                            continue
                        if a[p - 1] >= 0x80:       # torn: the run ends inside a varint
                            bad = True
                            break
                        q = p - plen
                        while q < p:
                            if not _varint(a, q, p, &v, &q):
                                bad = True
                                break
                            if dm.used + 8 > dm.size and (not _reserve(&dm, 8) or not _reserve(&dv, 8)):
                                raise MemoryError()
                            memcpy(dm.data + dm.used, &i, 8)
                            memcpy(dv.data + dv.used, &v, 8)
                            dm.used += 8
                            dv.used += 8
                        if bad:
                            break
                    elif kinds[k] == K_ID:
                        ids[i] = v
                    elif kinds[k] == K_TYPE:
                        ty[i] = <int64_t>v
                    elif kinds[k] == K_DURATION:
                        du[i] = v
                at[i] = cur
                rep[i] = i
                if not bad and cur < e:
                    if a[cur] == t_attr:
                        has[i] = 1
                    else:
                        bad = True
                if bad:
                    slw[i] = 1
                if not has[i] or bad or ty[i] == t_metadata:
                    i += 1
                    continue
                # rank files of a job repeat each other: the message at the same place in the
                # previous file, with the same block bytes, settles it without hashing
                j = i - fi[f] + fi[f - 1] if f else -1
                if 0 <= j < fi[f] and has[j] and not slw[j] and ty[j] != t_metadata and \
                        en[j] - at[j] == e - cur and memcmp(a + at[j], a + cur, e - cur) == 0:
                    rep[i] = rep[j]
                    i += 1
                    continue
                # a block with the bytes of an earlier one takes its rep: most blocks repeat exactly
                h = _mix(a + cur, e - cur)
                slot = h & raws.mask
                found = False
                while True:
                    j = raws.idx[slot]
                    if j < 0:
                        if not _table_add(&raws, slot, i, h):
                            raise MemoryError()
                        break
                    if raws.hsh[slot] == h and en[j] - at[j] == e - cur and memcmp(a + at[j], a + cur, e - cur) == 0:
                        rep[i] = rep[j]
                        found = True
                        break
                    slot = (slot + 1) & raws.mask
                if found:
                    i += 1
                    continue
                # the block's key: its attributes but the unwanted ones (_attr_keys.block_ids)
                q, klen, plain = cur, 0, True
                if not _reserve(&scratch, e - cur):
                    raise MemoryError()
                while q < e:
                    start = q
                    if a[q] != t_attr or q + 1 >= e:
                        plain = False
                        break
                    ln = a[q + 1]
                    q += 2
                    if ln >= 0x80:
                        if q >= e or a[q] >= 0x80:
                            plain = False
                            break
                        ln = (ln & 0x7F) | (<int64_t>a[q] << 7)
                        q += 1
                    aend = q + ln
                    if aend > e:
                        plain = False
                        break
                    keep = True
                    if ln >= 2 and a[q] == 0x0A and a[q + 1] < 0x80 and 2 + a[q + 1] <= ln:
                        nl = a[q + 1]
                        keep = False
                        for w in range(nw):
                            if wlen[w] == nl and memcmp(wptr[w], &a[q + 2], nl) == 0:
                                keep = True
                                break
                    if keep:
                        memcpy(scratch.data + klen, &a[start], aend - start)
                        klen += aend - start
                    q = aend
                if plain:
                    h = _mix(scratch.data, klen)
                    slot = h & keys.mask
                    while True:
                        j = keys.idx[slot]
                        if j < 0:
                            if not _reserve(&arena, klen):
                                raise MemoryError()
                            memcpy(arena.data + arena.used, scratch.data, klen)
                            koff[i], klen_of[i] = arena.used, klen
                            arena.used += klen
                            if not _table_add(&keys, slot, i, h):
                                raise MemoryError()
                            break
                        if keys.hsh[slot] == h and klen_of[j] == klen and \
                                memcmp(arena.data + koff[j], scratch.data, klen) == 0:
                            rep[i] = j
                            break
                        slot = (slot + 1) & keys.mask
                i += 1
        m = dm.used // 8
        dep_frame = np.empty(m, dtype=np.int64)
        dep_vals = np.empty(m, dtype=np.uint64)
        if m:
            dfv = dep_frame
            dvv = dep_vals
            memcpy(&dfv[0], dm.data, dm.used)
            memcpy(&dvv[0], dv.data, dv.used)
    finally:
        free(keys.idx); free(keys.hsh); free(raws.idx); free(raws.hsh)
        free(koff); free(klen_of); free(wlen); free(wptr)
        free(dm.data); free(dv.data); free(arena.data); free(scratch.data)
    return (meta_s, meta_e, first, heads_a, starts_a, ends_a, ids_a, types_a, durs_a, attr_a, has_a, slow_a,
            dep_frame, dep_vals, rep_a)
