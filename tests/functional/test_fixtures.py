"""Tests of kernlock.testing.fixtures: git-level checks of the repositories, the builds' code on the CPU, and
end-to-end loads through the local Hub with the real kernels and transformers (in fresh processes)."""

from __future__ import annotations

import hashlib
import json
import platform
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from envs import clean_env

from kernlock.testing import HubServer
from kernlock.testing.fixtures import (
    CPU_VARIANT,
    TRANSFORMERS_FLASH_ATTN2_VERSION,
    Catalog,
    KernelRepo,
    build_benchmark_catalog,
    build_catalog,
    catalog_matrix,
    create_kernel_repo,
    is_noarch,
    move_branch,
    open_kernel_repo,
    read_identity,
    read_organizations,
    standard_variants,
    today_variants,
    variant_backend,
    without_cpu,
)

THIS_MACHINE = (
    platform.system() == "Linux"
    and platform.machine() == "x86_64"
    and torch.__version__.startswith("2.13")
    and not torch.cuda.is_available()
)
needs_this_machine = pytest.mark.skipif(not THIS_MACHINE, reason="expects torch 2.13 CPU on x86_64 Linux")

# What kernels picks on this machine for each branch of the catalog (None: no build loads here).
EXPECTED_CPU_PICK = {
    "kernels-community/flash-attn2": {"v1": None, "v2": CPU_VARIANT, "v3": CPU_VARIANT, "v4": CPU_VARIANT, "v5": None},
    "kernels-community/activation": {"v1": CPU_VARIANT, "v2": CPU_VARIANT},
    "kernels-community/triton-layer-norm": {"v1": "torch-universal"},
    "kernels-community/flash-attn4": {"v0": "torch-cpu"},
    "kernels-community/paged-attention": {"v1": CPU_VARIANT, "v2": CPU_VARIANT},
    "someone/fast-gelu": {"v1": CPU_VARIANT},
    "kernels-community/rotary": {"v1": CPU_VARIANT, "v2": None},
}
_LFS_RE = re.compile(rb"version https://git-lfs\.github\.com/spec/v1\noid sha256:([0-9a-f]{64})\nsize (\d+)\n")


def git(repo: KernelRepo | Path, *args: str) -> str:
    path = repo.path if isinstance(repo, KernelRepo) else repo
    return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=True).stdout.strip()


def read_blobs(repo: KernelRepo, specs: list[str]) -> list[bytes]:
    """Contents of ``rev:path`` objects through one ``git cat-file --batch``."""
    proc = subprocess.run(
        ["git", "-C", str(repo.path), "cat-file", "--batch"],
        input=("\n".join(specs) + "\n").encode(),
        capture_output=True,
        check=True,
    )
    out, pos, blobs = proc.stdout, 0, []
    for spec in specs:
        header_end = out.index(b"\n", pos)
        header = out[pos:header_end].split()
        assert header[1] != b"missing", spec
        size = int(header[2])
        blobs.append(out[header_end + 1 : header_end + 1 + size])
        pos = header_end + 1 + size + 1
    return blobs


def branch_files(repo: KernelRepo, rev: str) -> dict[str, str]:
    """``{path: blob sha}`` of every file under ``build/`` at ``rev``."""
    lines = git(repo, "ls-tree", "-r", rev, "build").splitlines()
    return {line.split("\t", 1)[1]: line.split()[2] for line in lines}


# ------------------------------------------------------------------------------------------------ git level


def test_refs_main_and_tags(catalog: Catalog) -> None:
    matrix = catalog_matrix()
    assert sorted(catalog.repo_ids) == sorted(matrix)
    for repo_id, branches in matrix.items():
        repo = catalog.repo(repo_id)
        assert set(repo.branches()) == {"main", *branches}
        assert git(repo, "ls-tree", "--name-only", "main").split() == [".gitattributes", "README.md"]
        assert git(repo, "status", "--porcelain") == ""  # a normal, clean work tree on main
        assert (repo.path / "README.md").is_file()
        for branch in branches:  # every version branch starts from main
            assert git(repo, "merge-base", "main", branch) == repo.head("main")

    fa2 = catalog.repo(catalog.flash_attn2)
    repo_id, tag = catalog.old_tag
    assert repo_id == catalog.flash_attn2
    assert git(fa2, "cat-file", "-t", f"refs/tags/{tag}") == "tag"  # annotated
    assert fa2.tags()[tag] == fa2.head(f"{tag}^{{commit}}") == fa2.head("v1~1")  # an old commit of v1
    assert fa2.tags()[tag] != fa2.head("v1")
    act = catalog.repo(catalog.light_tag[0])
    assert git(act, "cat-file", "-t", f"refs/tags/{catalog.light_tag[1]}") == "commit"
    assert act.tags() == {catalog.light_tag[1]: act.head("v2")}
    assert read_organizations(catalog.root) == {
        "kernels-community": {"trustedKernelPublisher": True},
        "someone": {"trustedKernelPublisher": False},
    }


def test_branch_variants_as_declared(catalog: Catalog) -> None:
    from kernels.variants import parse_variant

    for repo_id, branches in catalog_matrix().items():
        repo = catalog.repo(repo_id)
        for branch, declared in branches.items():
            assert repo.variants(branch) == sorted(declared), (repo_id, branch)
            assert sorted(repo.builds(branch)) == sorted(declared)
            for variant in declared:
                assert parse_variant(variant).variant_str == variant
    fa2 = catalog_matrix()[catalog.flash_attn2]
    assert len(fa2["v4"]) == 42 and len(standard_variants()) == 26 and len(today_variants()) == 14
    assert without_cpu(fa2["v5"]) == fa2["v5"]
    assert (
        without_cpu(catalog_matrix()[catalog.newest_without_cpu]["v2"])
        == catalog_matrix()[catalog.newest_without_cpu]["v2"]
    )


def test_lfs_pointers_and_objects(catalog: Catalog) -> None:
    checked = 0
    for repo_id, branches in catalog_matrix().items():
        repo = catalog.repo(repo_id)
        assert "*.so filter=lfs" in (repo.path / ".gitattributes").read_text()
        for branch in branches:
            files = branch_files(repo, branch)
            sos = sorted(p for p in files if p.endswith(".so"))
            pointers = read_blobs(repo, [f"{branch}:{p}" for p in sos])
            for path, pointer in zip(sos, pointers, strict=True):
                m = _LFS_RE.fullmatch(pointer)
                assert m, (repo_id, branch, path, pointer[:80])
                oid, size = m.group(1).decode(), int(m.group(2))
                content = repo.lfs_object(oid).read_bytes()
                assert hashlib.sha256(content).hexdigest() == oid
                assert len(content) == size == 4096
                checked += 1
            for variant in repo.variants(branch):
                n_so = sum(1 for p in sos if p.startswith(f"build/{variant}/"))
                assert n_so == (0 if is_noarch(variant) else 1), (repo_id, branch, variant)
    assert checked > 250


def test_metadata_and_identity_of_every_build(catalog: Catalog) -> None:
    from kernels._rust import Metadata

    build_ids: set[str] = set()
    for repo_id, branches in catalog_matrix().items():
        repo = catalog.repo(repo_id)
        name = repo_id.split("/")[1]
        for branch, variants in branches.items():
            builds = repo.builds(branch)
            blobs = read_blobs(repo, [f"{branch}:build/{v}/metadata.json" for v in variants])
            sigs = read_blobs(repo, [f"{branch}:build/{v}/metadata.json.sigstore" for v in variants])
            for variant, raw, sig in zip(variants, blobs, sigs, strict=True):
                meta = Metadata.from_bytes(raw)
                assert str(meta.name) == name and meta.version == int(branch[1:])
                assert meta.id == f"_{name.replace('-', '_')}_{variant_backend(variant)}_{builds[variant]}"
                assert str(meta.backend.backend_type).lower() == variant_backend(variant)
                assert meta.license
                assert meta.digest is not None and "__init__.py" in meta.digest.files
                expected_deps = {"v1": 1, "v2": 2}.get(branch) if repo_id == catalog.dependent else None
                if expected_deps is None:
                    assert meta.kernel_depends == []
                else:
                    [dep] = meta.kernel_depends
                    assert dep.repo_id == catalog.activation and dep.version.version == expected_deps
                assert json.loads(sig)["messageSignature"]["messageDigest"]["algorithm"] == "SHA2_256"
            identities = {v: read_identity(catalog.root, repo_id, branch, v) for v in variants[:3]}
            for variant, identity in identities.items():
                assert identity == {
                    "repo": repo_id,
                    "version": int(branch[1:]),
                    "branch": branch,
                    "variant": variant,
                    "build_id": builds[variant],
                }
            assert not build_ids & set(builds.values())
            build_ids |= set(builds.values())


@needs_this_machine
def test_what_loads_on_this_machine(catalog: Catalog) -> None:
    from kernels.variants import parse_variant, resolve_variant

    for repo_id, picks in EXPECTED_CPU_PICK.items():
        repo = catalog.repo(repo_id)
        for branch, expected in picks.items():
            variant, _ = resolve_variant([parse_variant(v) for v in repo.variants(branch)])
            assert (variant.variant_str if variant else None) == expected, (repo_id, branch)


def test_transformers_default_flash_attn2_version(catalog: Catalog) -> None:
    from transformers.modeling_flash_attention_utils import FLASH_ATTN_KERNEL_VERSIONS

    asked = FLASH_ATTN_KERNEL_VERSIONS[catalog.flash_attn2]
    assert asked == TRANSFORMERS_FLASH_ATTN2_VERSION == catalog.transformers_flash_attn2_version
    branches = catalog_matrix()[catalog.flash_attn2]
    newest = max(int(b[1:]) for b in branches)
    assert newest > asked
    assert CPU_VARIANT in branches[f"v{asked}"]  # plain transformers works here without kernlock
    assert without_cpu(branches[f"v{newest}"]) == branches[f"v{newest}"]  # "newest" does not load here


def test_deterministic_shas(catalog: Catalog, tmp_path: Path) -> None:
    again = build_catalog(tmp_path)
    for repo_id in catalog.repo_ids:
        a, b = catalog.repo(repo_id), again.repo(repo_id)
        assert git(a, "for-each-ref") == git(b, "for-each-ref")
        for branch in catalog_matrix()[repo_id]:
            assert a.builds(branch) == b.builds(branch)


# ------------------------------------------------------------------------------------------------ build code


def reference_attention(q, k, v, *, causal=False, scale=None, window=(-1, -1), softcap=0.0):
    """Plain math in the flash layout (batch, seqlen, heads, dim), GQA by repeating kv heads."""
    _, sq, h, d = q.shape
    sk, g = k.shape[1], h // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * (scale if scale is not None else d**-0.5)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq)[:, None] + sk - sq
    j = torch.arange(sk)[None, :]
    allowed = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        allowed &= j <= i
    if window[0] >= 0:
        allowed &= j >= i - window[0]
    if window[1] >= 0:
        allowed &= j <= i + window[1]
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


@pytest.fixture(scope="module")
def local_builds(catalog: Catalog, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """CPU builds exported from git and imported with kernels.get_local_kernel."""
    from kernels import get_local_kernel

    out: dict[str, Any] = {}
    for key, repo_id, branch, variant in [
        ("fa2", catalog.flash_attn2, "v4", CPU_VARIANT),
        ("activation", catalog.activation, "v1", CPU_VARIANT),
        ("layernorm", catalog.universal, "v1", "torch-universal"),
        ("rotary", catalog.newest_without_cpu, "v1", CPU_VARIANT),
    ]:
        dest = tmp_path_factory.mktemp(key)
        catalog.repo(repo_id).export(branch, dest, [f"build/{variant}"])
        out[key] = get_local_kernel(dest)
        out[key + "_path"] = dest / "build" / variant
        assert read_identity(catalog.root, repo_id, branch, variant) == out[key].KERNEL_IDENTITY
    return out


def test_exported_build_matches_its_digest(local_builds: dict[str, Any]) -> None:
    from kernels._rust import Digest, DigestAlgorithm, Metadata

    for key in ("fa2", "activation", "layernorm"):
        path = local_builds[key + "_path"]
        meta = Metadata.read_from_file(path / "metadata.json")
        meta.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, path))
        assert sys.modules[meta.id] is local_builds[key]  # kernels imports a build under its metadata id


def test_flash_attn_func_matches_sdpa(local_builds: dict[str, Any]) -> None:
    fa = local_builds["fa2"]
    torch.manual_seed(0)
    before = fa.CALL_COUNTS.get("flash_attn_func", 0)
    for heads, kv_heads, sq, sk, causal in [(4, 4, 7, 7, False), (4, 2, 9, 9, True), (6, 2, 5, 8, True)]:
        q = torch.randn(2, sq, heads, 16, dtype=torch.float64, requires_grad=True)
        k = torch.randn(2, sk, kv_heads, 16, dtype=torch.float64, requires_grad=True)
        v = torch.randn(2, sk, kv_heads, 16, dtype=torch.float64, requires_grad=True)
        out = fa.flash_attn_func(q, k, v, causal=causal)
        ref = reference_attention(q, k, v, causal=causal)
        torch.testing.assert_close(out, ref)
        if sq == sk:  # torch's own SDPA, GQA included
            sdpa = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal, enable_gqa=True
            ).transpose(1, 2)
            torch.testing.assert_close(out, sdpa)
        grad = torch.randn_like(out)
        got = torch.autograd.grad(out, (q, k, v), grad)
        want = torch.autograd.grad(ref, (q, k, v), grad)
        for g1, g2 in zip(got, want, strict=True):
            torch.testing.assert_close(g1, g2)
    assert fa.CALL_COUNTS["flash_attn_func"] == before + 3

    q, k, v = (torch.randn(1, 12, 4, 8, dtype=torch.float64) for _ in range(3))
    kw = {"causal": True, "window_size": (3, 0), "softcap": 5.0, "softmax_scale": 0.3}
    out, lse, _ = fa.flash_attn_func(q, k, v, return_attn_probs=True, **kw)
    torch.testing.assert_close(out, reference_attention(q, k, v, causal=True, window=(3, 0), softcap=5.0, scale=0.3))
    assert lse.shape == (1, 4, 12)


def test_flash_attn_varlen_func(local_builds: dict[str, Any]) -> None:
    fa = local_builds["fa2"]
    torch.manual_seed(1)
    lens = [3, 7, 5]
    cu = torch.tensor([0, 3, 10, 15], dtype=torch.int32)
    q = torch.randn(15, 4, 16, dtype=torch.float64, requires_grad=True)
    k = torch.randn(15, 2, 16, dtype=torch.float64, requires_grad=True)
    v = torch.randn(15, 2, 16, dtype=torch.float64, requires_grad=True)
    out = fa.flash_attn_varlen_func(
        q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max(lens), max_seqlen_k=max(lens), causal=True
    )
    parts = [
        reference_attention(q[a:b][None], k[a:b][None], v[a:b][None], causal=True)[0]
        for a, b in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)
    ]
    ref = torch.cat(parts)
    torch.testing.assert_close(out, ref)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad)
    for g1, g2 in zip(got, torch.autograd.grad(ref, (q, k, v), grad), strict=True):
        torch.testing.assert_close(g1, g2)
    assert fa.CALL_COUNTS["flash_attn_varlen_func"] >= 1


def test_activation_layernorm_rotary_builds(local_builds: dict[str, Any]) -> None:
    from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping

    act = local_builds["activation"]
    x = torch.randn(3, 10, requires_grad=True)
    out = act.silu_and_mul(torch.empty(3, 5), x)
    torch.testing.assert_close(out, F.silu(x[:, :5]) * x[:, 5:])
    out.sum().backward()  # differentiable through the out= copy
    assert x.grad is not None
    torch.testing.assert_close(act.gelu_fast(torch.empty(3, 10), x), F.gelu(x, approximate="tanh"), atol=1e-6, rtol=0)

    @use_kernel_forward_from_hub("SiluAndMul")
    class SiluAndMul(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            d = x.shape[-1] // 2
            return F.silu(x[..., :d]) * x[..., d:]

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), SiluAndMul())
    mapping = {
        "SiluAndMul": {
            "cpu": LocalLayerRepository(
                repo_path=local_builds["activation_path"].parent.parent, layer_name="SiluAndMul"
            )
        }
    }
    inp = torch.randn(2, 4)
    expected = model(inp)
    before = act.CALL_COUNTS.get("silu_and_mul", 0)
    with use_kernel_mapping(mapping, inherit_mapping=False):
        model = kernelize(model, mode=Mode.INFERENCE, device="cpu", use_fallback=False)
    torch.testing.assert_close(model(inp), expected)
    assert act.CALL_COUNTS["silu_and_mul"] == before + 1

    ln = local_builds["layernorm"]
    h, w = torch.randn(2, 3, 8), torch.randn(8)
    ref = w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6))
    torch.testing.assert_close(ln.rms_norm(h, w, 1e-6), ref)
    assert ln.KERNEL_IDENTITY["variant"] == "torch-universal"

    rot = local_builds["rotary"]
    x1, x2, cos, sin = (torch.randn(4, 6) for _ in range(4))
    o1, o2 = torch.empty(4, 6), torch.empty(4, 6)
    rot.apply_rotary(x1, x2, cos, sin, o1, o2, False)
    torch.testing.assert_close(o1, x1 * cos - x2 * sin)
    torch.testing.assert_close(o2, x1 * sin + x2 * cos)


def test_non_cpu_builds_are_native_extension_stubs(catalog: Catalog, tmp_path: Path) -> None:
    variant = "torch213-cxx11-cu130-x86_64-linux"
    catalog.repo(catalog.flash_attn2).export("v4", tmp_path, [f"build/{variant}"])
    ops = (tmp_path / "build" / variant / "_ops.py").read_text()
    assert "torch.ops." in ops and "from . import _flash_attn2_cuda_" in ops
    [so] = (tmp_path / "build" / variant).glob("*.abi3.so")
    assert so.read_bytes().startswith(b"\x7fELF") and so.stat().st_size == 4096


def test_zip_builds_hold_the_package_as_one_archive(tmp_path: Path) -> None:
    """``zip_builds``: the package as one ``{id}.zip`` (no .so, even for a CUDA build), metadata.json saying so, a
    digest kernels' own hashing of the folder agrees with; the same bytes when built again; other builds as usual."""
    from kernels._rust import Digest, DigestAlgorithm, Metadata

    cuda = "torch213-cxx11-cu130-x86_64-linux"
    branches = {"v1": [CPU_VARIANT, cuda, "torch-cpu"]}
    zipped = {"v1": [CPU_VARIANT, cuda]}
    repo = create_kernel_repo(tmp_path / "a", "kernels-community/zipped", branches, kind="layernorm", zip_builds=zipped)
    again = create_kernel_repo(
        tmp_path / "b", "kernels-community/zipped", branches, kind="layernorm", zip_builds=zipped
    )
    assert repo.head("v1") == again.head("v1")
    repo.export("v1", tmp_path / "out")
    for variant in (CPU_VARIANT, cuda):
        folder = tmp_path / "out" / "build" / variant
        meta = json.loads((folder / "metadata.json").read_text())
        archive = folder / f"{meta['id']}.zip"
        assert meta["build-layout"] == "zip" and "archs" not in meta["backend"]
        assert sorted(p.name for p in folder.iterdir()) == sorted(
            [archive.name, "metadata.json", "metadata.json.sigstore"]
        )
        assert sorted(zipfile.ZipFile(archive).namelist()) == ["__init__.py", "_ops.py", "layers.py"]
        assert "torch.ops." not in zipfile.ZipFile(archive).read("_ops.py").decode()  # pure Python
        assert set(meta["digest"]["files"]) == {archive.name}
        parsed = Metadata.read_from_file(folder / "metadata.json")
        parsed.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, folder))
        assert read_identity(repo.root, repo.repo_id, "v1", variant)["variant"] == variant
    assert (tmp_path / "out" / "build" / "torch-cpu" / "__init__.py").is_file()  # not named: the files layout
    with pytest.raises(ValueError, match="zip_builds names"):
        create_kernel_repo(tmp_path / "c", "kernels-community/zipped", branches, zip_builds={"v1": ["torch-cuda"]})


# ------------------------------------------------------------------------------------------------ builder API


def test_move_branch_add_tag_and_custom_repos(tmp_path: Path) -> None:
    std = standard_variants(("2.12", "2.13"))
    repo = create_kernel_repo(
        tmp_path,
        "acme/my-kernel",
        {"v1": std, "v2": [*std, "torch-cpu"], "v3": std},
        kind="activation",
        no_cpu=["v3"],
        kernel_depends={"v2": [("kernels-community/activation", 1)]},
        tags={"v1.0.0": "v1"},
        annotated_tags={"v2.0.0": "v2"},
        trusted=False,
        jobs="single",
    )
    assert read_organizations(tmp_path)["acme"] == {"trustedKernelPublisher": False}
    assert repo.variants("v3") == sorted(without_cpu(std)) and CPU_VARIANT not in repo.variants("v3")
    assert "torch-cpu" in repo.variants("v2")
    assert git(repo, "rev-list", "--count", "v1") == "2"  # jobs="single": one upload on top of main
    meta = json.loads(git(repo, "show", f"v2:build/{CPU_VARIANT}/metadata.json"))
    assert meta["kernel-depends"] == [{"repo-id": "kernels-community/activation", "version": 1}]
    assert "kernel-depends" not in json.loads(git(repo, "show", f"v1:build/{CPU_VARIANT}/metadata.json"))
    assert repo.tags() == {"v1.0.0": repo.head("v1"), "v2.0.0": repo.head("v2")}

    # Re-upload one variant: a child commit, new build id for it only, old commit still readable.
    old_head, old_builds = repo.head("v1"), repo.builds("v1")
    new_head = move_branch(tmp_path, "acme/my-kernel", "v1", variants=[CPU_VARIANT])
    assert new_head == repo.head("v1") != old_head
    assert git(repo, "rev-parse", "v1^") == old_head
    new_builds = repo.builds("v1")
    assert new_builds[CPU_VARIANT] != old_builds[CPU_VARIANT]
    assert {v: b for v, b in new_builds.items() if v != CPU_VARIANT} == {
        v: b for v, b in old_builds.items() if v != CPU_VARIANT
    }
    assert repo.identity("v1", CPU_VARIANT)["build_id"] == new_builds[CPU_VARIANT]
    assert repo.identity(old_head, CPU_VARIANT)["build_id"] == old_builds[CPU_VARIANT]
    assert repo.tags()["v1.0.0"] == old_head
    changed = {p for p, sha in branch_files(repo, "v1").items() if branch_files(repo, old_head).get(p) != sha}
    assert changed and all(p.startswith(f"build/{CPU_VARIANT}/") for p in changed)
    assert len(list((repo.path / "build").glob("*"))) == 0  # work tree stays on main

    # Add and remove variants; force-push (rewrite) onto main.
    head = repo.move_branch("v1", [], add=["torch-cpu"], remove=["torch212-metal-aarch64-darwin"])
    assert "torch-cpu" in repo.variants(head) and "torch212-metal-aarch64-darwin" not in repo.variants(head)
    rewritten = repo.move_branch("v1", rewrite=True)
    assert git(repo, "rev-parse", "v1^") == repo.head("main")
    assert repo.variants(rewritten) == repo.variants(head)
    ancestor = subprocess.run(["git", "-C", str(repo.path), "merge-base", "--is-ancestor", head, "v1"], check=False)
    assert ancestor.returncode == 1  # the old head left the branch

    # New version branch, tag on it, deletion.
    sha = repo.add_branch("v4", ["torch-universal"], kernel_depends=[{"repo-id": "acme/other", "revision": "main"}])
    assert repo.variants("v4") == ["torch-universal"] and repo.head("v4") == sha
    assert repo.add_tag("v4.0.0", "v4", annotated=True) == sha and repo.tags()["v4.0.0"] == sha
    repo.delete_branch("v4")
    assert "v4" not in repo.branches() and git(repo, "cat-file", "-t", sha) == "commit"
    assert open_kernel_repo(tmp_path, "acme/my-kernel").builds("v4") == {}

    # The same operations in another folder give the same commits.
    twin = create_kernel_repo(
        tmp_path / "twin",
        "acme/my-kernel",
        {"v1": std, "v2": [*std, "torch-cpu"], "v3": std},
        kind="activation",
        no_cpu=["v3"],
        kernel_depends={"v2": [("kernels-community/activation", 1)]},
        tags={"v1.0.0": "v1"},
        annotated_tags={"v2.0.0": "v2"},
        jobs="single",
    )
    assert twin.move_branch("v1", [CPU_VARIANT]) == new_head

    with pytest.raises(ValueError):
        create_kernel_repo(tmp_path, "acme/Bad_Name", {"v1": std})
    with pytest.raises(ValueError):
        create_kernel_repo(tmp_path, "acme/bad-variant", {"v1": ["torch213-cxx11-quantum-x86_64-linux"]})


def test_benchmark_catalog_shape(tmp_path: Path) -> None:
    """20 kernels x 4 version branches x 26 variants (its build time is benchmarks/lock.py's setup, not a test)."""
    repo_ids = build_benchmark_catalog(tmp_path)
    assert len(repo_ids) == 20
    for repo_id in (repo_ids[0], repo_ids[-1]):
        repo = open_kernel_repo(tmp_path, repo_id)
        assert set(repo.branches()) == {"main", "v1", "v2", "v3", "v4"}
        variants = repo.variants("v4")
        assert len(variants) == 26 and CPU_VARIANT in variants
    small = build_benchmark_catalog(tmp_path / "small", kernels=2, versions=1, variants=40)
    assert len(open_kernel_repo(tmp_path / "small", small[0]).variants("v1")) == 40


# ------------------------------------------------------------------------------------------------ end to end


def client_env(server: HubServer, cache: Path) -> dict[str, str]:
    return clean_env(
        **server.env(),
        HF_HUB_CACHE=str(cache),
        KERNELS_CACHE=str(cache),
        HF_HOME=str(cache / "home"),
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )


def run_client(server: HubServer, cache: Path, code: str) -> Any:
    """Run ``code`` in a fresh interpreter pointed at ``server``; it prints one JSON line last."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=client_env(server, cache),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.subprocess
@needs_this_machine
def test_e2e_get_kernel_then_branch_moves(tmp_path: Path) -> None:
    cat = build_catalog(tmp_path / "hub")
    fa2 = cat.repo(cat.flash_attn2)
    code = """
        import json, kernels
        m = kernels.get_kernel("kernels-community/flash-attn2", version=4)
        print(json.dumps({"identity": m.KERNEL_IDENTITY, "name": m.__name__}))
    """
    with HubServer(cat.root) as server:
        first = run_client(server, tmp_path / "cache", code)
        assert first["identity"] == fa2.identity("v4", CPU_VARIANT)
        assert first["identity"]["build_id"] == fa2.builds("v4")[CPU_VARIANT]
        assert first["name"].endswith(first["identity"]["build_id"])
        new_head = move_branch(cat.root, cat.flash_attn2, "v4", variants=[CPU_VARIANT])
        second = run_client(server, tmp_path / "cache", code)  # same cache: kernels re-resolves v4
        assert second["identity"]["build_id"] == fa2.builds("v4")[CPU_VARIANT] != first["identity"]["build_id"]
        assert second["identity"] == fa2.identity(new_head, CPU_VARIANT)
        assert server.log.count(contains="/api/kernels/kernels-community/flash-attn2/refs") >= 2


@pytest.mark.slow
@pytest.mark.subprocess
@needs_this_machine
def test_e2e_catalog_through_kernels(catalog: Catalog, hub: HubServer, tmp_path: Path) -> None:
    code = """
        import json, kernels, torch
        from kernels import LayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping

        out = {}
        paged = kernels.get_kernel("kernels-community/paged-attention", version=2)
        out["paged"] = paged.KERNEL_IDENTITY
        out["paged_dep"] = paged.DEPENDENCY_IDENTITIES
        try:
            kernels.get_kernel("someone/fast-gelu", version=1)
        except ValueError as e:
            out["untrusted_error"] = str(e)
        out["untrusted_ok"] = kernels.get_kernel("someone/fast-gelu", version=1, trust_remote_code=True).KERNEL_IDENTITY
        out["no_build"] = {}
        for repo, version in [("kernels-community/flash-attn2", 5), ("kernels-community/flash-attn2", 1),
                              ("kernels-community/rotary", 2)]:
            try:
                kernels.get_kernel(repo, version=version)
            except FileNotFoundError:
                out["no_build"][f"{repo}@v{version}"] = True
        out["universal"] = kernels.get_kernel("kernels-community/triton-layer-norm", version=1).KERNEL_IDENTITY
        out["v0"] = kernels.get_kernel("kernels-community/flash-attn4", version=0).KERNEL_IDENTITY
        out["tag"] = kernels.get_kernel("kernels-community/activation", revision="v2.0.0").KERNEL_IDENTITY

        @use_kernel_forward_from_hub("SiluAndMul")
        class SiluAndMul(torch.nn.Module):
            def forward(self, x):
                d = x.shape[-1] // 2
                return torch.nn.functional.silu(x[..., :d]) * x[..., d:]

        model = torch.nn.Sequential(torch.nn.Linear(4, 8), SiluAndMul())
        inp = torch.randn(2, 4)
        expected = model(inp)
        mapping = {"SiluAndMul": {"cpu": LayerRepository(
            repo_id="kernels-community/activation", layer_name="SiluAndMul", version=1)}}
        with use_kernel_mapping(mapping, inherit_mapping=False):
            model = kernelize(model, mode=Mode.INFERENCE, device="cpu", use_fallback=False)
        out["kernelize_close"] = torch.allclose(model(inp), expected)
        act = kernels.get_kernel("kernels-community/activation", version=1)
        out["kernelize_identity"] = act.KERNEL_IDENTITY
        out["kernelize_calls"] = act.CALL_COUNTS.get("silu_and_mul", 0)
        print(json.dumps(out))
    """
    out = run_client(hub, tmp_path / "cache", code)
    act = catalog.repo(catalog.activation)
    assert out["paged"] == catalog.repo(catalog.dependent).identity("v2", CPU_VARIANT)
    assert out["paged_dep"] == {catalog.activation: act.identity("v2", CPU_VARIANT)}
    assert "not from a trusted publisher" in out["untrusted_error"]
    assert out["untrusted_ok"]["repo"] == catalog.untrusted
    assert out["no_build"] == {
        "kernels-community/flash-attn2@v5": True,
        "kernels-community/flash-attn2@v1": True,
        "kernels-community/rotary@v2": True,
    }
    assert out["universal"]["variant"] == "torch-universal"
    assert out["v0"] == catalog.repo(catalog.v0_only).identity("v0", "torch-cpu")
    assert out["tag"] == act.identity(catalog.light_tag[1], CPU_VARIANT)
    assert out["kernelize_close"] is True
    assert out["kernelize_identity"] == act.identity("v1", CPU_VARIANT)
    assert out["kernelize_calls"] == 1
    assert hub.log.count(contains="/api/organizations/someone/overview") >= 1


@pytest.mark.slow
@pytest.mark.subprocess
@needs_this_machine
def test_e2e_transformers_llama_uses_the_hub_kernel(catalog: Catalog, hub: HubServer, tmp_path: Path) -> None:
    code = """
        import copy, json, sys, types, torch
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=128, max_position_embeddings=64)
        torch.manual_seed(0)
        ref = LlamaForCausalLM._from_config(copy.deepcopy(cfg), attn_implementation="sdpa").eval()
        model = LlamaForCausalLM._from_config(copy.deepcopy(cfg), attn_implementation="kernels-community/flash-attn2")
        model.load_state_dict(ref.state_dict())
        model.eval()
        ids = torch.randint(0, 128, (2, 10))
        mask = torch.ones(2, 10, dtype=torch.long)
        mask[1, 6:] = 0  # right padding: transformers unpads and calls flash_attn_varlen_func
        with torch.no_grad():
            dense = (model(ids).logits - ref(ids).logits).abs().max().item()
            a = model(ids, attention_mask=mask).logits
            b = ref(ids, attention_mask=mask).logits
            padded = max((a[0] - b[0]).abs().max().item(), (a[1, :6] - b[1, :6]).abs().max().item())
        kernels_loaded = {
            name: {"identity": m.KERNEL_IDENTITY, "calls": dict(m.CALL_COUNTS)}
            for name, m in list(sys.modules.items())
            if isinstance(m, types.ModuleType) and "KERNEL_IDENTITY" in vars(m)
        }
        print(json.dumps({"impl": model.config._attn_implementation, "dense": dense, "padded": padded,
                          "kernels": kernels_loaded}))
    """
    out = run_client(hub, tmp_path / "cache", code)
    assert out["impl"] == catalog.flash_attn2
    assert out["dense"] < 1e-4 and out["padded"] < 1e-4
    [(name, loaded)] = out["kernels"].items()
    fa2 = catalog.repo(catalog.flash_attn2)
    assert loaded["identity"] == fa2.identity(f"v{TRANSFORMERS_FLASH_ATTN2_VERSION}", CPU_VARIANT)
    assert name.endswith(loaded["identity"]["build_id"])
    assert loaded["calls"]["flash_attn_func"] == 2  # 2 layers, unpadded batch
    assert loaded["calls"]["flash_attn_varlen_func"] == 2  # 2 layers, padded batch
    assert hub.log.count(contains="/api/kernels/kernels-community/flash-attn2/refs") >= 1


def test_upload_files_commits_prebuilt_files_with_lfs(tmp_path: Path) -> None:
    repo = create_kernel_repo(tmp_path, "acme/prebuilt", {"v1": [CPU_VARIANT]})
    so = b"\x7fELF" + bytes(range(256)) * 8
    sha = repo.upload_files(
        "v1",
        {
            "build/torch211-cxx11-cu130-x86_64-linux/_x.abi3.so": so,
            "build/torch211-cxx11-cu130-x86_64-linux/a.py": b"x",
        },
    )
    assert repo.head("v1") == sha
    assert repo.variants("v1") == sorted([CPU_VARIANT, "torch211-cxx11-cu130-x86_64-linux"])
    out = repo.export("v1", tmp_path / "out", ["build/torch211-cxx11-cu130-x86_64-linux"])
    assert (out / "build/torch211-cxx11-cu130-x86_64-linux/_x.abi3.so").read_bytes() == so
    pointer = subprocess.run(
        ["git", "-C", str(repo.path), "show", "v1:build/torch211-cxx11-cu130-x86_64-linux/_x.abi3.so"],
        capture_output=True,
        check=True,
    ).stdout
    assert pointer.startswith(b"version https://git-lfs.github.com/spec/v1")
