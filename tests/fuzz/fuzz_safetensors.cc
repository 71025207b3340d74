// libFuzzer target: the safetensors parser must answer any bytes with tensors or an
// attnkit::Error, never a crash, a hang, another exception or a huge allocation.
#include <cstddef>
#include <cstdint>

#include "engine/error.h"
#include "engine/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)attnkit::parse_safetensors(data, size, "fuzz.safetensors");
  } catch (const attnkit::Error&) {
  }
  return 0;
}
