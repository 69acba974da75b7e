"""Locality with bounded imbalance: per step, grow a local batch or move a sample.

The middle between ``locality`` (equal local batches b = ⌈B/p⌉, the surplus moved) and
``solar`` (nothing moved, local batches as large as the caches make them). With the allowed
imbalance α (``max_imbalance`` ≥ 1) a rank may train on up to c = ⌊α · b⌋ samples of the
global batch; it takes its own cached samples first, and only what still cannot be placed is
fetched — moved from the rank that caches it, or read from storage. Per step this is a small
assignment: positions j of the global batch to ranks r, n_r ≤ c, every position exactly once.

What is optimal (``bounded_assign``):

1. F, the samples fetched (trained on a rank that does not cache them), is the minimum over
   every split with n_r ≤ c: F* = B − M(c), M(L) the most positions ranks can keep locally
   with n_r ≤ L. One holder per sample: M(L) = Σ_r min(h_r, L) (h_r: rank r's cached
   positions; nothing else can be local). Several holders: M(L) is a bipartite b-matching,
   solved exactly as a max flow source → position (1) → holder (1) → rank → sink (L).
   Any split with local positions M fits: Σ_r (L − kept_r) = p · L − M ≥ B − M as p · b ≥ B.
2. Among those, the largest local batch is the least possible: L* = min {L ∈ [b, c] :
   M(L) = M(c)} (monotone in L: a binary search, one flow each; closed form for one holder).
3. The F fetched positions go to the ranks with room (L* − kept_r), each rank's count k_r
   minimising max_r kept_r · t_c + k_r · (t_c + t_f) (t_c = ``compute_cost``, t_f =
   ``read_cost``): capped water filling, ``capped_fill``. With t_c = 0 (default) the fetches
   are spread evenly, SOLAR's balanced loading; uncached samples go to their regular rank
   first, so a cold epoch reads exactly what the regular loader reads.
4. Balance (Algorithm 1) moves the held surplus: ≤ p − 1 messages per step (not the minimum,
   which is NP-complete; a 2-approximation).

The step stays the regular one (Theorem 1; SOLAR eq. 3): the global batch is the same set of
positions, each trained on once, and with loss weights w_r = n_r / B (``StepPlan.
loss_weights``; × p for an averaging all-reduce) Σ_r w_r · mean_r is the global batch's mean
loss, so the summed gradient is the same whatever the n_r. α = 1 fetches what ``locality``
fetches (B = b · p); α ≥ p (or ∞) fetches only the uncached samples, like ``solar``.
"""

from __future__ import annotations

import math

import numpy as np

from adloader.datapath.locality_batch import (
    Assignment,
    StepPlan,
    check_batch,
    exchange,
    fill_rooms,
    group_by_rank,
    owners,
    water_fill,
)
from adloader.errors import InputError

MAX_IMBALANCE = 1.1


def batch_bound(b: int, max_imbalance: float, size: int | None = None) -> int:
    """c = ⌊α · b⌋ ≥ b (at most ``size``, the global batch B, when given): n_r / b ≤ α holds
    exactly (⌈1.1 · 128⌉ = 141 would be 1.102 × b). α ≥ 1; ∞ allowed."""
    alpha = float(max_imbalance)
    if not alpha >= 1:  # also refuses NaN
        raise InputError(f"bounded imbalance: max_imbalance must be at least 1, got "
                         f"{max_imbalance!r}")
    limit = math.inf if size is None else size
    if alpha * b >= limit:
        return int(limit)
    return max(b, math.floor(alpha * b + 1e-9))  # 1.1 × 10 is 11, not 10


def capped_fill(levels, room, units: int) -> np.ndarray:
    """k_r ∈ [0, room_r], Σ k_r = units, minimising max_r(levels_r + k_r) over ranks that get
    some (ties: lower level, then rank); needs Σ room ≥ units.

    Water filling with caps: a rank the uncapped fill would push past its room is at its room
    in the optimum (lowering it only raises the others), so it is fixed and the rest refilled.
    """
    a = np.asarray(levels, dtype=np.float64)
    room = np.asarray(room, dtype=np.int64)
    if units > room.sum():
        raise InputError(f"capped fill: {units} units exceed the room of {room.sum()}")
    k = np.zeros(a.size, dtype=np.int64)
    free = room > 0
    left = int(units)
    while left > 0:
        idx = np.flatnonzero(free)
        got = water_fill(a[idx], left)
        over = got > room[idx]
        if not over.any():
            k[idx] = got
            break
        full = idx[over]
        k[full] = room[full]
        left -= int(room[full].sum())
        free[full] = False
    return k


def _holders(batch: np.ndarray, holder, p: int) -> np.ndarray | None:
    """Per position, every rank that caches it, shape (p, B); None when each has ≤ 1."""
    held = np.asarray(holder)
    if held.ndim != 2:
        return None
    cols = held[:, batch].astype(bool)
    return cols if (cols.sum(axis=0) > 1).any() else None


def _max_flow(cols: np.ndarray, single: np.ndarray, multi: np.ndarray, bound: int):
    """M(L) over positions ``multi`` (several holders) beside ``single[r]`` forced ones: the
    flow value, ranks' kept singles, and each multi position's keeping rank (−1: none)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import maximum_flow

    p, m = cols.shape[0], multi.size
    src, sink = 0, p + 1  # ranks 1..p, positions p + 2 ..
    rank_of, pos_of = np.nonzero(cols[:, multi])
    rows = np.concatenate([np.zeros(p, int), np.zeros(m, int), pos_of + p + 2,
                           np.arange(1, p + 1)])
    cols_ = np.concatenate([np.arange(1, p + 1), np.arange(m) + p + 2, rank_of + 1,
                            np.full(p, sink)])
    caps = np.concatenate([single, np.ones(m, int), np.ones(pos_of.size, int),
                           np.full(p, bound)]).astype(np.int32)
    n = p + 2 + m
    graph = coo_matrix((caps, (rows, cols_)), shape=(n, n)).tocsr()
    graph.eliminate_zeros()
    result = maximum_flow(graph, src, sink, method="dinic")
    flow = result.flow.tocsr()
    kept_single = flow[src, 1 : p + 1].toarray().reshape(-1).astype(np.int64)
    sub = flow[p + 2 :, 1 : p + 1].tocoo()
    on_rank = np.full(m, -1, dtype=np.int64)
    on_rank[sub.row[sub.data > 0]] = sub.col[sub.data > 0]
    return int(result.flow_value), kept_single, on_rank


def keep_local(batch: np.ndarray, holder, p: int, b: int, cap: int):
    """Steps 1–2: per position the rank that trains on it from its own cache (−1: fetched),
    and L* (the largest local batch), with n_r ≤ L* ≤ c keeping M(c) positions local."""
    own = owners(batch, holder, p)
    keep = np.full(batch.size, -1, dtype=np.int64)
    cols = _holders(batch, holder, p)
    pos = np.arange(batch.size)
    multi = (np.flatnonzero(cols.sum(axis=0) > 1) if cols is not None
             else np.zeros(0, dtype=np.int64))
    alone = (own >= 0) & ~np.isin(pos, multi)
    mine = group_by_rank(pos[alone], own[alone], p)
    single = np.array([q.size for q in mine], dtype=np.int64)
    if multi.size == 0:
        bound = int(np.clip(single.max(initial=0), b, cap))
        kept_single = np.minimum(single, bound)
    else:
        best = _max_flow(cols, single, multi, cap)[0]
        lo, hi = b, cap  # least L with M(L) = M(c)
        while lo < hi:
            mid = (lo + hi) // 2
            if _max_flow(cols, single, multi, mid)[0] == best:
                hi = mid
            else:
                lo = mid + 1
        bound = lo
        _, kept_single, on_rank = _max_flow(cols, single, multi, bound)
        keep[multi] = on_rank
    for r, q in enumerate(mine):
        keep[q[: kept_single[r]]] = r
    return keep, own, bound


def bounded_assign(global_batch, holder, p: int, local_batch: int | None = None,
                   max_imbalance: float = MAX_IMBALANCE, read_cost: float = 2.0,
                   message_cost: float = 0.0, compute_cost: float = 0.0,
                   **_costs) -> StepPlan:
    """The ``bounded`` mode: minimum fetched with every local batch ≤ ⌊α · b⌋, b = ⌈B/p⌉
    (= ``local_batch`` in a full step), then the least largest batch (module docstring).

    Costs as in ``plan_step`` (a held sample moves by message or by the receiver's storage
    read, whichever is cheaper); ``compute_cost`` weighs a local batch's size in step 3.
    """
    batch = check_batch(global_batch, p, local_batch)
    b = -(-batch.size // p)
    cap = batch_bound(b, max_imbalance, batch.size)
    keep, own, bound = keep_local(batch, holder, p, b, cap)
    pos = np.arange(batch.size)
    kept = group_by_rank(pos[keep >= 0], keep[keep >= 0], p)
    sizes = np.array([q.size for q in kept], dtype=np.int64)
    moved = pos[(keep < 0) & (own >= 0)]  # cached elsewhere, its holder is full: the surplus
    unheld = pos[own < 0]
    per = read_cost + compute_cost
    levels = sizes * compute_cost / per if per > 0 else np.zeros(p)
    quota = capped_fill(levels, bound - sizes, moved.size + unheld.size)
    reads = group_by_rank(unheld, fill_rooms(unheld, quota, p), p)
    spare = group_by_rank(moved, own[moved], p)
    plan = Assignment(kept, spare, reads, sizes + quota)
    return exchange(batch, plan, read_cost, message_cost)
