/* plan_arena.c — the allocator: places the planned buffers (plan.c says
 * which, and over which steps each lives) in one arena, so that dead
 * buffers' space is reused; and the check of the placement, plan_verify.
 *
 * Placement. Buffers, largest first (then by first step, then in value
 * order, temporaries last), each go to the best-fitting gap (the smallest
 * that holds it, the lowest of equal ones) between the buffers already
 * placed whose lifetimes overlap its own, else above them all; offsets are
 * multiples of PLAN_ALIGN (64) bytes. The arena is the highest end; the
 * most bytes live at one step bound it from below, and --stats shows both,
 * with the sum of all buffers (what one allocation per buffer would take).
 * The buffers placed are not looked at one by one: they are kept as byte
 * sets on a segment tree over the steps (Busy), each set a treap of
 * disjoint runs of bytes, touching runs merged. The bytes of the buffers
 * live at some step of [first, last] are the union of O(log n) of these
 * sets, whose gaps are walked upwards by merging the sets' runs in order,
 * stopping at a gap that fits exactly. With n buffers and steps, placing a
 * buffer costs O(log^2 n) and O(log n) more per run the walk passes,
 * adding it O(log^2 n) amortized. A program whose buffers meet few runs
 * (a deep network's activations, stacked one on another, make one run in
 * most sets) is planned in O(n log^2 n), where sorting all overlapping
 * buffers for each buffer placed took O(n^2 log n); one with thousands of
 * buffers live at once, scattered among gaps, still costs about a walk
 * over them per buffer.
 *
 * The check. plan_verify sorts the placed buffers by offset, so that each
 * is compared only with those that start inside it, and finds two that
 * share bytes while both are live, or one outside the arena or unaligned;
 * past PLAN_VERIFY_PAIRS pairs compared it stops, as far as is cheap. */
#include <stdlib.h>

#include "gslc.h"

#define PLAN_VERIFY_PAIRS 50000000L /* most pairs of byte-sharing buffers plan_verify compares */

/* ---- placement ------------------------------------------------------------ */

static int by_size(const void *x, const void *y) {
  const PlanItem *a = x, *b = y;
  if (a->bytes != b->bytes)
    return a->bytes > b->bytes ? -1 : 1;
  if (a->first != b->first)
    return a->first < b->first ? -1 : 1;
  return a->order - b->order;
}

/* A byte set: disjoint ranges of the arena, none touching another
 * (touching ranges merge), kept as a treap keyed by lo; a Run is one of
 * its nodes. */
typedef struct Run {
  int64_t lo, hi; /* the bytes [lo, hi) */
  unsigned prio;  /* a max-heap on prio keeps the treap shallow */
  int kid[2];     /* runs below lo and above it: nodes, 0 for none */
} Run;

/* The buffers placed so far, as byte sets on a segment tree over the
 * steps (node 1 the root, node k's children 2k and 2k + 1, leaf size + s
 * step s). A buffer live over steps [first, last] goes into own[c] for
 * each node c of the interval's canonical cover, and into sub[] of those
 * nodes and of every node above its first and last leaves. own[x] then
 * holds only buffers live over all of x's steps, and sub[x] only buffers
 * live at some step of x's, at least those stored at x or below it. */
typedef struct Busy {
  Run *run;      /* node pool: run[0] unused (0 is no node) */
  int nrun, cap; /* nodes used (freed ones included), allocated */
  int freed;     /* freed nodes, a list through kid[0] */
  unsigned seed; /* xorshift state for prio (the treaps' shape, never the plan, depends on it) */
  int size;      /* leaves: a power of two above the last step */
  int *own, *sub; /* per tree node: its byte sets (treap roots) */
} Busy;

static int run_new(Busy *b, int64_t lo, int64_t hi) {
  int x = b->freed;
  if (x) {
    b->freed = b->run[x].kid[0];
  } else {
    if (b->nrun == b->cap) {
      b->cap *= 2;
      b->run = xrealloc(b->run, (size_t)b->cap * sizeof *b->run);
    }
    x = b->nrun++;
  }
  b->seed ^= b->seed << 13;
  b->seed ^= b->seed >> 17;
  b->seed ^= b->seed << 5;
  b->run[x] = (Run){lo, hi, b->seed, {0, 0}};
  return x;
}

static void run_free_all(Busy *b, int t) {
  while (t) {
    run_free_all(b, b->run[t].kid[1]);
    int l = b->run[t].kid[0];
    b->run[t].kid[0] = b->freed;
    b->freed = t;
    t = l;
  }
}

/* t split into the runs below key (*l) and those from key up (*r) */
static void run_split(Busy *b, int t, int64_t key, int *l, int *r) {
  if (!t) {
    *l = *r = 0;
  } else if (b->run[t].lo < key) {
    run_split(b, b->run[t].kid[1], key, &b->run[t].kid[1], r);
    *l = t;
  } else {
    run_split(b, b->run[t].kid[0], key, l, &b->run[t].kid[0]);
    *r = t;
  }
}

/* l and r joined, every run of l below every run of r */
static int run_join(Busy *b, int l, int r) {
  if (!l || !r)
    return l ? l : r;
  if (b->run[l].prio > b->run[r].prio) {
    b->run[l].kid[1] = run_join(b, b->run[l].kid[1], r);
    return l;
  }
  b->run[r].kid[0] = run_join(b, l, b->run[r].kid[0]);
  return r;
}

/* the run of t with the highest lo (0: t is empty) */
static int run_last(const Busy *b, int t) {
  while (t && b->run[t].kid[1])
    t = b->run[t].kid[1];
  return t;
}

/* the run of t with the highest lo at most y, or (above) the lowest lo
 * above y; 0: none */
static int run_near(const Busy *b, int t, int64_t y, bool above) {
  int found = 0;
  while (t) {
    bool le = b->run[t].lo <= y;
    if (le != above)
      found = t;
    t = b->run[t].kid[le];
  }
  return found;
}

/* *set with the bytes [lo, hi) added */
static void set_add(Busy *b, int *set, int64_t lo, int64_t hi) {
  int l, m, r;
  run_split(b, *set, lo, &l, &r);
  int x = run_last(b, l);
  if (x && b->run[x].hi >= lo) { /* the run below reaches lo: merged */
    lo = b->run[x].lo;
    if (b->run[x].hi > hi)
      hi = b->run[x].hi;
    run_split(b, l, lo, &l, &m);
    run_free_all(b, m);
  }
  run_split(b, r, hi + 1, &m, &r); /* runs starting in [lo, hi]: merged */
  x = run_last(b, m);
  if (x && b->run[x].hi > hi)
    hi = b->run[x].hi;
  run_free_all(b, m);
  *set = run_join(b, run_join(b, l, run_new(b, lo, hi)), r);
}

/* The sets that together hold exactly the buffers live at some step of
 * [first, last]: sub[] of the interval's canonical cover and own[] of every
 * node above its first and last leaves. Returns how many went to sets. */
static int busy_sets(const Busy *b, int first, int last, int *sets) {
  int n = 0;
  for (int lo = first + b->size, hi = last + b->size + 1; lo < hi; lo >>= 1, hi >>= 1) {
    if (lo & 1)
      sets[n++] = b->sub[lo++];
    if (hi & 1)
      sets[n++] = b->sub[--hi];
  }
  for (int x = (first + b->size) >> 1, y = (last + b->size) >> 1; x; x >>= 1, y >>= 1) {
    sets[n++] = b->own[x];
    if (y != x)
      sets[n++] = b->own[y];
  }
  int k = 0;
  for (int i = 0; i < n; i++)
    if (sets[i])
      sets[k++] = sets[i];
  return k;
}

static void busy_add(Busy *b, const PlanItem *it) {
  int64_t lo = *it->offset, hi = lo + it->bytes;
  for (int l = it->first + b->size, h = it->last + b->size + 1; l < h; l >>= 1, h >>= 1) {
    if (l & 1) {
      set_add(b, &b->own[l], lo, hi);
      set_add(b, &b->sub[l++], lo, hi);
    }
    if (h & 1) {
      set_add(b, &b->own[--h], lo, hi);
      set_add(b, &b->sub[h], lo, hi);
    }
  }
  for (int x = (it->first + b->size) >> 1, y = (it->last + b->size) >> 1; x; x >>= 1, y >>= 1) {
    set_add(b, &b->sub[x], lo, hi);
    if (y != x)
      set_add(b, &b->sub[y], lo, hi);
  }
}

/* the run of t with the lowest lo among those ending above y (0: none) */
static int run_seek(const Busy *b, int t, int64_t y) {
  int x = run_near(b, t, y, false);
  return x && b->run[x].hi > y ? x : run_near(b, t, y, true);
}

/* Where it goes: the lowest of the smallest gaps that hold it among the
 * buffers placed whose lifetimes overlap its own, else above them all.
 * The sets are merged as sorted lists are, each through a cursor (its
 * lowest run ending above y) in a heap on the cursors' lo: y, the top of
 * the bytes walked, passes the lowest cursor's run when that run begins
 * at or below y, else there is a gap from y to it. A cursor left behind
 * skips in one step to its run ending above y. */
static int64_t best_fit(const Busy *b, const PlanItem *it) {
  int sets[4 * 32], n = busy_sets(b, it->first, it->last, sets); /* 2 log2(size) in the cover, 2 above */
  int cur[4 * 32], heap[4 * 32], nh = 0; /* per set its cursor; the heap of sets, lowest cursor first */
  int64_t y = 0, best = -1, best_gap = 0;
  for (int i = 0; i < n; i++) {
    cur[i] = run_seek(b, sets[i], 0);
    int k = nh++;
    for (; k > 0 && b->run[cur[heap[(k - 1) / 2]]].lo > b->run[cur[i]].lo; k = (k - 1) / 2)
      heap[k] = heap[(k - 1) / 2];
    heap[k] = i;
  }
  while (nh > 0) {
    int i = heap[0];
    const Run *r = &b->run[cur[i]];
    if (r->lo > y) {
      int64_t gap = r->lo - y;
      if (gap >= it->bytes && (best < 0 || gap < best_gap)) {
        best = y;
        best_gap = gap;
        if (gap == it->bytes)
          break; /* no gap fits closer, and any other lies higher */
      }
      y = r->lo;
    }
    if (r->hi > y)
      y = r->hi;
    cur[i] = run_seek(b, sets[i], y);
    if (!cur[i])
      i = heap[--nh]; /* the set is walked: the last of the heap sifts down from the top */
    int k = 0;
    for (;;) {
      int c = 2 * k + 1;
      if (c >= nh)
        break;
      if (c + 1 < nh && b->run[cur[heap[c + 1]]].lo < b->run[cur[heap[c]]].lo)
        c++;
      if (b->run[cur[heap[c]]].lo >= b->run[cur[i]].lo)
        break;
      heap[k] = heap[c];
      k = c;
    }
    if (nh > 0)
      heap[k] = i;
  }
  return best >= 0 ? best : y;
}

void plan_place(Plan *pl, PlanItem *it, int nit, int nsteps) {
  qsort(it, (size_t)nit, sizeof *it, by_size);
  Busy b = {0};
  b.cap = 1024;
  b.run = xmalloc((size_t)b.cap * sizeof *b.run);
  b.nrun = 1;
  b.seed = 2463534242u;
  for (b.size = 1; b.size <= nsteps; b.size *= 2)
    ;
  b.own = xcalloc(2 * (size_t)b.size, sizeof *b.own);
  b.sub = xcalloc(2 * (size_t)b.size, sizeof *b.sub);
  for (int i = 0; i < nit; i++) {
    *it[i].offset = best_fit(&b, &it[i]);
    busy_add(&b, &it[i]);
    if (*it[i].offset + it[i].bytes > pl->arena_bytes)
      pl->arena_bytes = *it[i].offset + it[i].bytes;
    pl->noreuse_bytes += it[i].bytes;
  }
  free(b.run);
  free(b.own);
  free(b.sub);
  /* the most bytes live at one step */
  int64_t *delta = xcalloc((size_t)nsteps + 2, sizeof *delta), live = 0;
  for (int i = 0; i < nit; i++) {
    delta[it[i].first] += it[i].bytes;
    delta[it[i].last + 1] -= it[i].bytes;
  }
  for (int s = 0; s <= nsteps; s++) {
    live += delta[s];
    if (live > pl->live_bytes)
      pl->live_bytes = live;
  }
  free(delta);
}

/* ---- the plan's own check --------------------------------------------------- */

/* One placed buffer, for plan_verify. */
typedef struct Placed {
  int64_t offset, bytes; /* where in the arena */
  int first, last;       /* live steps */
  int who;               /* value id (a temporary: its value's id) */
} Placed;

static int by_place(const void *x, const void *y) {
  const Placed *a = x, *b = y;
  return a->offset < b->offset ? -1 : a->offset > b->offset;
}

bool plan_verify(const Plan *pl, FILE *err) {
  int n = pl->nvalues, nit = 0;
  Placed *it = xmalloc(((size_t)n + (size_t)pl->ntemps + 1) * sizeof *it);
  bool ok = true;
  for (int i = 0; i < n; i++)
    if (pl->offset[i] >= 0)
      it[nit++] = (Placed){pl->offset[i], pl->bytes[i], pl->first[i], pl->last[i], i};
  for (int t = 0; t < pl->ntemps; t++)
    it[nit++] = (Placed){pl->temps[t].offset, pl->temps[t].bytes, pl->temps[t].value, pl->temps[t].value,
                         pl->temps[t].value};
  for (int i = 0; i < nit && ok; i++)
    if (it[i].offset < 0 || it[i].offset % PLAN_ALIGN || it[i].offset + it[i].bytes > pl->arena_bytes ||
        it[i].first > it[i].last) {
      if (err)
        fprintf(err, "plan_verify: the buffer of %%%d lies outside the arena, unaligned, or lives backwards\n",
                it[i].who);
      ok = false;
    }
  /* sorted by offset, each buffer meets only those that start inside it */
  qsort(it, (size_t)nit, sizeof *it, by_place);
  long pairs = 0;
  for (int i = 0; i < nit && ok; i++)
    for (int j = i + 1; j < nit && it[j].offset < it[i].offset + it[i].bytes && ok; j++) {
      if (++pairs > PLAN_VERIFY_PAIRS)
        goto done; /* checked as far as is cheap */
      if (it[i].first <= it[j].last && it[j].first <= it[i].last) {
        if (err)
          fprintf(err, "plan_verify: %%%d and %%%d share arena bytes while both are live\n", it[i].who, it[j].who);
        ok = false;
      }
    }
done:
  free(it);
  return ok;
}
