// What data-parallel training needs from a group of processes, as an interface: the library
// stays free of any transport. tools/mpi_collective.{h,cc} implements it on MPI (the module
// attnkit_mpi.so, which the attnkit program built with ATTNKIT_MPI loads under mpirun); a test
// or an embedding program may bring its own.
#pragma once
#include <cstdint>
#include <vector>

namespace attnkit {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;  // 0 … size() − 1
  virtual int size() const = 0;
  // Element-wise sum over every process, in place. Every element is added in rank order
  // (((x0 + x1) + x2) + …), so a group of a given size gives the same bits on every run,
  // whatever the timing or the transport's own algorithms.
  // data holds sum_room(n) floats: the n values, then scratch the transport uses in place of
  // copies of its own (its contents before and after do not matter).
  virtual void sum(float* data, int64_t n) = 0;
  virtual int64_t sum_room(int64_t n) const { return n; }
  // Every process's value, in rank order.
  virtual std::vector<uint64_t> all_gather(uint64_t value) = 0;
  // Totals over the calls of sum(): bytes each process sent and received, and the seconds
  // it spent in them (waiting for slower processes included).
  virtual int64_t bytes_summed() const = 0;
  virtual double seconds_summing() const = 0;
};

}  // namespace attnkit
