// fluxcpp.hpp: the C++ API, one header per concept.
#pragma once

#include "fluxcpp/a2a_gemm.hpp"
#include "fluxcpp/ag_gemm.hpp"
#include "fluxcpp/all_gather.hpp"
#include "fluxcpp/all_to_all_single.hpp"
#include "fluxcpp/context.hpp"
#include "fluxcpp/error.hpp"
#include "fluxcpp/gemm_rs.hpp"
#include "fluxcpp/grouped_gemm.hpp"
#include "fluxcpp/inplace_cast.hpp"
#include "fluxcpp/moe_combine.hpp"
#include "fluxcpp/moe_dispatch.hpp"
#include "fluxcpp/moe_layout.hpp"
#include "fluxcpp/reduce_scatter.hpp"
#include "fluxcpp/types.hpp"
#include "fluxcpp/ulysses.hpp"
#include "fluxcpp/version.hpp"
