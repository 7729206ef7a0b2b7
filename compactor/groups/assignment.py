"""Sticky assignment (Kafka's cooperative-sticky): who should own each partition of a topic.

Computed by every member from the same group document, so all agree without a leader. Each live subscriber
gets ``n // m`` partitions, and ``n % m`` of them one more (those that hold the most now, then by id); a member
keeps what it holds up to its share (lowest partitions first), and only the rest moves: the partitions nobody
live holds, and each holder's surplus, go to the members below their share (largest shortfall first, then by
id). So a join moves only the partitions the newcomer needs, and a leave only the leaver's.

A partition moves in two steps (``groups.rules``): its holder releases it at its next poll, after its rebalance
listener had the chance to commit (``on_partitions_revoked``); the member it goes to claims it at its own next
poll. Until then the holder keeps it: no partition is ever read by two members, and none is lost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def sticky_targets(partitions: int, subscribers: Sequence[str], holders: Mapping[int, str]) -> dict[str, set[int]]:
    """member -> the partitions of one topic it should own. ``holders``: partition -> its live owner, for the
    partitions a live subscriber holds now (others are free)."""
    members = sorted(set(subscribers))
    if not members:
        return {}
    held: dict[str, list[int]] = {m: [] for m in members}
    for partition in range(partitions):
        owner = holders.get(partition)
        if owner in held:
            held[owner].append(partition)
    base, extra = divmod(partitions, len(members))
    order = sorted(members, key=lambda m: (-len(held[m]), m))
    share = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
    target = {m: set(held[m][:share[m]]) for m in members}
    taken = set().union(*target.values())
    for partition in (p for p in range(partitions) if p not in taken):
        neediest = min(members, key=lambda m: (len(target[m]) - share[m], m))
        target[neediest].add(partition)
    return target
