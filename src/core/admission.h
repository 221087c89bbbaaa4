#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

// Admission: before a command allocates its rank buffers (hundreds of GB for a real model), it
// compares what it needs with what this process can still get, and fails with both numbers instead
// of a bare std::bad_alloc half-way through.
namespace shardload {

// What is left under one limit, and which limit that is.
struct MemoryRoom {
  uint64_t bytes = 0;
  std::string limit;  // "the address-space limit (ulimit -v) of 1.00 GiB, 300.00 MiB of it in use"
};

// The tightest limit on the memory this process can still take: its address-space limit
// (RLIMIT_AS, less the VmSize already mapped) and its cgroup's memory limit (v2 memory.max or v1
// memory.limit_in_bytes at every level up to the root, less what the cgroup uses beyond page cache
// the kernel can reclaim). nullopt when neither limit is set.
std::optional<MemoryRoom> memory_room();

// The cgroup part of memory_room, read from `sys_cgroup` (normally /sys/fs/cgroup) for the cgroup
// that `proc_cgroup` (the text of /proc/self/cgroup) names: v2 ("0::/path") or v1
// ("N:memory:/path").
std::optional<MemoryRoom> cgroup_room(const std::filesystem::path& sys_cgroup,
                                      const std::string& proc_cgroup);

// The space left on the file system holding `dir` (statvfs: what an unprivileged writer may use).
// Throws Error(kIo).
MemoryRoom file_system_room(const std::filesystem::path& dir);

// Throws Error(kMemory) when `needed` bytes for `what` ("2 rank buffers") do not fit under one of
// the limits of memory_room(); the message names what is needed, what is left and the limit.
// `charged`: bytes of it the cgroup already counts (shared memory a restarted server reuses), which
// take no new room there (they still take address space when mapped).
void admit_memory(uint64_t needed, const std::string& what, uint64_t charged = 0);

// Throws Error(kMemory) when `needed` bytes for `what` do not fit in the free space of the tmpfs
// holding `dir` (/dev/shm) plus `reusable` bytes already there that will be reused or replaced.
void admit_shm(uint64_t needed, uint64_t reusable, const std::filesystem::path& dir,
               const std::string& what);

// For an out-of-memory message: "(the address-space limit ... leaves ... bytes)" or empty when no
// limit applies. Never throws (it runs after an allocation failed).
std::string memory_limits_note() noexcept;

// "101154304 bytes (96.47 MiB)".
std::string bytes_text(uint64_t bytes);

}  // namespace shardload
