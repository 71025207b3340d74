// PNG files through libpng: 8-bit RGBA out (atomically, like every attnkit file), and back in
// for the tests and for anyone checking a picture.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tools/render/image.h"

namespace attnkit::render {

// The PNG image of `image` (RGB when fully opaque, RGBA otherwise).
std::vector<uint8_t> encode_png(const Image& image);
void write_png(const std::string& path, const Image& image);

// Decodes any PNG libpng reads (palette, grey, 16-bit, interlaced) to RGBA. Throws FileError
// naming `what` on a file that is not a PNG or is damaged.
Image decode_png(const uint8_t* data, size_t size, const std::string& what);
Image read_png(const std::string& path);

}  // namespace attnkit::render
