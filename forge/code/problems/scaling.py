"""Problems at the ends of the complexity scale: constant and logarithmic in a number n (each input asks a fixed
batch of queries about n, so the per-query cost is measurable), and exponential search over n items.

Every solve function is self-contained (imports inside): its source is what a submission looks like.
"""

from __future__ import annotations

import random

from forge.code.problems import Solution, StdioSpec

MAGNITUDES = tuple(2**k for k in (8, 16, 24, 32, 40, 48, 56))
EXPONENTIAL = (10, 11, 12, 13, 14, 15)


def gen_number(n: int, rng: random.Random) -> str:
    return f"{max(1, n - rng.randrange(max(1, n // 4)))}\n"


# --- O(1) ------------------------------------------------------------------------------------------------


def triangular(text: str) -> str:
    n = int(text.split()[0])
    return f"{sum((n + i) * (n + i + 1) // 2 for i in range(200)) % 1000000007}\n"


def triangular_loop(text: str) -> str:
    n = int(text.split()[0])
    total = 0
    for i in range(200):
        s = 0
        for k in range(1, n + i + 1):
            s += k
        total += s
    return f"{total % 1000000007}\n"


def grid_squares(text: str) -> str:
    n = int(text.split()[0])
    return f"{sum((n + i) * (n + i + 1) * (2 * (n + i) + 1) // 6 for i in range(200)) % 1000000007}\n"


def odd_sum(text: str) -> str:
    n = int(text.split()[0])
    return f"{sum((n + i) * (n + i) for i in range(200)) % 1000000007}\n"


# --- O(log n) ----------------------------------------------------------------------------------------------


def isqrt_sum(text: str) -> str:
    n = int(text.split()[0])
    total = 0
    for i in range(200):
        m = n + i
        lo, hi = 0, m + 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if mid * mid <= m:
                lo = mid
            else:
                hi = mid
        total += lo
    return f"{total}\n"


def factorial_zeros(text: str) -> str:
    n = int(text.split()[0])
    total = 0
    for i in range(200):
        m, zeros = n + i, 0
        while m:
            m //= 5
            zeros += m
        total += zeros
    return f"{total}\n"


def power_mod(text: str) -> str:
    n = int(text.split()[0])
    mod, total = 1000000007, 0
    for i in range(200):
        e, base, result = n + i, 3, 1
        while e:
            if e & 1:
                result = result * base % mod
            base = base * base % mod
            e >>= 1
        total += result
    return f"{total % mod}\n"


def power_mod_loop(text: str) -> str:
    n = int(text.split()[0])
    mod, total = 1000000007, 0
    for i in range(200):
        result = 1
        for _ in range(n + i):
            result = result * 3 % mod
        total += result
    return f"{total % mod}\n"


# --- O(2^n) -------------------------------------------------------------------------------------------------


def gen_weights(n: int, rng: random.Random) -> str:
    w = [rng.randint(1, 10**12) for _ in range(n)]
    return f"{n}\n{' '.join(map(str, w))}\n"


def partition_difference(text: str) -> str:
    data = text.split()
    n = int(data[0])
    w = list(map(int, data[1 : 1 + n]))
    total, best = sum(w), None
    for mask in range(1 << n):
        s, i = 0, 0
        while mask >> i:
            if mask >> i & 1:
                s += w[i]
            i += 1
        diff = abs(total - 2 * s)
        best = diff if best is None or diff < best else best
    return f"{best}\n"


def gen_subset_target(n: int, rng: random.Random) -> str:
    w = [rng.randint(1, 30) for _ in range(n)]
    return f"{n} {sum(w) // 2}\n{' '.join(map(str, w))}\n"


def subset_count(text: str) -> str:
    data = text.split()
    n, target = int(data[0]), int(data[1])
    w = list(map(int, data[2 : 2 + n]))
    count = 0
    for mask in range(1 << n):
        s = 0
        for i in range(n):
            if mask >> i & 1:
                s += w[i]
        count += s == target
    return f"{count}\n"


def gen_graph_edges(n: int, rng: random.Random) -> str:
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.5]
    return f"{n} {len(edges)}\n" + "".join(f"{i + 1} {j + 1}\n" for i, j in edges)


def max_clique(text: str) -> str:
    data = text.split()
    n, m = int(data[0]), int(data[1])
    adj = [0] * n
    for k in range(m):
        i, j = int(data[2 + 2 * k]) - 1, int(data[3 + 2 * k]) - 1
        adj[i] |= 1 << j
        adj[j] |= 1 << i
    best = 0
    for mask in range(1, 1 << n):
        size = mask.bit_count()
        if size <= best:
            continue
        ok = all(not (mask >> i & 1) or (mask & ~(1 << i)) & ~adj[i] == 0 for i in range(n))
        if ok:
            best = size
    return f"{best}\n"


def _spec(id, title, statement, generate, solve, complexity, sizes, examples, slow=(), **kw):
    labelled = (Solution(solve, complexity),) + tuple(slow)
    return StdioSpec(
        id, title, statement, generate, solve, complexity, sizes, examples=examples, labelled=labelled, **kw
    )


BATCH = "For each of the 200 values m = n, n+1, ..., n+199"
SMALL = (1, 2, 3, 5, 8, 13, 100, 10**6, 10**12)
SPECS = [
    _spec(
        "triangular",
        "Triangular numbers",
        f"{BATCH} add m(m+1)/2; print the total modulo 1000000007. Input: n.",
        gen_number,
        triangular,
        "O(1)",
        MAGNITUDES,
        (("1\n", "1353400\n"),),
        (Solution(triangular_loop, "O(n)", (64, 128, 256, 512, 1024, 2048)),),
        test_sizes=SMALL,
    ),
    _spec(
        "grid_squares",
        "Squares in a grid",
        f"{BATCH} add the number of squares in an m x m grid; print the total modulo 1000000007. Input: n.",
        gen_number,
        grid_squares,
        "O(1)",
        MAGNITUDES,
        (("1\n", "136016700\n"),),
        test_sizes=SMALL,
    ),
    _spec(
        "square_sum",
        "Sums of odd numbers",
        f"{BATCH} add the sum of the first m odd numbers; print the total modulo 1000000007. Input: n.",
        gen_number,
        odd_sum,
        "O(1)",
        MAGNITUDES,
        (("1\n", "2686700\n"),),
        test_sizes=SMALL,
    ),
    _spec(
        "isqrt_sum",
        "Integer square roots",
        f"{BATCH} add floor(sqrt(m)); print the total. Input: n.",
        gen_number,
        isqrt_sum,
        "O(log n)",
        MAGNITUDES,
        (("1\n", "1799\n"),),
        test_sizes=SMALL,
    ),
    _spec(
        "factorial_zeros",
        "Trailing zeros of factorials",
        f"{BATCH} add the number of trailing zeros of m!; print the total. Input: n.",
        gen_number,
        factorial_zeros,
        "O(log n)",
        MAGNITUDES,
        (("1\n", "4724\n"),),
        test_sizes=SMALL,
    ),
    _spec(
        "power_mod",
        "Powers of three",
        f"{BATCH} add 3^m modulo 1000000007; print the total modulo 1000000007. Input: n.",
        gen_number,
        power_mod,
        "O(log n)",
        MAGNITUDES,
        (("1\n", "204477246\n"),),
        (Solution(power_mod_loop, "O(n)", (64, 128, 256, 512, 1024, 2048)),),
        test_sizes=SMALL,
    ),
    _spec(
        "partition",
        "Balanced partition",
        "Split N weights into two groups; print the smallest possible difference of their sums. Input: N, then N integers (up to 10^12).",
        gen_weights,
        partition_difference,
        "O(2^n)",
        EXPONENTIAL,
        (("3\n1 2 4\n", "1\n"),),
        test_sizes=(1, 2, 3, 5, 8),
    ),
    _spec(
        "subset_count",
        "Subsets with a given sum",
        "Print how many of the 2^N subsets of the weights sum exactly to T. Input: N T, then N integers.",
        gen_subset_target,
        subset_count,
        "O(2^n)",
        EXPONENTIAL,
        (("3 3\n1 2 3\n", "2\n"),),
        test_sizes=(1, 2, 3, 5, 8),
    ),
    _spec(
        "max_clique",
        "Maximum clique",
        "An undirected graph on N vertices and M edges: print the size of its largest clique. Input: N M, then M lines u v.",
        gen_graph_edges,
        max_clique,
        "O(2^n)",
        EXPONENTIAL,
        (("3 2\n1 2\n2 3\n", "2\n"),),
        test_sizes=(1, 2, 3, 5, 8),
    ),
]
