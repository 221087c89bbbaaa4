#pragma once

#include <cstdlib>
#include <string>

#include "test_paths.h"

namespace shardload::testing {

// The environment every test that runs mpirun sets before it (the children inherit it).
inline void use_mpirun_as_tests_do() {
  // CI runs as root; OpenMPI refuses root without these.
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 1);  // 4 processes on 2 cores: do not spin
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  // Under LeakSanitizer: OpenMPI's own allocations are suppressed by library name, so its plugins
  // stay loaded (named frames) and stacks are unwound fully.
  setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 1);
  const std::string lsan =
      "suppressions=" + lsan_mpi_suppressions() + ":fast_unwind_on_malloc=0:print_suppressions=0";
  setenv("LSAN_OPTIONS", lsan.c_str(), 1);
}

}  // namespace shardload::testing
