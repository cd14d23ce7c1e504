// fluxcpp._c10d: the backend's creator for torch.distributed.Backend.register_backend, and the
// group's context lent to fluxcpp.Context.from_group.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "process_group.hpp"

namespace py = pybind11;
using fluxcpp::backend::ProcessGroupFluxcpp;

namespace {

std::mutex g_mu;
std::vector<c10::weak_intrusive_ptr<ProcessGroupFluxcpp>> g_groups;  // every group made here

// At interpreter exit (atexit runs before Python finalizes): every live group's worker stopped
// and its calls finished here. A worker that finished a call during finalization released the
// call's tensors there; a tensor with a Python object takes the GIL, which then ends the thread
// with pthread_exit through a noexcept destructor: std::terminate, the process aborted.
void stop_groups() {
  std::vector<c10::intrusive_ptr<ProcessGroupFluxcpp>> live;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (auto& w : g_groups)
      if (auto p = w.lock()) live.push_back(std::move(p));
    g_groups.clear();
  }
  for (auto& p : live) p->shutdown();
}

}  // namespace

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "fluxcpp's torch.distributed backend (registered as \"fluxcpp\" by import fluxcpp)";
  m.def(
      "create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout) -> c10::intrusive_ptr<c10d::Backend> {
        py::gil_scoped_release nogil;
        auto pg = c10::make_intrusive<ProcessGroupFluxcpp>(store, rank, size, timeout);
        std::lock_guard<std::mutex> lock(g_mu);
        std::erase_if(g_groups, [](const auto& w) { return w.expired(); });
        g_groups.emplace_back(pg);
        return pg;
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
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    py::gil_scoped_release nogil;  // a stopping worker may release tensors (the GIL)
    stop_groups();
  }));
}
