# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Newton system of solver._Newton compiled: the same elimination of the term variables and
the same cancellation-free sums, as loops over the rows.

On LIBRA-size problems (hundreds of rows, a dozen coordinates) numpy's per-call cost, not the
arithmetic, set the time of a Newton step: about 25 array operations for a system and 15 for
each direction. Here a system is one call and a direction another. Each term's rows are summed
over the term's own columns only (one per row on LIBRA's rows), and the equalities' null-space
basis Z = diag(Zx, I) is applied by blocks. solver.py keeps the numpy version, used wherever
this module is not built.
"""

import numpy as np
from libc.math cimport fabs
from libc.stdint cimport int64_t


cdef struct Rows:
    # The row structure the loops walk, as one value: copied into a local, its pointers stay in
    # registers across the loops' stores.
    const int64_t* row_end      # (K,) one past each term's last row
    const int64_t* term_end     # (Q,) one past each class's last term
    const int64_t* cls          # (K,) each term's class
    const int64_t* J            # (nv,) the used coordinates
    const int64_t* sup_ptr      # (K + 1,) each term's columns: sup_idx[sup_ptr[k]:sup_ptr[k + 1]]
    const int64_t* sup_idx
    const int64_t* one_col      # (M,) a row's one nonzero column, or -1
    const int64_t* row_pos      # (M,) ... and its place among its term's columns
    const signed char* simple   # (K,) every row of the term has one nonzero, in distinct columns


cdef class Structure:
    """The constants of one problem's layout the kernel reads, as contiguous arrays."""
    cdef int M, Q, P, n, nv, N, K, rx, R
    cdef bint has_z
    cdef object _keep           # the arrays the pointers below point into
    cdef object Z               # the layout's null-space basis diag(Zx, I), or None
    cdef const double* AJ       # (M, nv)
    cdef Rows rows
    cdef const double* BL0      # (R, N)
    cdef const double* cX       # (N,)
    cdef const double* Zx       # (n, rx)
    cdef const double* P_E      # (n, n)

    def __init__(self, lay, p):
        self.M, self.Q, self.P, self.n, self.nv, self.N, self.K = lay.M, lay.Q, lay.P, lay.n, lay.nv, lay.N, lay.K
        self.R = self.Q + self.P + self.nv
        AJ = np.ascontiguousarray(lay.AJ, dtype=np.float64)
        row_end = np.ascontiguousarray(np.append(lay.row_start[1:], lay.M), dtype=np.int64)
        term_end = np.ascontiguousarray(np.append(lay.term_start[1:], lay.K), dtype=np.int64)
        cls = np.ascontiguousarray(p.term_class, dtype=np.int64)
        J = np.ascontiguousarray(lay.J, dtype=np.int64)
        sup_ptr, sup_idx, one_col, row_pos, simple = _columns(AJ, row_end)
        BL0 = np.ascontiguousarray(lay.BL0, dtype=np.float64)
        cX = np.ascontiguousarray(lay.cX, dtype=np.float64)
        self.has_z = lay.Z is not None
        if self.has_z:
            Zx = np.ascontiguousarray(lay.Z[:self.n, :lay.Z.shape[1] - self.nv])
            P_E = np.ascontiguousarray(lay.P_E, dtype=np.float64)
            self.rx = Zx.shape[1]
        else:
            Zx = P_E = np.zeros(1)
            self.rx = self.n
        self.Z = lay.Z
        self._keep = (AJ, row_end, term_end, cls, J, sup_ptr, sup_idx, BL0, cX, Zx, P_E, one_col, simple, row_pos)
        self.AJ, self.BL0, self.cX, self.Zx, self.P_E = _dptr(AJ), _dptr(BL0), _dptr(cX), _dptr(Zx), _dptr(P_E)
        self.rows.row_end, self.rows.term_end = _lptr(row_end), _lptr(term_end)
        self.rows.cls, self.rows.J = _lptr(cls), _lptr(J)
        self.rows.sup_ptr, self.rows.sup_idx = _lptr(sup_ptr), _lptr(sup_idx)
        self.rows.one_col, self.rows.row_pos = _lptr(one_col), _lptr(row_pos)
        cdef const signed char[::1] sv = simple if simple.shape[0] else np.zeros(1, np.int8)
        self.rows.simple = &sv[0]


def _columns(const double[:, ::1] AJ, const int64_t[::1] row_end):
    """Per term, the columns its rows use (sup_ptr, sup_idx: ascending); per row, its one
    nonzero column or -1 (one_col) and that column's place among its term's (row_pos); per term,
    whether every row has one nonzero, in distinct columns (simple). One pass over the rows."""
    cdef int M = AJ.shape[0], nv = AJ.shape[1], K = row_end.shape[0]
    sup_ptr = np.zeros(K + 1, dtype=np.int64)
    sup_idx = np.empty(min(K, M) * nv, dtype=np.int64)
    one_col = np.full(M, -1, dtype=np.int64)
    row_pos = np.zeros(M, dtype=np.int64)
    simple = np.zeros(K, dtype=np.int8)
    mark_arr = np.zeros(max(nv, 1), dtype=np.int64)
    cdef int64_t[::1] sp = sup_ptr, si = sup_idx, oc = one_col, rp = row_pos, mark = mark_arr
    cdef signed char[::1] sm = simple
    cdef int k, m, a, m0 = 0, cnt = 0, start, nnz, last
    cdef bint all_single
    for k in range(K):
        all_single = True
        for m in range(m0, <int>row_end[k]):
            nnz = 0
            last = -1
            for a in range(nv):
                if AJ[m, a] != 0.0:
                    nnz += 1
                    last = a
                    mark[a] = 1
            if nnz == 1:
                oc[m] = last
            else:
                all_single = False
        start = cnt
        for a in range(nv):
            if mark[a]:
                si[cnt] = a
                mark[a] = cnt - start + 1          # the place, plus 1 (0: unused)
                cnt += 1
        sp[k + 1] = cnt
        for m in range(m0, <int>row_end[k]):
            if oc[m] >= 0:
                rp[m] = mark[oc[m]] - 1
        sm[k] = all_single and cnt - start == <int>row_end[k] - m0
        for a in range(nv):
            mark[a] = 0
        m0 = <int>row_end[k]
    return sup_ptr, sup_idx[:cnt].copy(), one_col, row_pos, simple


cdef const double* _dptr(a):
    cdef const double[::1] view = a.reshape(-1)
    return &view[0] if view.shape[0] else NULL


cdef const int64_t* _lptr(a):
    cdef const int64_t[::1] view = a.reshape(-1)
    return &view[0] if view.shape[0] else NULL


cdef class System:
    """solver._Newton's system at one iterate (same attributes d and xJ, same direction())."""
    cdef Structure s
    cdef public object d, xJ
    cdef object _ws
    cdef double* D          # (K,) each term's sum of its rows' d
    cdef double* wD         # (K,)
    cdef double* beta       # (Q,)
    cdef double* qbar       # each term's weighted mean gradient on its own columns (sup_ptr layout)
    cdef double* BL         # (R, N)
    cdef double* LU         # (r, r) the reduced system, factored
    cdef int64_t* piv
    cdef object Hinv        # pseudo-inverse where the factorization met a zero pivot, else None
    cdef int h_off          # where H starts in the workspace

    def __init__(self, Structure s, x, v, u, y):
        cdef int M = s.M, Q = s.Q, P = s.P, n = s.n, nv = s.nv, N = s.N, K = s.K, R = s.R
        cdef int o_rho = M + Q, o_phi = M + Q + P, m_all = o_phi + nv
        cdef int r = s.rx + nv
        cdef const double[::1] uu = u, yy = y, vv = v, xx = x
        cdef int i, k, q, j, a, b, m, c, rr, ia, ib, ns, m0, nnz
        cdef double acc, dm, w, sa
        cdef Rows rw = s.rows
        self.s = s
        # One workspace: d, xJ, D, wD, beta, qbar, BL, H, LU, the pivots, scratch.
        cdef int S = <int>rw.sup_ptr[K]
        cdef int total = m_all + nv + 2 * K + Q + S + R * N + N * N + r * r + r + 2 * N + n * s.rx
        ws = np.zeros(total)
        self._ws = ws
        cdef double[::1] wsv = ws
        cdef double* d = &wsv[0]
        cdef double* xJ = d + m_all
        cdef double* D = xJ + nv
        cdef double* wD = D + K
        cdef double* beta = wD + K
        cdef double* qbar = beta + Q
        cdef double* BL = qbar + S
        cdef double* H = BL + R * N
        cdef double* L = H + N * N
        cdef double* pivd = L + r * r        # pivots, stored as int64 in the doubles' place
        cdef double* dev = pivd + r           # (N,) scratch: a row's deviations ...
        cdef double* nzs = dev + N            # ... a row of BL's nonzero columns (as int64)
        cdef double* T = nzs + N              # (n, rx) Hxx Zx
        cdef int64_t* nz = <int64_t*> nzs
        self.d, self.xJ = ws[:m_all], ws[m_all:m_all + nv]
        self.D, self.wD, self.beta, self.qbar, self.BL, self.LU = D, wD, beta, qbar, BL, L
        self.piv = <int64_t*> pivd
        self.h_off = m_all + nv + 2 * K + Q + S + R * N
        cdef const double* AJ = s.AJ
        cdef const int64_t* sup
        cdef double* qk
        for i in range(m_all):
            d[i] = uu[i] / yy[i]
        for j in range(nv):
            xJ[j] = xx[rw.J[j]]
        # Each term's mean gradient over its rows (weights d), on its own columns.
        m0 = 0
        for k in range(K):
            acc = 0.0
            for m in range(m0, rw.row_end[k]):
                acc += d[m]
            D[k] = acc
            wD[k] = 1.0 / acc
            qk = qbar + rw.sup_ptr[k]
            if rw.row_end[k] - m0 == 1:
                # one row (the unmergeable families' every term): its own gradient is the mean
                sup = rw.sup_idx + rw.sup_ptr[k]
                for ia in range(<int>(rw.sup_ptr[k + 1] - rw.sup_ptr[k])):
                    qk[ia] = -AJ[m0 * nv + sup[ia]]
            elif rw.simple[k]:
                for m in range(m0, rw.row_end[k]):
                    qk[rw.row_pos[m]] = -AJ[m * nv + rw.one_col[m]] * d[m] / acc
            else:
                sup = rw.sup_idx + rw.sup_ptr[k]
                ns = <int>(rw.sup_ptr[k + 1] - rw.sup_ptr[k])
                for m in range(m0, rw.row_end[k]):
                    dm = d[m]
                    for ia in range(ns):
                        qk[ia] -= AJ[m * nv + sup[ia]] * dm
                for ia in range(ns):
                    qk[ia] /= acc
            m0 = rw.row_end[k]
        for i in range(R * N):
            BL[i] = s.BL0[i]
        k = 0
        for q in range(Q):
            acc = 0.0
            while k < rw.term_end[q]:
                acc += wD[k]
                for i in range(<int>rw.sup_ptr[k], <int>rw.sup_ptr[k + 1]):
                    BL[q * N + n + rw.sup_idx[i]] += qbar[i]
                k += 1
            beta[q] = d[M + q] / (1.0 + d[M + q] * acc)
        for j in range(nv):
            BL[(Q + P + j) * N + rw.J[j]] = vv[j]
            BL[(Q + P + j) * N + n + j] = xJ[j]
        # H = BL^T diag(beta, d[o_rho:]) BL (upper triangle, nonzeros only) ...
        for rr in range(R):
            w = beta[rr] if rr < Q else d[o_rho + rr - Q]
            nnz = 0
            for c in range(N):
                if BL[rr * N + c] != 0.0:
                    nz[nnz] = c
                    nnz += 1
            for ia in range(nnz):
                a = <int>nz[ia]
                acc = w * BL[rr * N + a]
                for ib in range(ia, nnz):
                    b = <int>nz[ib]
                    H[a * N + b] += acc * BL[rr * N + b]
        # ... plus each term's weighted covariance of its rows' gradients around their mean,
        # sum_m d_m (q_m - qbar_k)(q_m - qbar_k)^T, on the term's columns. With one nonzero per
        # row, in distinct columns (LIBRA's rows), it is -s_a s_b / D_k off the diagonal and
        # s_a A_a (D_k - d_a) / D_k on it (s_a = d_a A_a), D_k - d_a summed over the other rows:
        # products and sums of positive numbers, nothing cancels.
        m0 = 0
        for k in range(K):
            if rw.row_end[k] - m0 == 1:
                pass                                  # one row: no deviation from the mean
            elif rw.simple[k]:
                ns = <int>(rw.row_end[k] - m0)
                # dev: s_a; (D - d_a) from the running sums on both sides
                acc = 0.0
                for ia in range(ns):
                    dev[ia] = acc                     # sum of d before row ia
                    acc += d[m0 + ia]
                acc = 0.0
                for ia in range(ns - 1, -1, -1):
                    m = m0 + ia
                    c = <int>rw.one_col[m]
                    sa = AJ[m * nv + c]
                    H[(n + c) * N + n + c] += d[m] * sa * sa * (dev[ia] + acc) * wD[k]
                    acc += d[m]
                for ia in range(ns):
                    m = m0 + ia
                    c = <int>rw.one_col[m]
                    sa = d[m] * AJ[m * nv + c] * wD[k]
                    for ib in range(ia + 1, ns):
                        b = <int>rw.one_col[m0 + ib]
                        if b < c:
                            H[(n + b) * N + n + c] -= sa * d[m0 + ib] * AJ[(m0 + ib) * nv + b]
                        else:
                            H[(n + c) * N + n + b] -= sa * d[m0 + ib] * AJ[(m0 + ib) * nv + b]
            else:
                sup = rw.sup_idx + rw.sup_ptr[k]
                ns = <int>(rw.sup_ptr[k + 1] - rw.sup_ptr[k])
                for m in range(m0, rw.row_end[k]):
                    dm = d[m]
                    for ia in range(ns):
                        a = sup[ia]
                        dev[ia] = -AJ[m * nv + a] - qbar[rw.sup_ptr[k] + ia]
                    for ia in range(ns):
                        acc = dm * dev[ia]
                        a = n + sup[ia]
                        for ib in range(ia, ns):
                            H[a * N + n + sup[ib]] += acc * dev[ib]
            m0 = rw.row_end[k]
        for a in range(N):
            for b in range(a):
                H[a * N + b] = H[b * N + a]
        # less kappa on the (x_j, v_j) off-diagonals
        for j in range(nv):
            H[rw.J[j] * N + n + j] -= uu[o_phi + j]
            H[(n + j) * N + rw.J[j]] -= uu[o_phi + j]
        self._reduce(H, T)
        if not _lu(L, self.piv, r):
            self.Hinv = np.linalg.pinv(self._reduced(ws[self.h_off:self.h_off + N * N].reshape(N, N)))
        else:
            self.Hinv = None

    cdef void _reduce(self, double* H, double* T):
        """LU <- Z^T H Z with Z = diag(Zx, I): [[Zx^T Hxx Zx, Zx^T Hxv], [Hvx Zx, Hvv]]."""
        cdef Structure s = self.s
        cdef int n = s.n, nv = s.nv, N = s.N, rx = s.rx, r = rx + nv
        cdef int a, b, c
        cdef double acc
        cdef double* L = self.LU
        if not s.has_z:
            for a in range(N * N):
                L[a] = H[a]
            return
        cdef const double* Zx = s.Zx
        for a in range(n):               # T = Hxx Zx, a row at a time: Zx^T H[a, :n]
            _mv(Zx, rx, n, 1, rx, H + a * N, T + a * rx)
        for a in range(rx):
            for b in range(rx):          # Zx^T Hxx Zx
                acc = 0.0
                for c in range(n):
                    acc += Zx[c * rx + a] * T[c * rx + b]
                L[a * r + b] = acc
            for b in range(nv):          # Zx^T Hxv
                acc = 0.0
                for c in range(n):
                    acc += Zx[c * rx + a] * H[c * N + n + b]
                L[a * r + rx + b] = acc
                L[(rx + b) * r + a] = acc
        for a in range(nv):
            for b in range(nv):
                L[(rx + a) * r + rx + b] = H[(n + a) * N + n + b]

    def _reduced(self, H):
        Z = self.s.Z
        return H if Z is None else Z.T @ H @ Z

    def direction(self, yc, bint with_dt=True):
        """Step for the gradient c - sum_i yc_i grad y_i (yc None means 0), as _Newton.direction."""
        cdef Structure s = self.s
        cdef int M = s.M, Q = s.Q, P = s.P, n = s.n, nv = s.nv, N = s.N, K = s.K, R = s.R
        cdef int rx = s.rx, r = rx + nv, o_rho = M + Q
        cdef int i, k, q, a, m, c, rr, ia, ns, m0
        cdef double acc, t, dm
        cdef Rows rw = s.rows
        cdef const double* Dl = self.D
        cdef const double* wDl = self.wD
        cdef const double* betal = self.beta
        cdef const double* Zx = s.Zx
        cdef const double* PE = s.P_E
        cdef const double* cX = s.cX
        cdef const double* y = NULL
        cdef const double[::1] ycv
        cdef const int64_t* sup
        cdef double* qbar = self.qbar
        cdef double* BL = self.BL
        cdef const double* AJ = s.AJ
        out = np.empty(N + K + (M + R) + (K if with_dt else 0))
        work = np.zeros(K + Q + R + N + r + n + R)
        cdef double[::1] ov = out, wv = work
        cdef double* dX = &ov[0]
        cdef double* tau = dX + N
        cdef double* dy = tau + K
        cdef double* dt = dy + M + R
        cdef double* gt_D = &wv[0]
        cdef double* wg = gt_D + K
        cdef double* coef = wg + Q
        cdef double* rhs = coef + R
        cdef double* red = rhs + N
        cdef double* tmp = red + r
        cdef double* bd = tmp + n
        if yc is None:
            for c in range(N):
                rhs[c] = -cX[c]
        else:
            ycv = yc
            y = &ycv[0]
            m0 = 0
            for k in range(K):
                acc = 0.0
                for m in range(m0, rw.row_end[k]):
                    acc += y[m]
                m0 = rw.row_end[k]
                gt_D[k] = (y[M + rw.cls[k]] - acc) / Dl[k]
            k = 0
            for q in range(Q):
                acc = 0.0
                while k < rw.term_end[q]:
                    acc += gt_D[k]
                    k += 1
                wg[q] = acc
            for rr in range(R):
                coef[rr] = (y[M + rr] - betal[rr] * wg[rr]) if rr < Q else y[o_rho + rr - Q]
            for c in range(N):
                rhs[c] = -cX[c]
            for rr in range(R):
                t = coef[rr]
                if t != 0.0:
                    for c in range(N):
                        rhs[c] += BL[rr * N + c] * t
            # + sum_m ys_m (q_m - qbar_k): a row's own gradient, then its term's mean once per term
            m0 = 0
            for k in range(K):
                if rw.row_end[k] - m0 == 1:
                    m0 += 1                           # one row: q_m - qbar_k = 0
                    continue
                sup = rw.sup_idx + rw.sup_ptr[k]
                ns = <int>(rw.sup_ptr[k + 1] - rw.sup_ptr[k])
                acc = 0.0
                for m in range(m0, rw.row_end[k]):
                    t = y[m]
                    acc += t
                    if rw.one_col[m] >= 0:
                        a = <int>rw.one_col[m]
                        rhs[n + a] -= AJ[m * nv + a] * t
                    else:
                        for ia in range(ns):
                            a = sup[ia]
                            rhs[n + a] -= AJ[m * nv + a] * t
                for ia in range(ns):
                    a = sup[ia]
                    rhs[n + a] -= qbar[rw.sup_ptr[k] + ia] * acc
                m0 = rw.row_end[k]
        # dX = Z (Z^T H Z)^-1 Z^T rhs
        if s.has_z:
            _mv(Zx, rx, n, 1, rx, rhs, red)
            for i in range(nv):
                red[rx + i] = rhs[n + i]
        else:
            for i in range(N):
                red[i] = rhs[i]
        if self.Hinv is None:
            _lu_solve(self.LU, self.piv, red, r)
        else:
            sol = self.Hinv @ np.asarray(<double[:r]> red)
            for i in range(r):
                red[i] = sol[i]
        if s.has_z:
            _mv(Zx, n, rx, rx, 1, red, tmp)
            # Round-off of the reduced system across the equalities removed, as _Newton does.
            _mv(PE, n, n, n, 1, tmp, dX)
            for i in range(nv):
                dX[n + i] = red[rx + i]
        else:
            for i in range(N):
                dX[i] = red[i]
        _mv(BL, R, N, N, 1, dX, bd)
        for k in range(K):
            q = rw.cls[k]
            tau[k] = wDl[k] * (betal[q] * (bd[q] + wg[q])) - gt_D[k]
        # dt_k = tau_k - qbar_k . dv; the rows' slacks change by dv . (q_m - qbar_k) + tau_k
        m0 = 0
        for k in range(K):
            sup = rw.sup_idx + rw.sup_ptr[k]
            ns = <int>(rw.sup_ptr[k + 1] - rw.sup_ptr[k])
            acc = 0.0
            for ia in range(ns):
                a = sup[ia]
                acc += dX[n + a] * qbar[rw.sup_ptr[k] + ia]
            if with_dt:
                dt[k] = tau[k] - acc
            if rw.row_end[k] - m0 == 1:
                dy[m0] = tau[k]                       # one row: q_m - qbar_k = 0
                m0 += 1
                continue
            t = tau[k] - acc
            for m in range(m0, rw.row_end[k]):
                if rw.one_col[m] >= 0:
                    a = <int>rw.one_col[m]
                    dy[m] = t - dX[n + a] * AJ[m * nv + a]
                else:
                    dm = 0.0
                    for ia in range(ns):
                        a = sup[ia]
                        dm -= dX[n + a] * AJ[m * nv + a]
                    dy[m] = t + dm
            m0 = rw.row_end[k]
        k = 0
        for q in range(Q):
            acc = 0.0
            while k < rw.term_end[q]:
                acc += tau[k]
                k += 1
            dy[M + q] = bd[q] - acc
        for rr in range(Q, R):
            dy[M + rr] = bd[rr]
        return (out[:n], out[n:N], out[N + K + M + R:] if with_dt else None, out[N + K:N + K + M + R])


cdef void _mv(const double* A, int rows, int cols, int rs, int cs, const double* x, double* out):
    """out = A x, A's entry (i, j) at A[i * rs + j * cs] (rs = cols, cs = 1 for a row-major A;
    rs = 1, cs = its row length for the transpose of one)."""
    cdef int i, j
    cdef double acc
    for i in range(rows):
        acc = 0.0
        for j in range(cols):
            acc += A[i * rs + j * cs] * x[j]
        out[i] = acc


cdef bint _lu(double* A, int64_t* piv, int r):
    """LU with partial pivoting in place; False at a zero pivot."""
    cdef int i, j, k, p
    cdef double big, t
    for k in range(r):
        p = k
        big = fabs(A[k * r + k])
        for i in range(k + 1, r):
            if fabs(A[i * r + k]) > big:
                big = fabs(A[i * r + k])
                p = i
        piv[k] = p
        if big == 0.0:
            return False
        if p != k:
            for j in range(r):
                t = A[k * r + j]; A[k * r + j] = A[p * r + j]; A[p * r + j] = t
        for i in range(k + 1, r):
            A[i * r + k] /= A[k * r + k]
            t = A[i * r + k]
            if t != 0.0:
                for j in range(k + 1, r):
                    A[i * r + j] -= t * A[k * r + j]
    return True


cdef void _lu_solve(const double* A, const int64_t* piv, double* b, int r):
    cdef int i, j, p
    cdef double t
    for i in range(r):
        p = piv[i]
        if p != i:
            t = b[i]; b[i] = b[p]; b[p] = t
    for i in range(r):
        t = b[i]
        for j in range(i):
            t -= A[i * r + j] * b[j]
        b[i] = t
    for i in range(r - 1, -1, -1):
        t = b[i]
        for j in range(i + 1, r):
            t -= A[i * r + j] * b[j]
        b[i] = t / A[i * r + i]
