"""Test helpers: a Hub-compatible server over git repositories, and fixture builders."""

from kernlock.testing.fixtures import CPU_VARIANT as CPU_VARIANT
from kernlock.testing.fixtures import HUB_MATRIX as HUB_MATRIX
from kernlock.testing.fixtures import TRANSFORMERS_FLASH_ATTN2_VERSION as TRANSFORMERS_FLASH_ATTN2_VERSION
from kernlock.testing.fixtures import Catalog as Catalog
from kernlock.testing.fixtures import KernelRepo as KernelRepo
from kernlock.testing.fixtures import add_tag as add_tag
from kernlock.testing.fixtures import build_benchmark_catalog as build_benchmark_catalog
from kernlock.testing.fixtures import build_catalog as build_catalog
from kernlock.testing.fixtures import catalog_matrix as catalog_matrix
from kernlock.testing.fixtures import create_kernel_repo as create_kernel_repo
from kernlock.testing.fixtures import export_revision as export_revision
from kernlock.testing.fixtures import hub_variants as hub_variants
from kernlock.testing.fixtures import kernel_repo_path as kernel_repo_path
from kernlock.testing.fixtures import move_branch as move_branch
from kernlock.testing.fixtures import open_kernel_repo as open_kernel_repo
from kernlock.testing.fixtures import read_identity as read_identity
from kernlock.testing.fixtures import set_org_trust as set_org_trust
from kernlock.testing.fixtures import standard_variants as standard_variants
from kernlock.testing.fixtures import without_cpu as without_cpu
from kernlock.testing.server import Faults as Faults
from kernlock.testing.server import HubServer as HubServer
from kernlock.testing.server import Request as Request
from kernlock.testing.server import RequestLog as RequestLog
from kernlock.testing.server import make_app as make_app
