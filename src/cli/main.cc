#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sys/resource.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/process_transport.h"
#include "cli/run_app.h"
#include "cli/serve/serve_command.h"
#include "shardload/tensor.h"

namespace {

// Backs the heap with 2 MiB pages where transparent huge pages are on request (madvise mode): a
// 20k-tensor checkpoint's headers and plan touch tens of MB of heap, and on a VM a 4 KiB first
// touch can cost ~20 us (measured here: `shardload plan` of such a model 0.25 s -> 0.09 s). The heap
// grows in 64 MiB steps (untouched pages cost nothing) and its top region is advised once; brk
// extends that region, advice included.
// Not under an address-space limit (ulimit -v): there every heap growth would take the 64 MiB pad
// too, and a tight limit failed even `--version` with std::bad_alloc.
void back_heap_with_huge_pages() {
  constexpr uintptr_t kHuge = shardload::kHugePageBytes;
  constexpr size_t kBlock = 64 << 10;  // under the mmap threshold: comes from the heap
  // Every thread and every block under 32 MiB allocates from that heap: worker threads (parsing
  // headers in parallel) would otherwise get arenas of 4 KiB pages (each reserving 64 MiB of
  // address space), and large blocks fresh mappings.
  mallopt(M_ARENA_MAX, 1);
  struct rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur != RLIM_INFINITY) return;
  mallopt(M_TOP_PAD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  // Static initialisers already made the heap: allocate until it grows by the new pad.
  void* blocks[64];
  size_t count = 0;
  const void* before = sbrk(0);
  while (count < 64 && sbrk(0) == before) blocks[count++] = malloc(kBlock);
  const auto begin = (reinterpret_cast<uintptr_t>(blocks[0]) + kHuge - 1) & ~(kHuge - 1);
  const auto end = reinterpret_cast<uintptr_t>(sbrk(0));
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  for (size_t i = 0; i < count; ++i) free(blocks[i]);
}

// `shardload serve ARGS` runs `shardload-serve ARGS` from this program's directory, in this
// process (signals and the pid stay the server's).
int exec_serve(char** argv) {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::string server =
      ((error ? std::filesystem::path(argv[0]) : self).parent_path() / "shardload-serve").string();
  argv[1] = const_cast<char*>(server.c_str());
  execv(server.c_str(), argv + 1);
  std::cerr << "error: cannot run " << server << ": " << std::strerror(errno) << "\n";
  return 1;
}

int run_main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "serve") return exec_serve(argv);
  back_heap_with_huge_pages();
  CLI::App app{"shardload: load Hugging Face checkpoints into tensor-parallel x expert-parallel shards",
               "shardload"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "shardload " SHARDLOAD_VERSION);
  shardload::cli::add_inspect_command(app);
  shardload::cli::add_make_tiny_command(app);
  shardload::cli::add_plan_command(app);
  shardload::cli::add_load_command(app);
  shardload::cli::add_export_command(app);
  shardload::cli::add_eplb_command(app);
  shardload::cli::add_support_command(app);
  // Listed here for --help; main hands the command to shardload-serve before parsing.
  app.add_subcommand("serve", std::string(shardload::cli::kServeDescription) + " (shardload-serve)");
  app.footer("Example: shardload inspect --summary build/tiny-qwen3-moe\n"
             "`shardload COMMAND --help` gives a command's options and an example.");
  // Alone, the command lists the commands: what a newcomer types first is not a usage error.
  if (argc == 1) {
    std::cout << app.help();
    return 0;
  }
  const int status = shardload::cli::run_app(app, argc, argv);
  shardload::cli::end_process_transport();
  return status;
}

}  // namespace

// Building the commands allocates too, outside run_app: whatever escapes is one error line and
// exit status 1, never an abort.
int main(int argc, char** argv) {
  return shardload::cli::run_guarded([&] { return run_main(argc, argv); });
}
