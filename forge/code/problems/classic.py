"""Classic stdin/stdout problems (LeetCode/AtCoder style) with an optimal reference, and brute-force solutions of
known class where the gap is visible (the complexity judge's labelled set). Generators produce worst cases for
the brute forces (e.g. no pair exists), so a brute force's measured growth is its true class.

Every solve function is self-contained (imports inside): its source is what a submission looks like.
"""

from __future__ import annotations

import random

from forge.code.problems import Solution, StdioSpec

LINEAR = (500, 1000, 2000, 4000, 8000, 16000)
QUADRATIC = (80, 120, 160, 240, 320, 480)
NLOGN = (500, 1000, 2000, 4000, 8000, 16000, 32000, 64000)
CUBIC = (16, 24, 32, 40, 48, 64)


def ints(n: int, rng: random.Random, lo: int = -1000, hi: int = 1000) -> str:
    return " ".join(str(rng.randint(lo, hi)) for _ in range(n))


def gen_array(n: int, rng: random.Random) -> str:
    return f"{n}\n{ints(n, rng)}\n"


def gen_wide(n: int, rng: random.Random) -> str:
    """Values from a range much wider than n: a structure indexed by value grows with n."""
    return f"{n}\n{ints(n, rng, 1, 10**9)}\n"


# --- maximum subarray sum ------------------------------------------------------------------------------


def max_subarray(text: str) -> str:
    data = text.split()
    best, cur = None, 0
    for x in map(int, data[1 : 1 + int(data[0])]):
        cur = x if cur < 0 else cur + x
        best = cur if best is None or cur > best else best
    return f"{best}\n"


def max_subarray_slow(text: str) -> str:
    data = text.split()
    n = int(data[0])
    a = list(map(int, data[1 : 1 + n]))
    best = a[0]
    for i in range(n):
        s = 0
        for j in range(i, n):
            s += a[j]
            best = max(best, s)
    return f"{best}\n"


# --- best time to buy and sell once ----------------------------------------------------------------------


def stock_profit(text: str) -> str:
    data = text.split()
    low, best = None, 0
    for p in map(int, data[1 : 1 + int(data[0])]):
        if low is None or p < low:
            low = p
        elif p - low > best:
            best = p - low
    return f"{best}\n"


def stock_profit_slow(text: str) -> str:
    data = text.split()
    n = int(data[0])
    p = list(map(int, data[1 : 1 + n]))
    best = 0
    for i in range(n):
        for j in range(i + 1, n):
            best = max(best, p[j] - p[i])
    return f"{best}\n"


# --- two-sum on an unsorted array (worst case: no pair) --------------------------------------------------


def gen_two_sum(n: int, rng: random.Random) -> str:
    a = [2 * rng.randint(0, 10**6) for _ in range(n)]  # all even, target odd: no pair, the brute force's worst case
    target = 2 * rng.randint(0, 10**6) + (1 if rng.random() < 0.8 else 0)
    return f"{n} {target}\n{' '.join(map(str, a))}\n"


def two_sum(text: str) -> str:
    data = text.split()
    n, target = int(data[0]), int(data[1])
    seen = set()
    for x in map(int, data[2 : 2 + n]):
        if target - x in seen:
            return "YES\n"
        seen.add(x)
    return "NO\n"


def two_sum_slow(text: str) -> str:
    data = text.split()
    n, target = int(data[0]), int(data[1])
    a = list(map(int, data[2 : 2 + n]))
    for i in range(n):
        for j in range(i + 1, n):
            if a[i] + a[j] == target:
                return "YES\n"
    return "NO\n"


# --- trapping rain water ----------------------------------------------------------------------------------


def gen_heights(n: int, rng: random.Random) -> str:
    return f"{n}\n{ints(n, rng, 0, 1000)}\n"


def rain_water(text: str) -> str:
    data = text.split()
    h = list(map(int, data[1 : 1 + int(data[0])]))
    i, j, left, right, water = 0, len(h) - 1, 0, 0, 0
    while i < j:
        if h[i] <= h[j]:
            left = max(left, h[i])
            water += left - h[i]
            i += 1
        else:
            right = max(right, h[j])
            water += right - h[j]
            j -= 1
    return f"{water}\n"


def rain_water_slow(text: str) -> str:
    data = text.split()
    n = int(data[0])
    h = list(map(int, data[1 : 1 + n]))
    water = 0
    for i in range(n):
        left = right = 0
        for k in range(i + 1):
            left = max(left, h[k])
        for k in range(i, n):
            right = max(right, h[k])
        water += min(left, right) - h[i]
    return f"{water}\n"


# --- next greater element (decreasing inputs: the brute force's worst case) ---------------------------------


def gen_mostly_decreasing(n: int, rng: random.Random) -> str:
    a = [3 * (n - i) + rng.randint(0, 2) for i in range(n)]
    return f"{n}\n{' '.join(map(str, a))}\n"


def next_greater(text: str) -> str:
    data = text.split()
    n = int(data[0])
    a = list(map(int, data[1 : 1 + n]))
    out, stack = [-1] * n, []
    for i, x in enumerate(a):
        while stack and a[stack[-1]] < x:
            out[stack.pop()] = x
        stack.append(i)
    return " ".join(map(str, out)) + "\n"


def next_greater_slow(text: str) -> str:
    data = text.split()
    n = int(data[0])
    a = list(map(int, data[1 : 1 + n]))
    out = []
    for i in range(n):
        nxt = -1
        for j in range(i + 1, n):
            if a[j] > a[i]:
                nxt = a[j]
                break
        out.append(nxt)
    return " ".join(map(str, out)) + "\n"


# --- shortest subarray with sum >= K (positive numbers) ----------------------------------------------------


def gen_shortest(n: int, rng: random.Random) -> str:
    a = [rng.randint(1, 100) for _ in range(n)]
    k = sum(a) // 2 + rng.randint(0, 50)
    return f"{n} {k}\n{' '.join(map(str, a))}\n"


def shortest_subarray(text: str) -> str:
    data = text.split()
    n, k = int(data[0]), int(data[1])
    a = list(map(int, data[2 : 2 + n]))
    best, s, i = n + 1, 0, 0
    for j, x in enumerate(a):
        s += x
        while s >= k:
            best = min(best, j - i + 1)
            s -= a[i]
            i += 1
    return f"{best if best <= n else -1}\n"


def shortest_subarray_slow(text: str) -> str:
    data = text.split()
    n, k = int(data[0]), int(data[1])
    a = list(map(int, data[2 : 2 + n]))
    best = n + 1
    for i in range(n):
        s = 0
        for j in range(i, n):
            s += a[j]
            if s >= k:
                best = min(best, j - i + 1)
                break
    return f"{best if best <= n else -1}\n"


# --- range sums, one query per element ----------------------------------------------------------------------


def gen_queries(n: int, rng: random.Random) -> str:
    lines = [f"{n} {n}", ints(n, rng)]
    for _ in range(n):
        lo = rng.randrange(n // 2 + 1)
        lines.append(f"{lo + 1} {rng.randrange(max(lo, n // 2), n) + 1}")
    return "\n".join(lines) + "\n"


def range_sums(text: str) -> str:
    data = text.split()
    n, q = int(data[0]), int(data[1])
    prefix = [0]
    for x in data[2 : 2 + n]:
        prefix.append(prefix[-1] + int(x))
    out = []
    pos = 2 + n
    for _ in range(q):
        lo, hi = int(data[pos]), int(data[pos + 1])
        pos += 2
        out.append(prefix[hi] - prefix[lo - 1])
    return "\n".join(map(str, out)) + "\n"


def range_sums_slow(text: str) -> str:
    data = text.split()
    n, q = int(data[0]), int(data[1])
    a = list(map(int, data[2 : 2 + n]))
    out = []
    pos = 2 + n
    for _ in range(q):
        lo, hi = int(data[pos]), int(data[pos + 1])
        pos += 2
        s = 0
        for k in range(lo - 1, hi):
            s += a[k]
        out.append(s)
    return "\n".join(map(str, out)) + "\n"


# --- simple linear scans ----------------------------------------------------------------------------------


def gen_brackets(n: int, rng: random.Random) -> str:
    s, depth = [], 0
    for _ in range(n):
        if depth and rng.random() < 0.5:
            s.append(")")
            depth -= 1
        else:
            s.append("(")
            depth += 1
    if rng.random() < 0.5:
        s += [")"] * depth
    return "".join(s) + "\n"


def balanced(text: str) -> str:
    depth = 0
    for c in text.strip():
        depth += 1 if c == "(" else -1
        if depth < 0:
            return "NO\n"
    return "YES\n" if depth == 0 else "NO\n"


def count_distinct(text: str) -> str:
    data = text.split()
    return f"{len(set(data[1 : 1 + int(data[0])]))}\n"


def gen_majority(n: int, rng: random.Random) -> str:
    major = rng.randint(1, 9)
    a = [major if rng.random() < 0.6 else rng.randint(1, 9) for _ in range(n)]
    return f"{n}\n{' '.join(map(str, a))}\n"


def majority(text: str) -> str:
    data = text.split()
    n = int(data[0])
    cand, count = None, 0
    for x in data[1 : 1 + n]:
        if count == 0:
            cand = x
        count += 1 if x == cand else -1
    real = sum(1 for x in data[1 : 1 + n] if x == cand)
    return f"{cand if 2 * real > n else -1}\n"


# --- inversions / LIS / sorting: O(n log n) with Python-level log factors -----------------------------------


def inversions(text: str) -> str:
    data = text.split()
    n = int(data[0])
    a = list(map(int, data[1 : 1 + n]))
    rank = {v: i + 1 for i, v in enumerate(sorted(set(a)))}
    m = len(rank)
    tree = [0] * (m + 1)
    total = 0
    for seen, v in enumerate(a):
        i, le = rank[v], 0
        while i > 0:
            le += tree[i]
            i -= i & -i
        total += seen - le
        i = rank[v]
        while i <= m:
            tree[i] += 1
            i += i & -i
    return f"{total}\n"


def inversions_slow(text: str) -> str:
    data = text.split()
    n = int(data[0])
    a = list(map(int, data[1 : 1 + n]))
    total = 0
    for i in range(n):
        for j in range(i + 1, n):
            if a[i] > a[j]:
                total += 1
    return f"{total}\n"


def lis(text: str) -> str:
    data = text.split()
    tails = []
    for x in map(int, data[1 : 1 + int(data[0])]):
        lo, hi = 0, len(tails)
        while lo < hi:
            mid = (lo + hi) // 2
            if tails[mid] < x:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(tails):
            tails.append(x)
        else:
            tails[lo] = x
    return f"{len(tails)}\n"


def lis_slow(text: str) -> str:
    data = text.split()
    n = int(data[0])
    a = list(map(int, data[1 : 1 + n]))
    best = [1] * n
    for i in range(n):
        for j in range(i):
            if a[j] < a[i] and best[j] + 1 > best[i]:
                best[i] = best[j] + 1
    return f"{max(best, default=0)}\n"


def sort_numbers(text: str) -> str:
    data = text.split()
    return " ".join(map(str, sorted(map(int, data[1 : 1 + int(data[0])])))) + "\n"


def sort_numbers_merge(text: str) -> str:
    data = text.split()
    a = list(map(int, data[1 : 1 + int(data[0])]))
    width, n = 1, len(a)
    while width < n:
        out = []
        for lo in range(0, n, 2 * width):
            left, right = a[lo : lo + width], a[lo + width : lo + 2 * width]
            i = j = 0
            while i < len(left) and j < len(right):
                if left[i] <= right[j]:
                    out.append(left[i])
                    i += 1
                else:
                    out.append(right[j])
                    j += 1
            out += left[i:]
            out += right[j:]
        a, width = out, width * 2
    return " ".join(map(str, a)) + "\n"


def sort_numbers_insertion(text: str) -> str:
    data = text.split()
    a = list(map(int, data[1 : 1 + int(data[0])]))
    for i in range(1, len(a)):
        x, j = a[i], i - 1
        while j >= 0 and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x
    return " ".join(map(str, a)) + "\n"


def gen_intervals(n: int, rng: random.Random) -> str:
    lines = [str(n)]
    for _ in range(n):
        lo = rng.randint(0, 10 * n)
        lines.append(f"{lo} {lo + rng.randint(1, 20)}")
    return "\n".join(lines) + "\n"


def union_length(text: str) -> str:
    data = text.split()
    n = int(data[0])
    spans = sorted((int(data[1 + 2 * i]), int(data[2 + 2 * i])) for i in range(n))
    total, end = 0, None
    for lo, hi in spans:
        if end is None or lo > end:
            total += hi - lo
            end = hi
        elif hi > end:
            total += hi - end
            end = hi
    return f"{total}\n"


def _spec(id, title, statement, generate, solve, complexity, sizes, examples=(), slow=(), **kw):
    labelled = (Solution(solve, complexity),) + tuple(slow)
    return StdioSpec(
        id, title, statement, generate, solve, complexity, sizes, examples=examples, labelled=labelled, **kw
    )


Q = QUADRATIC
SPECS = [
    _spec(
        "max_subarray",
        "Maximum subarray",
        "Print the largest sum of a non-empty contiguous subarray. Input: N, then N integers.",
        gen_array,
        max_subarray,
        "O(n)",
        LINEAR,
        (("5\n-2 1 -3 4 -1\n", "4\n"),),
        (Solution(max_subarray_slow, "O(n^2)", Q),),
    ),
    _spec(
        "stock_profit",
        "Buy once, sell once",
        "Prices p_1..p_N: print the best profit p_j - p_i with i < j (0 if none). Input: N, then N integers.",
        gen_array,
        stock_profit,
        "O(n)",
        LINEAR,
        (("4\n7 1 5 3\n", "4\n"),),
        (Solution(stock_profit_slow, "O(n^2)", Q),),
    ),
    _spec(
        "two_sum",
        "Two sum",
        "Print YES if two different positions hold numbers summing to T, else NO. Input: N T, then N integers.",
        gen_two_sum,
        two_sum,
        "O(n)",
        LINEAR,
        (("3 9\n2 7 4\n", "YES\n"),),
        (Solution(two_sum_slow, "O(n^2)", (200, 300, 400, 600, 800, 1200)),),
    ),
    _spec(
        "rain_water",
        "Trapping rain water",
        "Bars of heights h_1..h_N: print how much water they trap. Input: N, then N integers.",
        gen_heights,
        rain_water,
        "O(n)",
        LINEAR,
        (("6\n3 0 2 0 4 1\n", "7\n"),),
        (Solution(rain_water_slow, "O(n^2)", Q),),
    ),
    _spec(
        "next_greater",
        "Next greater element",
        "For each element print the first larger element to its right, or -1. Input: N, then N integers.",
        gen_mostly_decreasing,
        next_greater,
        "O(n)",
        LINEAR,
        (("4\n2 1 3 3\n", "3 3 -1 -1\n"),),
        (Solution(next_greater_slow, "O(n^2)", (100, 150, 200, 300, 400, 600)),),
    ),
    _spec(
        "shortest_subarray",
        "Shortest subarray with sum at least K",
        "All numbers positive: print the length of the shortest contiguous subarray with sum >= K, or -1. Input: N K, then N integers.",
        gen_shortest,
        shortest_subarray,
        "O(n)",
        LINEAR,
        (("4 7\n2 3 1 5\n", "3\n"),),
        (Solution(shortest_subarray_slow, "O(n^2)", (80, 120, 160, 240, 320, 480)),),
    ),
    _spec(
        "range_sums",
        "Range sums",
        "N integers and Q queries l r (1-based, inclusive): print each range's sum on its own line. Input: N Q, the integers, then Q lines.",
        gen_queries,
        range_sums,
        "O(n)",
        (500, 1000, 2000, 4000, 8000, 16000),
        (("3 2\n1 2 3\n1 2\n2 3\n", "3\n5\n"),),
        (Solution(range_sums_slow, "O(n^2)", (100, 150, 200, 300, 400, 600)),),
    ),
    _spec(
        "balanced_brackets",
        "Balanced brackets",
        "A string of ( and ): print YES if it is balanced, else NO.",
        gen_brackets,
        balanced,
        "O(n)",
        tuple(4 * n for n in LINEAR),
        (("(()())\n", "YES\n"), ("())(\n", "NO\n")),
    ),
    _spec(
        "count_distinct",
        "Distinct values",
        "Print how many distinct values the N integers take. Input: N, then N integers.",
        gen_array,
        count_distinct,
        "O(n)",
        LINEAR,
        (("5\n1 2 1 3 2\n", "3\n"),),
    ),
    _spec(
        "majority",
        "Majority element",
        "Print the value that occurs more than N/2 times, or -1. Input: N, then N integers.",
        gen_majority,
        majority,
        "O(n)",
        LINEAR,
        (("5\n2 1 2 3 2\n", "2\n"),),
    ),
    _spec(
        "inversions",
        "Count inversions",
        "Print the number of pairs i < j with a_i > a_j. Input: N, then N integers.",
        gen_wide,
        inversions,
        "O(n log n)",
        NLOGN,
        (("4\n3 1 2 1\n", "4\n"),),
        (Solution(inversions_slow, "O(n^2)", Q),),
    ),
    _spec(
        "lis",
        "Longest increasing subsequence",
        "Print the length of the longest strictly increasing subsequence. Input: N, then N integers.",
        gen_wide,
        lis,
        "O(n log n)",
        NLOGN,
        (("6\n10 9 2 5 3 7\n", "3\n"),),
        (Solution(lis_slow, "O(n^2)", Q),),
    ),
    _spec(
        "sort_numbers",
        "Sort numbers",
        "Print the N integers in non-decreasing order. Input: N, then N integers.",
        gen_array,
        sort_numbers,
        "O(n log n)",
        NLOGN,
        (("3\n3 1 2\n", "1 2 3\n"),),
        (
            Solution(sort_numbers_merge, "O(n log n)"),
            Solution(sort_numbers_insertion, "O(n^2)", (100, 150, 200, 300, 400, 600)),
        ),
    ),
    _spec(
        "interval_union",
        "Union of intervals",
        "Print the total length covered by N intervals [l, r]. Input: N, then N lines l r.",
        gen_intervals,
        union_length,
        "O(n log n)",
        NLOGN,
        (("3\n1 3\n2 5\n7 8\n", "5\n"),),
    ),
]
