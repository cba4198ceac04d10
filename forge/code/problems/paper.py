"""The paper's Appendix C case studies (AtCoder ABC388 / ARC195 A / ARC194), each with its "before" solution (correct
but slower: binary search over the answer, a bisect index map, heap-driven swaps) and its time-optimal "after".

Every solve function is self-contained (imports inside): its source is what a submission looks like.
"""

from __future__ import annotations

import random

from forge.code.problems import Solution, StdioSpec

# --- C.1 Simultaneous Kagamimochi ------------------------------------------------------------------------


def gen_kagami(n: int, rng: random.Random) -> str:
    a = sorted(rng.randint(1, 4 * n + 4) for _ in range(n))
    return f"{n}\n{' '.join(map(str, a))}\n"


def kagami_after(text: str) -> str:
    data = text.split()
    n = int(data[0])
    a = list(map(int, data[1 : 1 + n]))
    i, j, count = 0, n // 2, 0
    while i < n // 2 and j < n:
        if a[i] * 2 <= a[j]:
            count += 1
            i += 1
        j += 1
    return f"{count}\n"


def kagami_before(text: str) -> str:
    data = text.split()
    n = int(data[0])
    a = sorted(map(int, data[1 : 1 + n]))
    low, high = 0, n // 2
    while low < high:
        mid = (low + high + 1) // 2
        ok = True
        for i in range(mid):
            if 2 * a[i] > a[n - mid + i]:
                ok = False
                break
        if ok:
            low = mid
        else:
            high = mid - 1
    return f"{low}\n"


# --- C.2 Twice Subsequence -------------------------------------------------------------------------------


def gen_twice(n: int, rng: random.Random) -> str:
    a = [rng.randint(1, 3) for _ in range(n)]
    m = max(1, n // 2)
    idx = sorted(rng.sample(range(n), m))
    b = [a[i] for i in idx]
    if rng.random() < 0.3:
        b[rng.randrange(m)] = 4  # no embedding at all
    return f"{n} {m}\n{' '.join(map(str, a))}\n{' '.join(map(str, b))}\n"


def twice_after(text: str) -> str:
    data = text.split()
    n, m = int(data[0]), int(data[1])
    a = data[2 : 2 + n]
    b = data[2 + n : 2 + n + m]
    left, j = [], 0
    for i in range(n):
        if j < m and a[i] == b[j]:
            left.append(i)
            j += 1
            if j == m:
                break
    if j < m:
        return "No\n"
    right, j = [], m - 1
    for i in range(n - 1, -1, -1):
        if j >= 0 and a[i] == b[j]:
            right.append(i)
            j -= 1
            if j < 0:
                break
    right.reverse()
    return "Yes\n" if any(x != y for x, y in zip(left, right)) else "No\n"


def twice_before(text: str) -> str:
    import bisect
    from collections import defaultdict

    data = text.split()
    n, m = int(data[0]), int(data[1])
    a = data[2 : 2 + n]
    b = data[2 + n : 2 + n + m]
    positions = defaultdict(list)
    for i, v in enumerate(a):
        positions[v].append(i)
    left, pos = [], -1
    for v in b:
        lst = positions.get(v, [])
        k = bisect.bisect_left(lst, pos + 1)
        if k == len(lst):
            return "No\n"
        pos = lst[k]
        left.append(pos)
    right, pos = [], n
    for v in reversed(b):
        lst = positions[v]
        k = bisect.bisect_left(lst, pos)
        pos = lst[k - 1]
        right.append(pos)
    right.reverse()
    return "Yes\n" if any(x != y for x, y in zip(left, right)) else "No\n"


# --- C.3 Minimum Cost Sort -------------------------------------------------------------------------------


def gen_permutation(n: int, rng: random.Random) -> str:
    p = list(range(1, n + 1))
    rng.shuffle(p)
    return f"{n}\n{' '.join(map(str, p))}\n"


def min_cost_sort_after(text: str) -> str:
    data = text.split()
    n = int(data[0])
    p = list(map(int, data[1 : 1 + n]))
    tree = [0] * (n + 1)
    total = 0
    for val in p:
        i, smaller = val - 1, 0
        while i > 0:
            smaller += tree[i]
            i -= i & -i
        p0 = smaller + 1
        if p0 < val:
            total += (p0 + val - 1) * (val - p0) // 2
        i = val
        while i <= n:
            tree[i] += 1
            i += i & -i
    return f"{total}\n"


def min_cost_sort_before(text: str) -> str:
    import heapq

    data = text.split()
    n = int(data[0])
    p = [0] + list(map(int, data[1 : 1 + n]))
    heap = [i for i in range(1, n) if p[i] > p[i + 1]]
    heapq.heapify(heap)
    total = 0
    while heap:
        i = heapq.heappop(heap)
        if not p[i] > p[i + 1]:
            continue
        p[i], p[i + 1] = p[i + 1], p[i]
        total += i
        for k in (i - 1, i, i + 1):
            if 1 <= k < n and p[k] > p[k + 1]:
                heapq.heappush(heap, k)
    return f"{total}\n"


SPECS = [
    StdioSpec(
        id="kagamimochi",
        title="Simultaneous Kagamimochi (AtCoder ABC388 excerpt)",
        statement="""N mochi have non-decreasing sizes A_1 <= ... <= A_N. A mochi of size a can sit on one of size b
iff a <= b / 2. Print the largest K such that 2K mochi can be paired into K such stacks at the same time.
Input: N, then A_1 .. A_N.""",
        generate=gen_kagami,
        solve=kagami_after,
        complexity="O(n)",
        sizes=(500, 1000, 2000, 4000, 8000, 16000),
        examples=(("6\n2 3 4 4 7 10\n", "3\n"),),
        before=Solution(kagami_before, "O(n log n)"),
        labelled=(
            Solution(kagami_after, "O(n)"),
            # a log factor needs a wide size range to show against the linear parsing around it
            Solution(kagami_before, "O(n log n)", sizes=(500, 1000, 2000, 4000, 8000, 16000, 32000, 64000)),
        ),
    ),
    StdioSpec(
        id="twice_subsequence",
        title="Twice Subsequence (AtCoder ARC195 A excerpt)",
        statement="""Given A (length N) and B (length M <= N), print Yes if at least two different sets of positions
of A form the subsequence B, else No. Input: N M, then A, then B.""",
        generate=gen_twice,
        solve=twice_after,
        complexity="O(n)",
        sizes=(1000, 2000, 4000, 8000, 16000, 32000),
        examples=(("4 2\n1 2 1 2\n1 2\n", "Yes\n"), ("3 2\n1 2 3\n1 3\n", "No\n")),
        before=Solution(twice_before, "O(n log n)"),
        labelled=(Solution(twice_after, "O(n)"),),
    ),
    StdioSpec(
        id="min_cost_sort",
        title="Minimum Cost Sort (AtCoder ARC194 excerpt)",
        statement="""P is a permutation of 1..N. Swapping P_i and P_{i+1} costs i. Print the minimum total cost to
sort P ascending. Input: N, then P_1 .. P_N.""",
        generate=gen_permutation,
        solve=min_cost_sort_after,
        complexity="O(n log n)",
        sizes=(500, 1000, 2000, 4000, 8000, 16000, 32000, 64000),
        examples=(("3\n3 2 1\n", "4\n"),),
        before=Solution(min_cost_sort_before, "O(n^2)", sizes=(100, 150, 200, 300, 400, 600)),
        labelled=(Solution(min_cost_sort_after, "O(n log n)"),),
    ),
]
