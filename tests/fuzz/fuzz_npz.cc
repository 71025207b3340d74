// libFuzzer target: the .npz (zip) reader must answer any bytes with arrays or an
// attnkit::Error, never a crash, a hang, another exception or a zip bomb's allocation.
#include <cstddef>
#include <cstdint>

#include "engine/error.h"
#include "engine/npz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)attnkit::parse_npz(data, size, "fuzz.npz");
  } catch (const attnkit::Error&) {
  }
  return 0;
}
