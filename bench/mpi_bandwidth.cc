// MPI's own point-to-point bandwidth between two processes, the limit a distributed load's
// transfers are reported against: node 0 sends --bytes in --message-byte messages to node 1,
// --depth of them in flight (as the loader keeps several chunks in flight), after one untimed
// round. Run with `mpirun -np 2`. Prints one line on node 0: "<GB/s> <seconds>".
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double transfer(int node, size_t total, size_t message, int depth, std::vector<char>& buffer) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  std::vector<MPI_Request> requests(static_cast<size_t>(depth), MPI_REQUEST_NULL);
  size_t slot = 0;
  for (size_t at = 0; at < total; at += message, slot = (slot + 1) % requests.size()) {
    MPI_Wait(&requests[slot], MPI_STATUS_IGNORE);
    char* data = buffer.data() + slot * message;
    const int count = static_cast<int>(std::min(message, total - at));
    if (node == 0) {
      MPI_Isend(data, count, MPI_BYTE, 1, 0, MPI_COMM_WORLD, &requests[slot]);
    } else {
      MPI_Irecv(data, count, MPI_BYTE, 0, 0, MPI_COMM_WORLD, &requests[slot]);
    }
  }
  MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  MPI_Barrier(MPI_COMM_WORLD);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  size_t total = size_t{4} << 30;
  size_t message = size_t{16} << 20;
  int depth = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const size_t value = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--bytes") total = value;
    if (flag == "--message-bytes") message = value;
    if (flag == "--depth") depth = static_cast<int>(value);
  }
  int node = 0;
  int nodes = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &node);
  MPI_Comm_size(MPI_COMM_WORLD, &nodes);
  if (nodes != 2) {
    if (node == 0) std::fprintf(stderr, "mpi_bandwidth: run with mpirun -np 2\n");
    MPI_Finalize();
    return 2;
  }
  std::vector<char> buffer(message * static_cast<size_t>(depth), 1);
  transfer(node, std::min(total, message * 16), message, depth,
           buffer);  // warm-up: connections, pages
  const double seconds = transfer(node, total, message, depth, buffer);
  if (node == 0) std::printf("%.3f %.6f\n", static_cast<double>(total) / seconds / 1e9, seconds);
  MPI_Finalize();
  return 0;
}
