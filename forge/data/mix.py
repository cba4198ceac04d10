"""The SFT mix: rows drawn from the per-domain pools so that each domain's TOKEN share hits its target.

Targets are ``cfg.shares.normalized()`` of ``cfg.total_tokens`` (the paper's 27/26/23/13/10 add up to 99, so
they are read as weights). Tokens are counted by an injected ``count_tokens(ChatSample) -> int`` (in the
recipe: the chat-template tokenizer), so the shares are those the trainer will actually see.

    manifest = build_mix({"code": "data/pools/code.jsonl", ...}, cfg.mix, count_tokens, ws.mixes / cfg.mix.name,
                         heldout_rows=cfg.eval.heldout_rows)

Output directory (written as a whole, atomically): ``train-0000-of-000N.jsonl`` shards, ``heldout.jsonl``
(rows per domain never in train, for the SFT held-out loss) and ``manifest.json``. No timestamps go into the
manifest, so the same pools, config and counter always give byte-identical output.

With §2.1.1's Solution Refinement and CoT Reconstruction (forge/data/refinement.py), that mix is a draft: the
refined rows replace the rows they were made from, and the mix written for SFT adds ``refinement-pairs.jsonl``
(refined-over-draft pairs for the point-wise RM) and a ``refinement`` entry in its manifest:

    manifest = write_refined_mix(draft_dir, ws.mixes / cfg.mix.name, rows, pairs, count_tokens, counts)
"""

from __future__ import annotations

import hashlib
import json
import random
from array import array
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

from pydantic import BaseModel

from forge.atomic import atomic_dir
from forge.config import MixConfig
from forge.data.jsonl import dump_row, open_bytes, read_jsonl, read_row_at, scan_jsonl, write_jsonl
from forge.data.schemas import ChatSample, PreferencePair
from forge.errors import InputError


class MixError(InputError):
    """The mix cannot be built as configured (e.g. a pool holds fewer tokens than its target)."""


class DomainStats(BaseModel):
    rows: int
    tokens: int
    target_tokens: int
    target_share: float
    actual_share: float
    heldout_rows: int
    pool_rows: int


class Manifest(BaseModel):
    name: str
    total_tokens: int
    target_total_tokens: int
    domains: dict[str, DomainStats]
    shards: list[str]
    heldout_file: str
    sources: dict[str, str]  # domain → sha256 of the pool (file bytes, or the serialized rows)
    config: dict
    review: dict | None = None  # what reviewers' verdicts changed in the pools (turns masked, trajectories dropped)
    refinement: dict | None = None  # what §2.1.1's refinement steps changed in the train rows (write_refined_mix)

    def max_share_error(self) -> float:
        return max(abs(d.actual_share - d.target_share) for d in self.domains.values())


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class _Pool:
    """One domain's pool as the mix reads it: every good row's id, and a way to read any row again.

    A pool file is read once, a row at a time, keeping only each row's id and byte offset; the rows the mix takes
    are parsed again when their tokens are counted and when they are written. So memory grows with the pool's row
    count, not its text (tests/data/test_mix.py measures it). A list of rows is its own index."""

    def __init__(self, pool: list[ChatSample] | str | Path, cfg: MixConfig, stack: ExitStack):
        if isinstance(pool, (str, Path)):
            self.ids, self._offsets = [], array("q")
            for offset, row in scan_jsonl(pool, ChatSample, max_bad_ratio=cfg.max_bad_ratio):
                self.ids.append(row.id)
                self._offsets.append(offset)
            self._file = stack.enter_context(open_bytes(Path(pool)))
            self._rows = None
            self.sha256 = _sha256_file(Path(pool))
        else:
            self._rows = list(pool)
            self.ids = [r.id for r in self._rows]
            self.sha256 = hashlib.sha256("".join(dump_row(r) + "\n" for r in self._rows).encode()).hexdigest()

    def row(self, i: int) -> ChatSample:
        if self._rows is not None:
            return self._rows[i]
        return read_row_at(self._file, self._offsets[i], ChatSample)


def _heldout_quota(domains: list[str], heldout_rows: int) -> dict[str, int]:
    """Split ``heldout_rows`` over the domains (at least one each), remainder to the first domains."""
    base, extra = divmod(max(heldout_rows, len(domains)), len(domains))
    return {d: base + (1 if i < extra else 0) for i, d in enumerate(domains)}


def _select(rows: list[int], tokens_of: Callable[[int], int], target: int) -> tuple[list[int], int]:
    """Greedy fill in the given (shuffled) order: take a row if it still fits under the target; stop once the
    remaining gap is smaller than every row could close. Returns (rows, tokens)."""
    chosen, total = [], 0
    close_enough = max(1, target // 1000)  # stop scanning (and counting) once within 0.1% of the target
    for row in rows:
        if target - total <= close_enough:
            break
        n = tokens_of(row)
        if total + n <= target or (target - total) * 2 > n:
            # Overshooting by less than the row's half is closer to the target than leaving the gap open.
            chosen.append(row)
            total += n
    return chosen, total


def build_mix(
    pools: dict[str, list[ChatSample]] | dict[str, Path],
    cfg: MixConfig,
    count_tokens: Callable[[ChatSample], int],
    out_dir: Path,
    heldout_rows: int,
    review: dict | None = None,
) -> Manifest:
    """Choose rows per domain to match the token shares, write shards + heldout + manifest; return the manifest.

    Pools are streamed (:class:`_Pool`): a row's tokens are counted only when the greedy fill reaches it, and the
    output is written a row at a time, so a mix of billions of tokens builds in memory bounded by the row count.

    Raises :class:`MixError` when a domain's pool (minus its held-out rows) has fewer tokens than its target,
    or when the resulting shares miss their targets by more than ``cfg.tolerance``.
    """
    shares = cfg.shares.normalized()
    domains = [d for d in shares if shares[d] > 0]
    missing = [d for d in domains if d not in pools]
    if missing:
        raise MixError(f"no pool given for domain(s) {', '.join(missing)} (have: {', '.join(sorted(pools))})")
    quota = _heldout_quota(domains, heldout_rows)
    with ExitStack() as stack:
        index: dict[str, _Pool] = {}
        train: dict[str, list[int]] = {}
        heldout: dict[str, list[int]] = {}
        pool_sizes: dict[str, int] = {}
        train_tokens: dict[str, int] = {}
        seen_ids: set[str] = set()
        for domain in domains:
            pool = index[domain] = _Pool(pools[domain], cfg, stack)
            unique = []
            for i, rid in enumerate(pool.ids):
                if rid not in seen_ids:  # a row can sit in only one place: train of one domain, or heldout
                    seen_ids.add(rid)
                    unique.append(i)
            pool_sizes[domain] = len(unique)
            order = sorted(unique, key=lambda i, ids=pool.ids: ids[i])  # the file's order must not matter
            random.Random(f"{cfg.seed}:{domain}").shuffle(order)
            heldout[domain], candidates = order[: quota[domain]], order[quota[domain] :]
            target = round(shares[domain] * cfg.total_tokens)
            train[domain], train_tokens[domain] = _select(candidates, lambda i, p=pool: int(count_tokens(p.row(i))),
                                                          target)
            if train_tokens[domain] < target and len(train[domain]) == len(candidates):
                raise MixError(
                    f"pool for domain {domain!r} is too small: the mix needs {target} tokens ({shares[domain]:.1%} "
                    f"of {cfg.total_tokens}) but the pool has only {train_tokens[domain]} tokens in "
                    f"{len(candidates)} rows after holding out {len(heldout[domain])}; grow the pool "
                    f"(pools.max_rows_per_source) or lower mix.total_tokens"
                )

        total = sum(train_tokens.values())
        stats = {
            d: DomainStats(rows=len(train[d]), tokens=train_tokens[d],
                           target_tokens=round(shares[d] * cfg.total_tokens), target_share=shares[d],
                           actual_share=train_tokens[d] / total if total else 0.0, heldout_rows=len(heldout[d]),
                           pool_rows=pool_sizes[d])
            for d in domains
        }
        all_train = [(d, i) for d in domains for i in train[d]]
        random.Random(f"{cfg.seed}:shards").shuffle(all_train)
        shard_names = [f"train-{i:04d}-of-{cfg.num_shards:04d}.jsonl" for i in range(cfg.num_shards)]
        manifest = Manifest(name=cfg.name, total_tokens=total, target_total_tokens=cfg.total_tokens, domains=stats,
                            shards=shard_names, heldout_file="heldout.jsonl",
                            sources={d: index[d].sha256 for d in domains}, config=cfg.model_dump(mode="json"),
                            review=review)
        if manifest.max_share_error() > cfg.tolerance:
            worst = max(stats, key=lambda d: abs(stats[d].actual_share - stats[d].target_share))
            raise MixError(f"domain {worst!r} share {stats[worst].actual_share:.4f} misses its target "
                           f"{stats[worst].target_share:.4f} by more than {cfg.tolerance} (rows are too long for "
                           f"the token budget: raise mix.total_tokens)")
        with atomic_dir(out_dir) as tmp:
            for k, name in enumerate(shard_names):
                write_jsonl(tmp / name, (index[d].row(i) for d, i in all_train[k :: cfg.num_shards]))
            write_jsonl(tmp / "heldout.jsonl", (index[d].row(i) for d in domains for i in heldout[d]))
            (tmp / "manifest.json").write_text(
                json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
    return manifest


REFINEMENT_PAIRS = "refinement-pairs.jsonl"


def write_refined_mix(
    draft_dir: Path,
    out_dir: Path,
    refined: list[ChatSample],
    pairs: list[PreferencePair],
    count_tokens: Callable[[ChatSample], int],
    counts: dict[str, int],
) -> Manifest:
    """The draft mix with every refined row in the place of the train row it was made from (its first parent):
    same shards, same row count, same held-out rows. The manifest's token counts and shares are those of the rows
    written; ``counts`` (what each refinement step changed) goes in as its ``refinement`` entry, next to the file
    of the refined-over-draft ``pairs``.

    Raises :class:`MixError` when a refined row's parent is not a train row of the draft, or two rows share one.
    """
    draft = read_manifest(draft_dir)
    by_parent: dict[str, ChatSample] = {}
    for row in refined:
        parent = row.parents[0] if row.parents else None
        if parent in by_parent:
            raise MixError(f"two refined rows replace the same row {parent}")
        by_parent[parent] = row
    tokens = {d: s.tokens for d, s in draft.domains.items()}

    def replaced(shard: Path) -> Iterator[ChatSample]:  # a shard's rows, one at a time, refined ones swapped in
        for _, row in scan_jsonl(shard, ChatSample):
            new = by_parent.pop(row.id, None)
            if new is not None:
                tokens[row.domain] += count_tokens(new) - count_tokens(row)
            yield row if new is None else new

    with atomic_dir(out_dir) as tmp:
        for name in draft.shards:
            write_jsonl(tmp / name, replaced(Path(draft_dir) / name))
        if by_parent:
            raise MixError(f"{len(by_parent)} refined row(s) name a parent that is not a train row of {draft_dir}, "
                           f"e.g. {next(iter(by_parent))}")
        total = sum(tokens.values())
        domains = {d: s.model_copy(update={"tokens": tokens[d], "actual_share": tokens[d] / total if total else 0.0})
                   for d, s in draft.domains.items()}
        manifest = draft.model_copy(update={"total_tokens": total, "domains": domains,
                                            "refinement": {**counts, "pairs_file": REFINEMENT_PAIRS}})
        write_jsonl(tmp / draft.heldout_file, (r for _, r in scan_jsonl(Path(draft_dir) / draft.heldout_file,
                                                                          ChatSample)))
        write_jsonl(tmp / REFINEMENT_PAIRS, pairs)
        (tmp / "manifest.json").write_text(json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
    return manifest


def read_refinement_pairs(mix_dir: str | Path) -> list[PreferencePair]:
    """The refined-over-draft pairs a refined mix carries (none for a mix built without refinement)."""
    path = Path(mix_dir) / REFINEMENT_PAIRS
    return read_jsonl(path, PreferencePair).rows if path.exists() else []


def read_manifest(mix_dir: Path) -> Manifest:
    return Manifest.model_validate_json((Path(mix_dir) / "manifest.json").read_text())


class MixRows:
    """The mix's training rows (every shard, in order) without holding them: iterating reads them a row at a time
    (what SFT tokenizes, forge/training/sft.py), and ``rows[i]`` reads the i-th row from its shard by byte offset
    (the RL stages draw their prompts in a seeded order: forge/training/pairs.py). The offsets, 16 bytes a row, are
    indexed on first use. Small and picklable (a path; the index is rebuilt where it is needed), so a launched
    stage hands it to its ranks as is. A 2B-token mix is never held whole."""

    def __init__(self, mix_dir: str | Path) -> None:
        self.mix_dir = Path(mix_dir)
        self._index: tuple[list[Path], array, array] | None = None  # shards, shard number and offset per row

    def _shards(self) -> list[Path]:
        return sorted(self.mix_dir.glob("train-*.jsonl"))

    def __iter__(self) -> Iterator[ChatSample]:
        for shard in self._shards():
            for _, row in scan_jsonl(shard, ChatSample):
                yield row

    def _indexed(self) -> tuple[list[Path], array, array]:
        if self._index is None:
            shards, which, offsets = self._shards(), array("l"), array("q")
            for number, shard in enumerate(shards):
                for offset, _ in scan_jsonl(shard, ChatSample):
                    which.append(number)
                    offsets.append(offset)
            self._index = (shards, which, offsets)
        return self._index

    def __len__(self) -> int:
        return len(self._indexed()[1])

    def __getitem__(self, i: int) -> ChatSample:
        shards, which, offsets = self._indexed()
        with open(shards[which[i]], "rb") as fh:
            return read_row_at(fh, offsets[i], ChatSample)

    def __getstate__(self) -> dict:
        return {"mix_dir": self.mix_dir, "_index": None}

    def __repr__(self) -> str:
        return f"MixRows({str(self.mix_dir)!r})"


def read_mix(mix_dir: str | Path) -> tuple[list[ChatSample], list[ChatSample]]:
    """The mix's training rows (every shard, in order), held whole, and its held-out rows."""
    return list(MixRows(mix_dir)), read_heldout(mix_dir)


def read_heldout(mix_dir: str | Path) -> list[ChatSample]:
    """The mix's held-out rows only (what a stage scores its policy on, without reading the training shards)."""
    return read_jsonl(Path(mix_dir) / "heldout.jsonl", ChatSample).rows
