"""A local Hugging Face Hub for tests: a Hub-compatible server over real git repositories, and kernel-repo builders.

A supported part of kernlock for users' own CI, not only kernlock's tests (docs/testing-hub.md says why): the
names in ``__all__`` are its public API, typed (kernlock ships ``py.typed``) and documented. The real, unmodified
``huggingface_hub``, ``kernels`` and ``transformers`` load from :class:`HubServer` once a child process has
``HF_ENDPOINT`` pointing at it (:meth:`HubServer.env`). Submodules (``kernlock.testing.server``,
``kernlock.testing.concurrency``, ``kernlock.testing.fixtures``, ``kernlock.testing.mirror_process``) hold more, for
kernlock's own tests.
"""

from kernlock.testing.concurrency import Concurrency
from kernlock.testing.fixtures import (
    CPU_VARIANT,
    HUB_MATRIX,
    KINDS,
    TRANSFORMERS_FLASH_ATTN2_VERSION,
    TRANSFORMERS_KERNELS,
    Catalog,
    KernelRepo,
    add_tag,
    build_benchmark_catalog,
    build_catalog,
    build_transformers_catalog,
    catalog_matrix,
    create_kernel_repo,
    export_revision,
    hub_variants,
    kernel_repo_path,
    move_branch,
    open_kernel_repo,
    read_identity,
    set_org_trust,
    standard_variants,
    today_variants,
    without_cpu,
)
from kernlock.testing.server import ConnectionDropped, Faults, HubServer, Request, RequestLog, Transform, make_app

__all__ = [
    "CPU_VARIANT",
    "HUB_MATRIX",
    "KINDS",
    "TRANSFORMERS_FLASH_ATTN2_VERSION",
    "TRANSFORMERS_KERNELS",
    "Catalog",
    "Concurrency",
    "ConnectionDropped",
    "Faults",
    "HubServer",
    "KernelRepo",
    "Request",
    "RequestLog",
    "Transform",
    "add_tag",
    "build_benchmark_catalog",
    "build_catalog",
    "build_transformers_catalog",
    "catalog_matrix",
    "create_kernel_repo",
    "export_revision",
    "hub_variants",
    "kernel_repo_path",
    "make_app",
    "move_branch",
    "open_kernel_repo",
    "read_identity",
    "set_org_trust",
    "standard_variants",
    "today_variants",
    "without_cpu",
]
