"""fluxcpp for PyTorch: fused communication + computation ops on CPU tensors.

Every call goes to libfluxcpp's C ABI through ctypes (docs/python.md); no compiler is needed
at import. Start with a Context (an mpi4py communicator, or None for MPI_COMM_WORLD), create
ops with their create-time shapes, and call forward(tensors)."""
from ._lib import LIBRARY_PATH, Error, Status, Unavailable, has, version
from ._base import Context
from .dense import (AGKernel, AgGemm, AllGather, AllReduce, GemmAllReduce, GemmAr, GemmRS, GemmRs,
                    ReduceScatter)
from .packed import PackedWeight
from .a2a import (A2aGemm, A2aTransposeGemm, AllToAllSingle, AllToAllTransposeGemm,
                  GemmA2aTranspose, GemmAllToAllTranspose)
from .moe import (AgScatterGroupedGemm, DispatchResult, DisScatterBackward, DisScatterForward,
                  GemmGroupedV3, GemmGroupedV3AGScatter, GemmGroupedV3GatherRS, GroupedGemm,
                  GroupedGemmGatherRs, MoeCombine, MoeDispatch, MoeLayout, moe_layout)
from .p2p import AsyncSendRecv
from .cast import inplace_cast
from .autograd import ColumnParallelLinear, RowParallelLinear
from . import torch_ops  # noqa: F401  (the operators: docs/python.md, "torch.compile")
from . import baseline  # noqa: F401  (docs/python.md, "Checking the baseline")
from .swap import swap_linears
from . import distributed

distributed.register()  # torch.distributed's backend "fluxcpp", when this build has it
# The library's version: CMakeLists.txt's project version, as in the wheel's metadata.
__version__ = f"{version() // 10000}.{version() // 100 % 100}.{version() % 100}"

__all__ = [
    "Context", "Error", "Status", "Unavailable", "version", "has", "LIBRARY_PATH",
    "AllGather", "ReduceScatter", "AllReduce", "AgGemm", "AGKernel", "GemmRs", "GemmRS",
    "GemmAr", "GemmAllReduce", "PackedWeight",
    "AllToAllSingle", "A2aGemm", "GemmA2aTranspose", "GemmAllToAllTranspose",
    "A2aTransposeGemm", "AllToAllTransposeGemm",
    "GroupedGemm", "GemmGroupedV3", "moe_layout", "MoeLayout",
    "MoeDispatch", "DisScatterForward", "MoeCombine", "DisScatterBackward", "DispatchResult",
    "AgScatterGroupedGemm", "GemmGroupedV3AGScatter", "GroupedGemmGatherRs",
    "GemmGroupedV3GatherRS", "AsyncSendRecv", "inplace_cast",
    "ColumnParallelLinear", "RowParallelLinear", "swap_linears",
]
