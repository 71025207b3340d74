// libFuzzer target: the .npy parser must answer any bytes with an array or an attnkit::Error
// (FileError), never a crash, a hang, another exception or a huge allocation.
#include <cstddef>
#include <cstdint>

#include "engine/error.h"
#include "engine/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    attnkit::NpyArray a = attnkit::parse_npy(data, size, "fuzz.npy");
    if (a.descr == "<f4") (void)attnkit::to_float32(a, "fuzz");
    (void)attnkit::to_int32(a, "fuzz");
  } catch (const attnkit::Error&) {
  }
  return 0;
}
