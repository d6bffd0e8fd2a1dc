"""An optional collective check: every rank of a job loaded the same kernel commits (docs/clusters.md).

``check_ranks()`` is called by the user's training code once its kernels are loaded, on every rank of an existing
``torch.distributed`` process group. Variants may differ per node (a node of other GPUs loads another build of the
same commit); commits may not. Nothing here runs unless it is called: activation never imports it.
"""

from __future__ import annotations

from typing import Any

from kernlock.errors import RankMismatchError

__all__ = ["check_ranks", "disagreements", "loaded_commits"]


def loaded_commits() -> dict[str, str | None]:
    """This process's Hub kernels: repo -> commit as text, from ``kernels.get_loaded_kernels()`` (kernels 0.18 on
    report an ``Oid``, which can neither be sliced nor pickled for the gather)."""
    import kernels

    loaded = [k.repo_info for k in kernels.get_loaded_kernels() if k.repo_info is not None]
    return {str(info.repo_id): None if info.revision is None else str(info.revision) for info in loaded}


def disagreements(per_rank: list[dict[str, str | None]]) -> list[str]:
    """For each repo whose ranks did not all load one commit: ``org/name: <commit> on ranks 0, 1; not loaded on 2``."""
    found = []
    for repo in sorted({repo for loaded in per_rank for repo in loaded}):
        by_commit: dict[str, list[int]] = {}
        for rank, loaded in enumerate(per_rank):
            commit = loaded.get(repo)
            by_commit.setdefault(commit[:12] if commit else "not loaded", []).append(rank)
        if len(by_commit) > 1:
            parts = [f"{commit} on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
                     for commit, ranks in sorted(by_commit.items())]  # fmt: skip
            found.append(f"{repo}: {'; '.join(parts)}")
    return found


def check_ranks(group: Any = None) -> dict[str, str | None]:
    """Gather every rank's loaded kernel commits through ``group`` (default: the world) and raise RankMismatchError
    naming each repo whose ranks differ; returns this rank's ``repo -> commit``. Every rank must call it."""
    import torch.distributed as dist

    mine = loaded_commits()
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, mine, group=group)
    differ = disagreements(gathered)
    if differ:
        raise RankMismatchError(
            "the ranks loaded different kernel commits",
            why=" | ".join(differ),
            fix="give every node the same kernels.lock (`kernlock run -- <launcher>`, or `kernlock hook install "
            "--lockfile PATH` on each node's environment)",
        )
    return mine
