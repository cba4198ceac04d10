"""Quadratic and cubic stdin/stdout problems (dynamic programming, pair and triple counting, all-pairs paths)
with optimal references, and a brute force one class above where the gap is visible.

Every solve function is self-contained (imports inside): its source is what a submission looks like.
"""

from __future__ import annotations

import random

from forge.code.problems import Solution, StdioSpec
from forge.code.problems.classic import CUBIC, QUADRATIC, ints

# --- quadratic DP ------------------------------------------------------------------------------------------


def gen_two_strings(n: int, rng: random.Random) -> str:
    return "".join(rng.choice("abc") for _ in range(n)) + "\n" + "".join(rng.choice("abc") for _ in range(n)) + "\n"


def edit_distance(text: str) -> str:
    s, t = (text.split() + ["", ""])[:2]
    prev = list(range(len(t) + 1))
    for i, a in enumerate(s, 1):
        cur = [i]
        for j, b in enumerate(t, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a != b)))
        prev = cur
    return f"{prev[-1]}\n"


def lcs(text: str) -> str:
    s, t = (text.split() + ["", ""])[:2]
    prev = [0] * (len(t) + 1)
    for a in s:
        cur = [0]
        for j, b in enumerate(t, 1):
            cur.append(prev[j - 1] + 1 if a == b else max(prev[j], cur[j - 1]))
        prev = cur
    return f"{prev[-1]}\n"


def gen_word(n: int, rng: random.Random) -> str:
    return "".join(rng.choice("ab") for _ in range(n)) + "\n"


def palindromic_subsequence(text: str) -> str:
    s = text.strip()
    n = len(s)
    if n == 0:
        return "0\n"
    dp = [0] * n
    for i in range(n - 1, -1, -1):
        new = [0] * n
        new[i] = 1
        for j in range(i + 1, n):
            new[j] = dp[j - 1] + 2 if s[i] == s[j] else max(dp[j], new[j - 1])
        dp = new
    return f"{dp[n - 1]}\n"


def gen_distinct(n: int, rng: random.Random) -> str:
    a = rng.sample(range(-5 * n - 5, 5 * n + 5), n)
    return f"{n}\n{' '.join(map(str, a))}\n"


def three_sum(text: str) -> str:
    data = text.split()
    n = int(data[0])
    a = sorted(map(int, data[1 : 1 + n]))
    count = 0
    for i in range(n):
        j, k = i + 1, n - 1
        while j < k:
            s = a[i] + a[j] + a[k]
            if s == 0:
                count += 1
                j += 1
                k -= 1
            elif s < 0:
                j += 1
            else:
                k -= 1
    return f"{count}\n"


def three_sum_slow(text: str) -> str:
    data = text.split()
    n = int(data[0])
    a = list(map(int, data[1 : 1 + n]))
    count = 0
    for i in range(n):
        for j in range(i + 1, n):
            for k in range(j + 1, n):
                if a[i] + a[j] + a[k] == 0:
                    count += 1
    return f"{count}\n"


# --- cubic -------------------------------------------------------------------------------------------------


def gen_graph(n: int, rng: random.Random) -> str:
    rows = [str(n)]
    for i in range(n):
        rows.append(" ".join("0" if i == j else str(rng.randint(1, 100)) for j in range(n)))
    return "\n".join(rows) + "\n"


def all_pairs_shortest(text: str) -> str:
    data = text.split()
    n = int(data[0])
    d = [list(map(int, data[1 + i * n : 1 + (i + 1) * n])) for i in range(n)]
    for k in range(n):
        dk = d[k]
        for i in range(n):
            di, dik = d[i], d[i][k]
            for j in range(n):
                di[j] = min(di[j], dik + dk[j])
    return f"{sum(map(sum, d))}\n"


def gen_dims(n: int, rng: random.Random) -> str:
    return f"{n}\n{ints(n + 1, rng, 1, 100)}\n"


def matrix_chain(text: str) -> str:
    data = text.split()
    n = int(data[0])
    p = list(map(int, data[1 : 2 + n]))
    cost = [[0] * n for _ in range(n)]
    for length in range(2, n + 1):
        for i in range(n - length + 1):
            j = i + length - 1
            cost[i][j] = min(cost[i][k] + cost[k + 1][j] + p[i] * p[k + 1] * p[j + 1] for k in range(i, j))
    return f"{cost[0][n - 1] if n else 0}\n"


def _spec(id, title, statement, generate, solve, complexity, sizes, examples=(), slow=(), **kw):
    labelled = (Solution(solve, complexity), *slow)
    return StdioSpec(
        id, title, statement, generate, solve, complexity, sizes, examples=examples, labelled=labelled, **kw
    )


Q = QUADRATIC
SPECS = [
    _spec(
        "edit_distance",
        "Edit distance",
        "Print the Levenshtein distance between two words (one per line).",
        gen_two_strings,
        edit_distance,
        "O(n^2)",
        Q,
        (("kitten\nsitting\n", "3\n"),),
    ),
    _spec(
        "lcs",
        "Longest common subsequence",
        "Print the length of the longest common subsequence of two words (one per line).",
        gen_two_strings,
        lcs,
        "O(n^2)",
        Q,
        (("abcde\nace\n", "3\n"),),
    ),
    _spec(
        "palindromic_subsequence",
        "Longest palindromic subsequence",
        "Print the length of the longest palindromic subsequence of a word.",
        gen_word,
        palindromic_subsequence,
        "O(n^2)",
        Q,
        (("bbbab\n", "4\n"),),
    ),
    _spec(
        "three_sum",
        "Zero-sum triples",
        "N distinct integers: print how many triples (i < j < k) sum to 0. Input: N, then N integers.",
        gen_distinct,
        three_sum,
        "O(n^2)",
        (100, 150, 200, 300, 400, 600),
        (("5\n-1 0 1 2 -2\n", "2\n"),),
        (Solution(three_sum_slow, "O(n^3)", CUBIC),),
    ),
    _spec(
        "all_pairs_shortest",
        "All-pairs shortest paths",
        "A complete directed graph's N x N weight matrix: print the sum of all shortest-path distances. Input: N, then N rows.",
        gen_graph,
        all_pairs_shortest,
        "O(n^3)",
        CUBIC,
        (("2\n0 5\n1 0\n", "6\n"),),
        test_sizes=(1, 2, 3, 5, 8),
    ),
    _spec(
        "matrix_chain",
        "Matrix chain multiplication",
        "N matrices with dimensions p_0 x p_1, ..., p_{N-1} x p_N: print the fewest scalar multiplications to multiply them. Input: N, then N+1 integers.",
        gen_dims,
        matrix_chain,
        "O(n^3)",
        CUBIC,
        (("3\n10 30 5 60\n", "4500\n"),),
    ),
]
