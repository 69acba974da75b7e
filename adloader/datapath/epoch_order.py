"""SOLAR §4.2.1 (overview §4.1, Fig. 4 b): the order of the epochs, chosen to maximise reuse.

The shuffled index lists of all E epochs are fixed ahead of training (one permutation per
epoch, ``adloader.datapath.sample_order.epoch_permutation``); only the *order* in which they are
read is
chosen, so every epoch still reads every sample once. Between consecutive epochs u → v a
buffer of |Buffer| = c samples can serve what v reads while those samples are still there.

Reuse (SOLAR eq. 1): ``Buffer_u`` is u's *last* buffer — the last c samples u reads, what an
LRU-like buffer holds when u ends — and ``Buffer_v`` v's *first* buffer, its first c samples.
The loading cost of the edge is N_{u,v} = card(Buffer_v − Buffer_u) (the paper's text swaps
the labels "first"/"last"; this is the reading consistent with its definition of the cost
u → v), and since |Buffer_v| = c for every v, minimising Σ N_{u,v} along a path (eq. 2) is
maximising the reuse ``W[u, v] = |tail_c(u) ∩ head_c(v)|``. ``model="lru"`` counts instead
the hits an LRU buffer of c samples makes in v right after u: every epoch reads every sample,
so the buffer holds u's last c samples when v starts whatever came before u, v's hits depend
on (u, v) alone, and Σ W along the order is exactly the run's LRU hits (for one reader; eq. 1
bounds it from above, counting samples LRU evicts before v reaches them).

The order is a longest Hamiltonian *path* (path-TSP, asymmetric) over the epochs. SOLAR
solves it with particle-swarm optimisation; here: greedy nearest neighbour from every start,
2-opt and or-opt on the path, iterated with seeded double-bridge kicks (``solar_order``), brute
force for small E (``exhaustive_order``), and an assignment-relaxation upper bound, so the
caller can say how far from optimal the order can be.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adloader.datapath.reuse import lru_stack_distance
from adloader.datapath.sample_order import epoch_permutation
from adloader.errors import InputError

MODELS = ("solar", "lru")
EXHAUSTIVE_MAX = 9  # 9! = 362 880 paths
STARTS = 8  # greedy paths (the best of one from every start) improved by local search


@dataclass(frozen=True)
class EpochOrder:
    """``order[k]``: the planned epoch (shuffled index list) read as the k-th epoch."""

    order: tuple[int, ...]
    reuse: int  # Σ W[order[k], order[k + 1]]: samples served by the buffer across epochs
    bound: int  # no order of these epochs reuses more
    sequential: int  # the reuse of 0, 1, …, E − 1
    exact: bool  # proven optimal (brute force, or reuse == bound)

    @property
    def gap(self) -> float:
        """How far below the bound the order can be, as a fraction of the bound."""
        return (self.bound - self.reuse) / self.bound if self.bound else 0.0


# ---------------------------------------------------------------- the reuse matrix W


def reuse_matrix(perms, capacity: int, model: str = "solar") -> np.ndarray:
    """W[u, v]: samples u's last buffer holds that v reads in its first (eq. 1), shape (E, E).

    ``perms``: (E, L) sample ids, each row the order one epoch reads (distinct ids).
    ``model="solar"``: |tail_c(u) ∩ head_c(v)|; ``"lru"``: the LRU hits in v after u.
    The diagonal is 0 (an epoch does not follow itself).
    """
    p = np.asarray(perms)
    if p.ndim != 2 or (p.size and (p.dtype.kind not in "iu" or p.min() < 0)):
        raise InputError("epoch order: perms must be an (epochs, samples) array of ids >= 0")
    if int(capacity) != capacity or capacity < 0:
        raise InputError(f"epoch order: capacity must be a whole number >= 0, got {capacity}")
    if model not in MODELS:
        raise InputError(f"epoch order: model must be one of {', '.join(MODELS)}, got {model!r}")
    e, length = p.shape
    span = int(p.max()) + 1 if p.size else 1
    if length > 1 and np.any(np.diff(np.sort(p, axis=1), axis=1) == 0):
        raise InputError("epoch order: an epoch reads a sample twice")
    c = min(int(capacity), length)
    w = np.zeros((e, e), dtype=np.int64)
    if c == 0 or e < 2:
        return w
    if model == "solar":
        tail = np.zeros((e, span), dtype=bool)
        head = np.zeros((e, span), dtype=bool)
        np.put_along_axis(tail, p[:, length - c :], True, axis=1)
        np.put_along_axis(head, p[:, :c], True, axis=1)
        step = 1 << 20  # float32 sums stay exact below 2**24
        for lo in range(0, span, step):
            t, h = (x[:, lo : lo + step].astype(np.float32) for x in (tail, head))
            w += np.rint(t @ h.T).astype(np.int64)
    else:
        for u, v in itertools.permutations(range(e), 2):  # [tail_c(u), head_c(v)] is enough
            dist = lru_stack_distance(np.concatenate([p[u, length - c :], p[v, :c]]))
            w[u, v] = np.count_nonzero(dist[c:] < c)
    np.fill_diagonal(w, 0)
    return w


def path_reuse(w, order: Sequence[int]) -> int:
    """Σ W[order[k], order[k + 1]]."""
    o = np.asarray(order, dtype=np.int64)
    return int(np.asarray(w)[o[:-1], o[1:]].sum()) if o.size > 1 else 0


# ---------------------------------------------------------------- the upper bound


def _min_assignment(cost: np.ndarray) -> np.ndarray:
    """Rows' columns of a minimum-cost assignment (Hungarian, shortest augmenting paths)."""
    n = cost.shape[0]
    u, v = np.zeros(n + 1), np.zeros(n + 1)
    p = np.zeros(n + 1, dtype=np.int64)  # p[j]: row (1-based) holding column j
    way = np.zeros(n + 1, dtype=np.int64)
    for i in range(1, n + 1):
        p[0], j0 = i, 0
        minv = np.full(n + 1, np.inf)
        used = np.zeros(n + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = p[j0]
            free = ~used
            free[0] = False
            cur = cost[i0 - 1] - u[i0] - v[1:]
            better = free[1:] & (cur < minv[1:])
            minv[1:][better] = cur[better]
            way[1:][better] = j0
            cand = np.where(free, minv, np.inf)
            j1 = int(np.argmin(cand))
            delta = cand[j1]
            u[p[used]] += delta
            v[used] -= delta
            minv[free] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
    col = np.empty(n, dtype=np.int64)
    col[p[1:] - 1] = np.arange(n)
    return col


def assignment_bound(w) -> int:
    """Upper bound on any path's reuse: the best assignment of successors with a dummy epoch.

    A path closed through a dummy node (W = 0 to and from it) is a tour, and a tour is an
    assignment (each node one successor, each one predecessor, no self-loops); so the best
    assignment bounds every path. It is at least as tight as Σ best outgoing edge − the least.
    """
    w = np.asarray(w, dtype=np.float64)
    e = w.shape[0]
    if e < 2:
        return 0
    m = np.zeros((e + 1, e + 1))
    m[:e, :e] = w
    big = 4.0 * (np.abs(w).sum() + 1.0)
    np.fill_diagonal(m, -big)
    col = _min_assignment(-m)
    return int(round(m[np.arange(e + 1), col].sum()))


# ---------------------------------------------------------------- exact and heuristic


def _result(w: np.ndarray, order, bound: int | None = None, proven: bool = False) -> EpochOrder:
    order = tuple(int(x) for x in order)
    reuse = path_reuse(w, order)
    bound = assignment_bound(w) if bound is None else bound
    bound = reuse if proven else max(bound, reuse)
    return EpochOrder(order, reuse, bound, path_reuse(w, range(w.shape[0])),
                      proven or reuse == bound)


def _matrix(w) -> np.ndarray:
    w = np.asarray(w)
    if w.ndim != 2 or w.shape[0] != w.shape[1] or w.shape[0] < 1:
        raise InputError("epoch order: W must be a square (epochs, epochs) matrix")
    return w.astype(np.int64)


def exhaustive_order(w) -> EpochOrder:
    """The best path by brute force over all E! orders (E ≤ 9); ties: the first in order."""
    w = _matrix(w)
    e = w.shape[0]
    if e > EXHAUSTIVE_MAX:
        raise InputError(f"epoch order: brute force takes E <= {EXHAUSTIVE_MAX}, got {e}")
    if e == 1:
        return _result(w, (0,), 0, True)
    paths = np.array(list(itertools.permutations(range(e))), dtype=np.int8)
    value = w[paths[:, :-1], paths[:, 1:]].sum(axis=1)
    return _result(w, paths[int(np.argmax(value))], proven=True)


def _cycle_value(m: np.ndarray, t: np.ndarray) -> int:
    return int(m[t, np.roll(t, -1)].sum())


def _two_opt(m: np.ndarray, t: np.ndarray) -> bool:
    """Best segment reversal t[i..j] (1 ≤ i < j, node 0 = the dummy fixed) if it gains."""
    n = t.size
    nxt = np.roll(t, -1)
    fwd = np.concatenate([[0], np.cumsum(m[t, nxt])])  # fwd[k] = Σ_{q<k} m[t_q, t_q+1]
    rev = np.concatenate([[0], np.cumsum(m[nxt, t])])
    i, j = np.triu_indices(n, 1)
    keep = i >= 1
    i, j = i[keep], j[keep]
    before, after = t[i - 1], nxt[j]
    gain = (m[before, t[j]] + m[t[i], after] + (rev[j] - rev[i])
            - m[before, t[i]] - m[t[j], after] - (fwd[j] - fwd[i]))
    if gain.size == 0 or gain.max() <= 0:
        return False
    k = int(np.argmax(gain))
    t[i[k] : j[k] + 1] = t[i[k] : j[k] + 1][::-1].copy()
    return True


def _or_opt(m: np.ndarray, t: np.ndarray) -> bool:
    """Best move of a segment of 1–3 epochs elsewhere (either way round) if it gains."""
    n = t.size
    best, move = 0, None
    for length in (1, 2, 3):
        for i in range(1, n - length + 1):
            seg = t[i : i + length]
            before, after = t[i - 1], t[(i + length) % n]
            inner_f = int(m[seg[:-1], seg[1:]].sum())
            inner_r = int(m[seg[1:], seg[:-1]].sum())
            out = m[before, seg[0]] + m[seg[-1], after] - m[before, after]
            rest = np.concatenate([t[:i], t[i + length :]])
            a, b = rest, np.roll(rest, -1)
            fwd = m[a, seg[0]] + m[seg[-1], b] - m[a, b] + inner_f
            bwd = m[a, seg[-1]] + m[seg[0], b] - m[a, b] + inner_r
            for flip, add in ((False, fwd), (True, bwd)):
                k = int(np.argmax(add))
                gain = int(add[k]) - out - inner_f
                if gain > best:
                    best, move = gain, (rest, k, seg[::-1] if flip else seg)
    if move is None:
        return False
    rest, k, seg = move
    t[:] = np.concatenate([rest[: k + 1], seg, rest[k + 1 :]])
    return True


def _local_search(m: np.ndarray, t: np.ndarray) -> np.ndarray:
    while _two_opt(m, t) or _or_opt(m, t):
        pass
    return t


def _nearest_neighbour(w: np.ndarray, start: int) -> list[int]:
    e = w.shape[0]
    path, left = [start], np.ones(e, dtype=bool)
    left[start] = False
    for _ in range(e - 1):
        cand = np.where(left, w[path[-1]], np.iinfo(np.int64).min)
        path.append(int(np.argmax(cand)))
        left[path[-1]] = False
    return path


def solar_order(w, seed: int = 0, kicks: int | None = None,
                exact_upto: int = 8) -> EpochOrder:
    """A near-best path-TSP order of the epochs (the role of SOLAR's PSO, §4.2.1).

    Greedy nearest neighbour from every start, and 0..E−1 (so never worse than sequential);
    the ``STARTS`` best improved by 2-opt and or-opt; then ``kicks`` (default min(2E, 64))
    seeded double-bridge perturbations of the best, each improved and kept if better.
    E ≤ ``exact_upto``: brute force. The result carries the assignment bound, so ``gap``
    says how far from optimal it can be.
    """
    w = _matrix(w)
    e = w.shape[0]
    if e <= max(3, min(exact_upto, EXHAUSTIVE_MAX)):  # 3! paths: nothing to search
        return exhaustive_order(w)
    bound = assignment_bound(w)
    m = np.zeros((e + 1, e + 1), dtype=np.int64)  # node 0: the dummy closing the path
    m[1:, 1:] = w
    greedy = [_nearest_neighbour(w, s) for s in range(e)] + [list(range(e))]
    greedy.sort(key=lambda q: -path_reuse(w, q))  # stable: the sequential order is a start
    best, best_value = None, -1
    for path in greedy[:STARTS]:
        t = _local_search(m, np.array([0] + [x + 1 for x in path]))
        value = _cycle_value(m, t)
        if value > best_value:
            best, best_value = t.copy(), value
        if best_value >= bound:
            break
    rng = np.random.default_rng(seed)
    for _ in range(min(2 * e, 64) if kicks is None else kicks):
        if best_value >= bound:
            break
        a, b, c = np.sort(rng.choice(np.arange(2, e + 1), 3, replace=False))
        t = np.concatenate([best[:1], best[c:], best[b:c], best[a:b], best[1:a]])
        t = _local_search(m, t)
        value = _cycle_value(m, t)
        if value > best_value:
            best, best_value = t.copy(), value
    return _result(w, best[1:] - 1, bound)


# ---------------------------------------------------------------- plans for a job


def check_order(order: Sequence[int]) -> tuple[int, ...]:
    """``order`` as a tuple, refused unless it is a permutation of 0..len − 1."""
    out = tuple(int(x) for x in order)
    if sorted(out) != list(range(len(out))):
        raise InputError(f"epoch order must be a permutation of 0..{len(out) - 1}, got {out}")
    return out


def source_epoch(order: Sequence[int] | None, epoch: int) -> int:
    """The planned epoch read as epoch ``epoch``: ``order[epoch]``, itself past the order."""
    return int(order[epoch]) if order is not None and 0 <= epoch < len(order) else int(epoch)


def plan_epoch_order(seed: int, epochs: int, size: int, capacity: int, shuffle: bool = True,
                     method: str = "solar", model: str = "solar") -> EpochOrder:
    """The epoch order of a job: its E shuffled index lists (``epoch_permutation``) reordered.

    ``capacity``: the buffer, in samples. ``method``: "solar" (``solar_order``), "exhaustive"
    or "sequential" (0..E−1, with the same bound for comparison). W is measured on the
    epochs' global orders; a node's ranks read each global batch in a slightly different
    order, which moves only the samples at the edges of the head and the tail.
    """
    if int(epochs) < 1 or int(size) < 1:
        raise InputError(f"epoch order: needs epochs and size >= 1, got {epochs}, {size}")
    dtype = np.int32 if size < 2**31 else np.int64
    perms = np.stack([epoch_permutation(seed, e, size, shuffle).astype(dtype)
                      for e in range(epochs)])
    w = reuse_matrix(perms, capacity, model)
    if method == "solar":
        return solar_order(w, seed)
    if method == "exhaustive":
        return exhaustive_order(w)
    if method == "sequential":
        return _result(w, range(epochs))
    raise InputError(f"epoch order: method must be solar, exhaustive or sequential, "
                     f"got {method!r}")
