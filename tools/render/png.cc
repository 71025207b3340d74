#include "tools/render/png.h"

#include <png.h>

#include <cstring>

#include "engine/error.h"
#include "engine/file_io.h"

namespace attnkit::render {
namespace {

// libpng reports errors through a callback that must not return. We throw from it instead of
// longjmp'ing (which would skip C++ destructors); the exception unwinds through libpng's C
// frames (Debian builds it with unwind tables, as x86-64 code is by default) and the catch
// blocks below destroy the libpng structs.
[[noreturn]] void throw_png_error(png_structp png, png_const_charp message) {
  const auto* what = static_cast<const std::string*>(png_get_error_ptr(png));
  throw FileError((what ? *what : std::string("PNG")) + ": " + message);
}
void ignore_png_warning(png_structp, png_const_charp) {}

struct Reader {
  const uint8_t* data;
  size_t size, pos;
};

}  // namespace

std::vector<uint8_t> encode_png(const Image& image) {
  std::vector<uint8_t> out;
  const std::string what = "PNG encoder";
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, const_cast<std::string*>(&what), throw_png_error,
                                            ignore_png_warning);
  if (!png) throw Error("libpng: cannot create a write struct");
  png_infop info = png_create_info_struct(png);
  try {
    if (!info) throw Error("libpng: cannot create an info struct");
    bool opaque = true;
    const uint8_t* px = image.rgba();
    for (size_t i = 3; opaque && i < static_cast<size_t>(image.width()) * image.height() * 4; i += 4) opaque = px[i] == 255;
    png_set_write_fn(
        png, &out,
        [](png_structp p, png_bytep bytes, png_size_t n) {
          auto* v = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(p));
          v->insert(v->end(), bytes, bytes + n);
        },
        nullptr);
    png_set_IHDR(png, info, static_cast<png_uint_32>(image.width()), static_cast<png_uint_32>(image.height()), 8,
                 opaque ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_RGBA, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(png, 6);
    png_write_info(png, info);
    std::vector<uint8_t> row(static_cast<size_t>(image.width()) * 4);
    for (int y = 0; y < image.height(); ++y) {
      const uint8_t* src = px + static_cast<size_t>(y) * image.width() * 4;
      if (opaque) {
        for (int x = 0; x < image.width(); ++x) std::memcpy(&row[static_cast<size_t>(x) * 3], src + x * 4, 3);
      } else {
        std::memcpy(row.data(), src, row.size());
      }
      png_write_row(png, row.data());
    }
    png_write_end(png, nullptr);
  } catch (...) {
    png_destroy_write_struct(&png, &info);
    throw;
  }
  png_destroy_write_struct(&png, &info);
  return out;
}

void write_png(const std::string& path, const Image& image) {
  const std::vector<uint8_t> bytes = encode_png(image);
  write_file_atomic(path, bytes.data(), bytes.size());
}

Image decode_png(const uint8_t* data, size_t size, const std::string& what) {
  if (size < 8 || png_sig_cmp(data, 0, 8) != 0) throw FileError(what + ": not a PNG file (bad signature)");
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, const_cast<std::string*>(&what), throw_png_error,
                                           ignore_png_warning);
  if (!png) throw Error("libpng: cannot create a read struct");
  png_infop info = png_create_info_struct(png);
  Image image;
  try {
    if (!info) throw Error("libpng: cannot create an info struct");
    Reader reader{data, size, 0};
    png_set_read_fn(png, &reader, [](png_structp p, png_bytep out, png_size_t n) {
      auto* r = static_cast<Reader*>(png_get_io_ptr(p));
      if (n > r->size - r->pos) png_error(p, "file is truncated");
      std::memcpy(out, r->data + r->pos, n);
      r->pos += n;
    });
    png_read_info(png, info);
    const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if (w == 0 || h == 0 || w > 32768 || h > 32768)
      throw FileError(what + ": image size " + std::to_string(w) + " x " + std::to_string(h) + " is not supported");
    png_set_expand(png);
    png_set_strip_16(png);
    png_set_gray_to_rgb(png);
    png_set_add_alpha(png, 0xFF, PNG_FILLER_AFTER);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    image = Image(static_cast<int>(w), static_cast<int>(h));
    std::vector<png_bytep> rows(h);
    for (png_uint_32 y = 0; y < h; ++y) rows[y] = image.rgba() + static_cast<size_t>(y) * w * 4;
    png_read_image(png, rows.data());
    png_read_end(png, nullptr);
  } catch (...) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw;
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return image;
}

Image read_png(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path, 1ull << 30);
  return decode_png(bytes.data(), bytes.size(), path);
}

}  // namespace attnkit::render
