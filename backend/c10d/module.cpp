// fluxcpp._c10d: the backend's creator for torch.distributed.Backend.register_backend, and the
// group's context lent to fluxcpp.Context.from_group.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>

#include "process_group.hpp"

namespace py = pybind11;
using fluxcpp::backend::ProcessGroupFluxcpp;

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "fluxcpp's torch.distributed backend (registered as \"fluxcpp\" by import fluxcpp)";
  m.def(
      "create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout) -> c10::intrusive_ptr<c10d::Backend> {
        py::gil_scoped_release nogil;
        return c10::make_intrusive<ProcessGroupFluxcpp>(store, rank, size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"));
  m.def(
      "share_context",
      [](const c10::intrusive_ptr<c10d::Backend>& pg) -> std::uintptr_t {
        auto* flux = dynamic_cast<ProcessGroupFluxcpp*>(pg.get());
        TORCH_CHECK(flux != nullptr, "fluxcpp.Context.from_group: the group's CPU backend is ",
                    pg->getBackendName(), ", not fluxcpp");
        TORCH_CHECK(flux->context() != nullptr, "fluxcpp.Context.from_group: the group was "
                    "shut down (destroy_process_group)");
        fluxcpp_context_t shared = nullptr;
        fluxcpp::backend::check(fluxcpp_context_share(flux->context(), &shared), "context share");
        return reinterpret_cast<std::uintptr_t>(shared);
      },
      py::arg("group"));
}
