#include "core/admission.h"

#include <sys/resource.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "shardload/error.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;

// cgroup v1 writes "no limit" as a page-aligned LONG_MAX; anything this large is no limit.
constexpr uint64_t kNoLimit = uint64_t{1} << 62;

std::optional<std::string> read_text(const fs::path& path) {
  std::ifstream file(path);
  if (!file) return std::nullopt;
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::optional<uint64_t> read_number(const fs::path& path) {
  const std::optional<std::string> text = read_text(path);
  if (!text) return std::nullopt;
  try {
    size_t end = 0;
    const uint64_t value = std::stoull(*text, &end);
    return end > 0 ? std::optional<uint64_t>(value) : std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;  // "max" (v2's no limit) or nothing readable
  }
}

// "key value" lines (memory.stat; /proc/self/status, whose keys end in a colon and whose values
// may be text or carry a unit): the lines whose value is a number.
std::map<std::string, uint64_t> read_keyed(const fs::path& path) {
  std::map<std::string, uint64_t> out;
  std::ifstream file(path);
  for (std::string line; std::getline(file, line);) {
    std::istringstream fields(line);
    std::string key;
    uint64_t value = 0;
    if (!(fields >> key >> value)) continue;
    if (key.ends_with(':')) key.pop_back();
    out[key] = value;
  }
  return out;
}

void keep_tighter(std::optional<MemoryRoom>& room, std::optional<MemoryRoom> other) {
  if (other && (!room || other->bytes < room->bytes)) room = std::move(other);
}

// What a cgroup uses that the kernel cannot simply drop: page cache is reclaimed under the limit
// (a load that reads a checkpoint fills it), but tmpfs and shared memory count as page cache too
// and stay, so they are not subtracted.
uint64_t unreclaimable(uint64_t usage, uint64_t cache, uint64_t shmem) {
  const uint64_t reclaimable = cache > shmem ? cache - shmem : 0;
  return usage > reclaimable ? usage - reclaimable : 0;
}

MemoryRoom cgroup_limit_room(uint64_t limit, uint64_t used, const fs::path& dir) {
  return {limit > used ? limit - used : 0,
          fmt::format("the cgroup memory limit of {} ({}), {} of it in use", bytes_text(limit),
                      dir.string(), bytes_text(used))};
}

// v2: every level from the process's cgroup up to the root may set memory.max; the tightest wins.
std::optional<MemoryRoom> cgroup_v2_room(const fs::path& sys, const fs::path& leaf) {
  std::optional<MemoryRoom> room;
  for (fs::path dir = leaf;; dir = dir.parent_path()) {
    const std::optional<uint64_t> limit = read_number(dir / "memory.max");
    const std::optional<uint64_t> current = read_number(dir / "memory.current");
    if (limit && current && *limit < kNoLimit) {
      std::map<std::string, uint64_t> stat = read_keyed(dir / "memory.stat");
      keep_tighter(room, cgroup_limit_room(
                             *limit, unreclaimable(*current, stat["file"], stat["shmem"]), dir));
    }
    if (dir == sys || !dir.has_relative_path() || dir == dir.parent_path()) break;
  }
  return room;
}

// v1: memory.stat's hierarchical_memory_limit is already the tightest of the levels above.
std::optional<MemoryRoom> cgroup_v1_room(const fs::path& dir) {
  std::map<std::string, uint64_t> stat = read_keyed(dir / "memory.stat");
  const std::optional<uint64_t> usage = read_number(dir / "memory.usage_in_bytes");
  std::optional<uint64_t> limit = read_number(dir / "memory.limit_in_bytes");
  if (stat.contains("hierarchical_memory_limit")) limit = stat["hierarchical_memory_limit"];
  if (!limit || !usage || *limit >= kNoLimit) return std::nullopt;
  return cgroup_limit_room(*limit, unreclaimable(*usage, stat["total_cache"], stat["total_shmem"]),
                           dir);
}

// A path of /proc/self/cgroup under the mount point; the mount point itself when the path is not
// there (a container whose cgroup file system shows its own cgroup as the root).
fs::path cgroup_dir(const fs::path& mount, const std::string& path) {
  const fs::path dir = mount / fs::path(path).relative_path();
  std::error_code ec;
  return fs::is_directory(dir, ec) ? dir : mount;
}

std::optional<MemoryRoom> address_space_room() {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  const uint64_t mapped = read_keyed("/proc/self/status")["VmSize"] * 1024;  // in kB there
  const uint64_t max = limit.rlim_cur;
  return MemoryRoom{max > mapped ? max - mapped : 0,
                    fmt::format("the address-space limit (ulimit -v) of {}, {} of it mapped",
                                bytes_text(max), bytes_text(mapped))};
}

std::optional<MemoryRoom> own_cgroup_room() {
  const std::optional<std::string> own = read_text("/proc/self/cgroup");
  return own ? cgroup_room("/sys/fs/cgroup", *own) : std::nullopt;
}

}  // namespace

std::string bytes_text(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (uint64_t{1} << 30))
    return fmt::format("{} bytes ({:.2f} GiB)", bytes, b / (1 << 30));
  if (bytes >= (uint64_t{1} << 20))
    return fmt::format("{} bytes ({:.2f} MiB)", bytes, b / (1 << 20));
  return fmt::format("{} bytes", bytes);
}

std::optional<MemoryRoom> cgroup_room(const fs::path& sys, const std::string& proc_cgroup) {
  std::optional<MemoryRoom> room;
  std::istringstream lines(proc_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    // hierarchy-id:controllers:path
    const size_t first = line.find(':');
    const size_t second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (line.substr(0, first) == "0" && controllers.empty()) {
      keep_tighter(room, cgroup_v2_room(sys, cgroup_dir(sys, path)));
      continue;
    }
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');) {
      if (name == "memory") keep_tighter(room, cgroup_v1_room(cgroup_dir(sys / "memory", path)));
    }
  }
  return room;
}

std::optional<MemoryRoom> memory_room() {
  std::optional<MemoryRoom> room = address_space_room();
  keep_tighter(room, own_cgroup_room());
  return room;
}

MemoryRoom file_system_room(const fs::path& dir) {
  struct statvfs stat;
  if (::statvfs(dir.c_str(), &stat) != 0) {
    throw Error(ErrorKind::kIo, fmt::format("cannot read the free space: {}", std::strerror(errno)),
                {.file = dir.string()});
  }
  return {static_cast<uint64_t>(stat.f_bavail) * stat.f_frsize,
          fmt::format("the free space of {}", dir.string())};
}

namespace {

[[noreturn]] void refuse(uint64_t needed, const MemoryRoom& room, const std::string& what) {
  throw Error(ErrorKind::kMemory,
              fmt::format("{} need {}, but {} leaves {}", what, bytes_text(needed), room.limit,
                          bytes_text(room.bytes)),
              {.expected = fmt::format("at least {} bytes available", needed),
               .found = fmt::format("{} bytes", room.bytes)});
}

}  // namespace

void admit_memory(uint64_t needed, const std::string& what, uint64_t charged) {
  if (std::optional<MemoryRoom> room = address_space_room(); room && needed > room->bytes)
    refuse(needed, *room, what);
  if (std::optional<MemoryRoom> room = own_cgroup_room()) {
    room->bytes += charged;
    if (charged > 0)
      room->limit += fmt::format(" ({} of it already this command's)", bytes_text(charged));
    if (needed > room->bytes) refuse(needed, *room, what);
  }
}

void admit_shm(uint64_t needed, uint64_t reusable, const fs::path& dir, const std::string& what) {
  MemoryRoom room = file_system_room(dir);
  room.bytes += reusable;
  if (reusable > 0)
    room.limit += fmt::format(" (with {} of this server's files there)", bytes_text(reusable));
  if (needed > room.bytes) refuse(needed, room, what);
}

std::string memory_limits_note() noexcept {
  try {
    const std::optional<MemoryRoom> room = memory_room();
    if (!room) return "";
    return fmt::format(" ({} leaves {})", room->limit, bytes_text(room->bytes));
  } catch (...) {
    return "";
  }
}

}  // namespace shardload
