// Line charts as PNG files with no library (chart.hpp says why). Three parts:
//   - a canvas: RGB pixels, drawing that is clipped to a rectangle and to the image, and a
//     built-in 5x9 bitmap font;
//   - the chart: layout (margins from the labels' sizes), "nice" ticks, series, legend;
//   - a PNG encoder that stores the pixels uncompressed (stored deflate blocks). A 960x600
//     chart is then 1.7 MB: fine for a benchmark report, and no compressor to write or trust.
#include "cli/chart.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>

namespace gpufile::cli {
namespace {

// ----------------------------------------------------------------------------------------------
// Canvas

struct Rgb {
  uint8_t r, g, b;
};

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kInk{40, 40, 40};      // text
constexpr Rgb kAxis{0, 0, 0};        // axes and tick marks
constexpr Rgb kGrid{225, 225, 225};  // light enough that the series stay in front

// Series colours: eight hues far apart from each other and from the greys above. Series past
// the eighth reuse them with another marker shape (see draw_marker).
constexpr std::array<Rgb, 8> kPalette{{
    {31, 119, 180},   // blue
    {255, 127, 14},   // orange
    {44, 160, 44},    // green
    {214, 39, 40},    // red
    {148, 103, 189},  // purple
    {140, 86, 75},    // brown
    {227, 119, 194},  // pink
    {23, 190, 207},   // cyan
}};

struct Rect {
  int x0, y0, x1, y1;  // inclusive corners
};

class Canvas {
 public:
  Canvas(int width, int height)
      : width_(width), height_(height), pixels_(size_t(width) * size_t(height) * 3, 255) {
    unclip();
  }

  int width() const { return width_; }
  int height() const { return height_; }
  const uint8_t* row(int y) const { return &pixels_[size_t(y) * size_t(width_) * 3]; }

  // Later drawing lands only inside `r` (and always inside the image).
  void clip(Rect r) { clip_ = r; }
  void unclip() { clip_ = {0, 0, width_ - 1, height_ - 1}; }

  // The one place that writes pixels, so nothing can land outside the image.
  void put(int x, int y, Rgb c) {
    if (x < clip_.x0 || x > clip_.x1 || y < clip_.y0 || y > clip_.y1) return;
    if (x < 0 || x >= width_ || y < 0 || y >= height_) return;
    uint8_t* p = &pixels_[(size_t(y) * size_t(width_) + size_t(x)) * 3];
    p[0] = c.r;
    p[1] = c.g;
    p[2] = c.b;
  }

  void fill(Rect r, Rgb c) {
    for (int y = std::max(r.y0, clip_.y0); y <= std::min(r.y1, clip_.y1); ++y)
      for (int x = std::max(r.x0, clip_.x0); x <= std::min(r.x1, clip_.x1); ++x) put(x, y, c);
  }

 private:
  int width_;
  int height_;
  Rect clip_{};
  std::vector<uint8_t> pixels_;  // rows top to bottom, 3 bytes (R, G, B) a pixel
};

// A 2 px wide line: a 2x2 stamp at each step along the longer axis, so steep and flat segments
// come out equally thick. The stamp reaches up and left of the point, so a line at y = 0 lies
// on the x axis (the plot's bottom row) rather than below it, where the clip would cut it.
void draw_line(Canvas& c, int x0, int y0, int x1, int y1, Rgb color) {
  const int steps = std::max(std::abs(x1 - x0), std::abs(y1 - y0));
  for (int i = 0; i <= steps; ++i) {
    const double t = steps == 0 ? 0.0 : double(i) / steps;
    const int x = x0 + int(std::lround(t * (x1 - x0)));
    const int y = y0 + int(std::lround(t * (y1 - y0)));
    c.fill({x - 1, y - 1, x, y}, color);
  }
}

// A filled marker about 7 px across. `shape` tells apart series that share a colour once there
// are more series than palette entries: circle, square, diamond, triangle.
void draw_marker(Canvas& c, int cx, int cy, int shape, Rgb color) {
  for (int dy = -4; dy <= 4; ++dy) {
    for (int dx = -4; dx <= 4; ++dx) {
      bool in = false;
      switch (shape % 4) {
        case 0: in = dx * dx + dy * dy <= 10; break;
        case 1: in = std::abs(dx) <= 3 && std::abs(dy) <= 3; break;
        case 2: in = std::abs(dx) + std::abs(dy) <= 4; break;
        default: in = dy >= -3 && dy <= 3 && 2 * std::abs(dx) <= dy + 4; break;  // apex up
      }
      if (in) c.put(cx + dx, cy + dy, color);
    }
  }
}

// ----------------------------------------------------------------------------------------------
// Font: 5 columns by 9 rows a glyph, for ASCII 32..126. Rows 0-6 lie above the baseline (capital
// height 7), rows 7-8 hold descenders. In each row byte, bit 4 is the leftmost column.

constexpr int kGlyphW = 5;
constexpr int kGlyphH = 9;
constexpr int kCapH = 7;
constexpr int kAdvance = kGlyphW + 1;

// clang-format off
constexpr uint8_t kFont[95][kGlyphH] = {
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // space
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04, 0x00, 0x00},  // !
    {0x0A, 0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // "
    {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A, 0x00, 0x00},  // #
    {0x04, 0x0F, 0x14, 0x0E, 0x05, 0x1E, 0x04, 0x00, 0x00},  // $
    {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03, 0x00, 0x00},  // %
    {0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D, 0x00, 0x00},  // &
    {0x04, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // '
    {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02, 0x00, 0x00},  // (
    {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08, 0x00, 0x00},  // )
    {0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00, 0x00, 0x00},  // *
    {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00, 0x00, 0x00},  // +
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08, 0x00},  // ,
    {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00, 0x00, 0x00},  // -
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C, 0x00, 0x00},  // .
    {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00, 0x00, 0x00},  // /
    {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E, 0x00, 0x00},  // 0
    {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // 1
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F, 0x00, 0x00},  // 2
    {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E, 0x00, 0x00},  // 3
    {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02, 0x00, 0x00},  // 4
    {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E, 0x00, 0x00},  // 5
    {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E, 0x00, 0x00},  // 6
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08, 0x00, 0x00},  // 7
    {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E, 0x00, 0x00},  // 8
    {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C, 0x00, 0x00},  // 9
    {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00, 0x00, 0x00},  // :
    {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x04, 0x08, 0x00, 0x00},  // ;
    {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02, 0x00, 0x00},  // <
    {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00, 0x00, 0x00},  // =
    {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08, 0x00, 0x00},  // >
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04, 0x00, 0x00},  // ?
    {0x0E, 0x11, 0x01, 0x0D, 0x15, 0x15, 0x0E, 0x00, 0x00},  // @
    {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0x00, 0x00},  // A
    {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E, 0x00, 0x00},  // B
    {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E, 0x00, 0x00},  // C
    {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C, 0x00, 0x00},  // D
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F, 0x00, 0x00},  // E
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10, 0x00, 0x00},  // F
    {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F, 0x00, 0x00},  // G
    {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0x00, 0x00},  // H
    {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // I
    {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C, 0x00, 0x00},  // J
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11, 0x00, 0x00},  // K
    {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F, 0x00, 0x00},  // L
    {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11, 0x00, 0x00},  // M
    {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11, 0x00, 0x00},  // N
    {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00, 0x00},  // O
    {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10, 0x00, 0x00},  // P
    {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D, 0x00, 0x00},  // Q
    {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11, 0x00, 0x00},  // R
    {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E, 0x00, 0x00},  // S
    {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00},  // T
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00, 0x00},  // U
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00, 0x00},  // V
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A, 0x00, 0x00},  // W
    {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11, 0x00, 0x00},  // X
    {0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00},  // Y
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F, 0x00, 0x00},  // Z
    {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E, 0x00, 0x00},  // [
    {0x00, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00, 0x00, 0x00},  // backslash
    {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E, 0x00, 0x00},  // ]
    {0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // ^
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F, 0x00},  // _
    {0x08, 0x04, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // `
    {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F, 0x00, 0x00},  // a
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E, 0x00, 0x00},  // b
    {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E, 0x00, 0x00},  // c
    {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F, 0x00, 0x00},  // d
    {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E, 0x00, 0x00},  // e
    {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08, 0x00, 0x00},  // f
    {0x00, 0x00, 0x0F, 0x11, 0x11, 0x13, 0x0D, 0x01, 0x0E},  // g
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00, 0x00},  // h
    {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // i
    {0x02, 0x00, 0x06, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C},  // j
    {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12, 0x00, 0x00},  // k
    {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // l
    {0x00, 0x00, 0x1A, 0x15, 0x15, 0x15, 0x15, 0x00, 0x00},  // m
    {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00, 0x00},  // n
    {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E, 0x00, 0x00},  // o
    {0x00, 0x00, 0x1E, 0x11, 0x11, 0x19, 0x16, 0x10, 0x10},  // p
    {0x00, 0x00, 0x0F, 0x11, 0x11, 0x13, 0x0D, 0x01, 0x01},  // q
    {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10, 0x00, 0x00},  // r
    {0x00, 0x00, 0x0F, 0x10, 0x0E, 0x01, 0x1E, 0x00, 0x00},  // s
    {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06, 0x00, 0x00},  // t
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D, 0x00, 0x00},  // u
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00, 0x00},  // v
    {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A, 0x00, 0x00},  // w
    {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x00, 0x00},  // x
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D, 0x01, 0x0E},  // y
    {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F, 0x00, 0x00},  // z
    {0x03, 0x04, 0x04, 0x08, 0x04, 0x04, 0x03, 0x00, 0x00},  // {
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00},  // |
    {0x18, 0x04, 0x04, 0x02, 0x04, 0x04, 0x18, 0x00, 0x00},  // }
    {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00, 0x00, 0x00},  // ~
};
// clang-format on

int text_width(std::string_view s, int scale = 1) {
  return s.empty() ? 0 : int(s.size()) * kAdvance * scale - scale;
}

// Calls plot(tx, ty) for each inked pixel of `s`, in text coordinates: origin at the top-left
// of the first glyph, x to the right, y down. Bytes outside ASCII 32..126 show as '?'.
template <typename Plot>
void for_each_text_pixel(std::string_view s, int scale, Plot plot) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    const uint8_t* rows = kFont[(ch >= 32 && ch <= 126 ? ch : '?') - 32];
    const int left = int(i) * kAdvance * scale;
    for (int gy = 0; gy < kGlyphH; ++gy)
      for (int gx = 0; gx < kGlyphW; ++gx)
        if (rows[gy] & (0x10 >> gx))
          for (int sy = 0; sy < scale; ++sy)
            for (int sx = 0; sx < scale; ++sx) plot(left + gx * scale + sx, gy * scale + sy);
  }
}

// `s` with the top-left of its first glyph at (x, y).
void draw_text(Canvas& c, int x, int y, std::string_view s, Rgb color, int scale = 1) {
  for_each_text_pixel(s, scale, [&](int tx, int ty) { c.put(x + tx, y + ty, color); });
}

// `s` turned a quarter anticlockwise, reading upward from (x, y), which is where the top-left of
// the first glyph lands: the y axis label.
void draw_text_up(Canvas& c, int x, int y, std::string_view s, Rgb color) {
  for_each_text_pixel(s, 1, [&](int tx, int ty) { c.put(x + ty, y - tx, color); });
}

// `s` cut to at most `max_chars` characters, ending in ".." when cut.
std::string fit(std::string_view s, int max_chars) {
  if (max_chars <= 0) return {};
  if (int(s.size()) <= max_chars) return std::string(s);
  if (max_chars <= 2) return std::string(s.substr(0, size_t(max_chars)));
  return std::string(s.substr(0, size_t(max_chars - 2))) + "..";
}

// ----------------------------------------------------------------------------------------------
// Axes and ticks. Positions are in axis units: the value itself, or log2 of it on a log axis.

struct Tick {
  double at;
  std::string label;  // empty: a minor tick (a short mark, no grid line)
};

// Maps axis units lo..hi onto pixels p0..p1 (p1 < p0 on the y axis, which grows upward).
struct Scale {
  double lo = 0, hi = 1;
  int p0 = 0, p1 = 1;
  int px(double v) const {
    const double offset = (v - lo) / (hi - lo) * (p1 - p0);
    return p0 + int(std::lround(std::clamp(offset, -1e6, 1e6)));  // an int, whatever comes in
  }
};

// The smallest of 1, 2 or 5 times a power of ten that is at least `raw` (> 0).
double nice_step(double raw) {
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * decade >= raw * (1 - 1e-9)) return m * decade;
  return 10 * decade;
}

// A multiple of `step` with the decimals the step needs: steps of 0.5 read 0.5, 1.0, 1.5.
std::string number_label(double v, double step) {
  const int decimals = step >= 1 ? 0 : int(std::ceil(-std::log10(step) - 1e-9));
  char buf[48];
  if (decimals > 6 || std::abs(v) >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3g", v);
  else
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// 2^e in binary units: 512, 1K, 4K, 1M, 16G... (2^e beyond them).
std::string binary_label(int e) {
  constexpr const char* kUnits = "KMGTPE";
  if (e < 0 || e >= 70) return "2^" + std::to_string(e);
  if (e < 10) return std::to_string(1 << e);
  return std::to_string(1 << (e % 10)) + kUnits[e / 10 - 1];
}

// Ticks every nice step, about `intervals` of them, over lo..hi; lo and hi widen to the outer
// ticks so the axis starts and ends on a labelled value. Empty if the range is unusable.
std::vector<Tick> linear_ticks(double& lo, double& hi, int intervals) {
  if (!(hi > lo) || !std::isfinite(hi - lo)) return {};
  const double step = nice_step((hi - lo) / intervals);
  const double k0 = std::floor(lo / step), k1 = std::ceil(hi / step);
  // Counted with an int: past 2^53 (values huge against their spread) ++ on a double stops
  // moving. Refuse when rounding went wrong or the axis would overflow to infinity.
  const double count = k1 - k0;
  if (!(step > 0) || !(count >= 1 && count <= 100) || !std::isfinite(k1 * step - k0 * step))
    return {};
  lo = k0 * step;
  hi = k1 * step;
  std::vector<Tick> ticks;
  for (int i = 0; i <= int(count); ++i) {
    const double v = (k0 + i) * step;
    ticks.push_back({v, number_label(v, step)});
  }
  return ticks;
}

int widest_label(const std::vector<Tick>& ticks) {
  int w = 0;
  for (const Tick& t : ticks) w = std::max(w, text_width(t.label));
  return w;
}

// Whether labels centred on their ticks keep at least `gap` px apart on `scale`.
bool labels_fit(const std::vector<Tick>& ticks, const Scale& scale, int gap) {
  const Tick* prev = nullptr;
  for (const Tick& t : ticks) {
    if (t.label.empty()) continue;
    if (prev && std::abs(scale.px(t.at) - scale.px(prev->at)) <
                    (text_width(prev->label) + text_width(t.label)) / 2 + gap)
      return false;
    prev = &t;
  }
  return true;
}

// The x axis in log2 units: whole powers of two from below the data to above it, a label on
// every k-th one (k as small as keeps labels apart and at most ~10 of them), a minor tick on
// the others where they are not crammed together.
std::vector<Tick> log2_ticks(Scale& scale, double data_lo, double data_hi) {
  int e0 = int(std::floor(data_lo)), e1 = int(std::ceil(data_hi));
  if (e0 == e1) --e0, ++e1;  // a single size: centre it
  scale.lo = e0;
  scale.hi = e1;
  const double px_per_power = double(std::abs(scale.p1 - scale.p0)) / (e1 - e0);
  std::vector<Tick> ticks;
  for (int k = 1; k <= e1 - e0; ++k) {
    ticks.clear();
    for (int e = e0; e <= e1; ++e) {
      const bool labelled = ((e % k) + k) % k == 0;
      if (labelled || px_per_power >= 4)
        ticks.push_back({double(e), labelled ? binary_label(e) : ""});
    }
    const auto labels = std::count_if(ticks.begin(), ticks.end(),
                                      [](const Tick& t) { return !t.label.empty(); });
    if (labels <= 10 && labels_fit(ticks, scale, 12)) break;
  }
  return ticks;
}

// The linear x axis: as many nice steps as leave the labels apart.
std::vector<Tick> linear_x_ticks(Scale& scale, double data_lo, double data_hi) {
  if (data_lo == data_hi) {  // a single x: centre it
    const double half = std::max(std::abs(data_lo) * 0.5, 1.0);
    data_lo -= half;
    data_hi += half;
  }
  for (int intervals = std::clamp(std::abs(scale.p1 - scale.p0) / 80, 2, 10); ; --intervals) {
    scale.lo = data_lo;
    scale.hi = data_hi;
    std::vector<Tick> ticks = linear_ticks(scale.lo, scale.hi, intervals);
    if (ticks.empty() || intervals == 1 || labels_fit(ticks, scale, 12)) return ticks;
  }
}

// ----------------------------------------------------------------------------------------------
// The chart

constexpr int kMinWidth = 200, kMinHeight = 150;
constexpr int kMaxSide = 8192;  // 8192^2 RGB is 192 MiB: past that, a bad argument
constexpr int kPad = 12;        // around the whole image
constexpr int kTick = 4;        // tick mark length
constexpr int kGap = 4;         // tick mark to its label
constexpr int kInsetX = 8;      // plot edge to the first and last x value, so markers stay whole
constexpr int kInsetTop = 8;    // plot top to the highest y tick
constexpr int kLegendGap = 16;  // plot to legend
constexpr int kLegendBox = 12;
constexpr int kLegendRow = 18;
constexpr int kMaxNameChars = 24;

// Why the chart's data cannot be drawn, or empty when it can.
std::string data_problem(const Chart& chart) {
  bool any = false;
  for (const ChartSeries& s : chart.series) {
    for (const ChartPoint& p : s.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) return "a point is not a finite number";
      if (chart.log2_x && p.x <= 0) return "an x value is <= 0 on a log axis";
      any = true;
    }
  }
  return any ? "" : "no points";
}

struct Bounds {
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;  // axis units
};

Bounds data_bounds(const Chart& chart) {
  Bounds b;
  for (const ChartSeries& s : chart.series) {
    for (const ChartPoint& p : s.points) {
      const double x = chart.log2_x ? std::log2(p.x) : p.x;
      b.x_lo = std::min(b.x_lo, x);
      b.x_hi = std::max(b.x_hi, x);
      b.y_lo = std::min(b.y_lo, p.y);
      b.y_hi = std::max(b.y_hi, p.y);
    }
  }
  return b;
}

struct Layout {
  Rect plot{};  // the axes run along its left and bottom edges
  Scale x, y;
  std::vector<Tick> x_ticks, y_ticks;
  int legend_x = 0;
  int legend_chars = 0;  // names are cut to this
};

// Places everything. The order matters: the height fixes the y ticks, their labels' width fixes
// the left margin, and the plot's width then fixes how many x labels fit.
std::optional<Layout> lay_out(const Chart& chart, int width, int height) {
  const Bounds b = data_bounds(chart);
  Layout l;
  const int line = kGlyphH;
  l.plot.y0 = kPad + (chart.title.empty() ? 0 : 2 * line + 10);
  l.plot.y1 = height - 1 - (kPad + kTick + kGap + line + (chart.x_label.empty() ? 0 : 8 + line));
  l.y = {0, 1, l.plot.y1, l.plot.y0 + kInsetTop};

  // Throughput starts at 0; the axis reaches below only for negative values.
  double y_lo = std::min(0.0, b.y_lo), y_hi = std::max(0.0, b.y_hi);
  if (y_hi == y_lo) y_hi = y_lo + 1;  // all zero: an axis of 0..1
  l.y_ticks = linear_ticks(y_lo, y_hi, std::clamp((l.y.p0 - l.y.p1) / 45, 2, 10));
  l.y.lo = y_lo;
  l.y.hi = y_hi;

  const int y_label_w = chart.y_label.empty() ? 0 : line + 8;
  l.plot.x0 = kPad + y_label_w + widest_label(l.y_ticks) + kGap + kTick;
  // The legend takes at most a quarter of the width; its names are cut to fit.
  const int legend_fixed = kLegendGap + kLegendBox + 6 + kPad;
  l.legend_chars = std::clamp((width / 4 - legend_fixed) / kAdvance, 4, kMaxNameChars);
  int names = 0;
  for (const ChartSeries& s : chart.series)
    names = std::max(names, text_width(fit(s.name, l.legend_chars)));
  l.plot.x1 = width - 1 - (legend_fixed + names);
  l.legend_x = l.plot.x1 + kLegendGap;
  l.x = {0, 1, l.plot.x0 + kInsetX, l.plot.x1 - kInsetX};
  if (l.y_ticks.empty() || l.plot.x1 - l.plot.x0 < 60 || l.plot.y1 - l.plot.y0 < 40)
    return std::nullopt;

  l.x_ticks = chart.log2_x ? log2_ticks(l.x, b.x_lo, b.x_hi) : linear_x_ticks(l.x, b.x_lo, b.x_hi);
  if (l.x_ticks.empty()) return std::nullopt;
  return l;
}

void draw_axes(Canvas& c, const Layout& l) {
  const Rect& p = l.plot;
  for (const Tick& t : l.y_ticks) {
    const int y = l.y.px(t.at);
    c.fill({p.x0 + 1, y, p.x1, y}, kGrid);
    c.fill({p.x0 - kTick, y, p.x0 - 1, y}, kAxis);
    draw_text(c, p.x0 - kTick - kGap - text_width(t.label), y - kCapH / 2, t.label, kInk);
  }
  for (const Tick& t : l.x_ticks) {
    const int x = l.x.px(t.at);
    if (t.label.empty()) {
      c.fill({x, p.y1 + 1, x, p.y1 + kTick / 2}, kAxis);
      continue;
    }
    c.fill({x, p.y0, x, p.y1 - 1}, kGrid);
    c.fill({x, p.y1 + 1, x, p.y1 + kTick}, kAxis);
    draw_text(c, x - text_width(t.label) / 2, p.y1 + kTick + kGap + 1, t.label, kInk);
  }
  c.fill({p.x0, p.y0, p.x0, p.y1}, kAxis);
  c.fill({p.x0, p.y1, p.x1, p.y1}, kAxis);
}

Rgb series_color(size_t i) { return kPalette[i % kPalette.size()]; }
int series_shape(size_t i) { return int(i / kPalette.size()); }

// Lines in x order (callers may list points in any order), then markers on top, all clipped to
// the plot.
void draw_series(Canvas& c, const Chart& chart, const Layout& l) {
  c.clip(l.plot);
  for (size_t i = 0; i < chart.series.size(); ++i) {
    std::vector<ChartPoint> points = chart.series[i].points;
    std::stable_sort(points.begin(), points.end(),
                     [](const ChartPoint& a, const ChartPoint& b) { return a.x < b.x; });
    std::vector<std::pair<int, int>> px;
    for (const ChartPoint& p : points)
      px.emplace_back(l.x.px(chart.log2_x ? std::log2(p.x) : p.x), l.y.px(p.y));
    for (size_t k = 1; k < px.size(); ++k)
      draw_line(c, px[k - 1].first, px[k - 1].second, px[k].first, px[k].second, series_color(i));
    for (const auto& [x, y] : px) draw_marker(c, x, y, series_shape(i), series_color(i));
  }
  c.unclip();
}

// Right of the plot, one row a series: a box of its colour (with its marker in white when the
// colours have cycled) and its name. Rows that do not fit beside the plot become "+N more".
void draw_legend(Canvas& c, const Chart& chart, const Layout& l) {
  const int rows = (l.plot.y1 - l.plot.y0 + 1) / kLegendRow;
  const size_t n = chart.series.size();
  const size_t shown = n <= size_t(rows) ? n : size_t(std::max(rows - 1, 0));
  for (size_t i = 0; i < shown; ++i) {
    const int top = l.plot.y0 + int(i) * kLegendRow;
    c.fill({l.legend_x, top, l.legend_x + kLegendBox - 1, top + kLegendBox - 1}, series_color(i));
    const int mid = kLegendBox / 2;
    if (series_shape(i) > 0) draw_marker(c, l.legend_x + mid, top + mid, series_shape(i), kWhite);
    draw_text(c, l.legend_x + kLegendBox + 6, top + (kLegendBox - kCapH) / 2,
              fit(chart.series[i].name, l.legend_chars), kInk);
  }
  if (shown < n) {
    const int top = l.plot.y0 + int(shown) * kLegendRow;
    draw_text(c, l.legend_x, top + 2, "+" + std::to_string(n - shown) + " more", kInk);
  }
}

void draw_labels(Canvas& c, const Chart& chart, const Layout& l) {
  const std::string title = fit(chart.title, (c.width() - 2 * kPad) / (2 * kAdvance));
  draw_text(c, (c.width() - text_width(title, 2)) / 2, kPad, title, kInk, 2);

  const std::string x_label = fit(chart.x_label, (l.plot.x1 - l.plot.x0) / kAdvance);
  const int x_label_top = l.plot.y1 + kTick + kGap + kGlyphH + 9;  // below the tick labels
  draw_text(c, (l.plot.x0 + l.plot.x1 - text_width(x_label)) / 2, x_label_top, x_label, kInk);

  const std::string y_label = fit(chart.y_label, (l.plot.y1 - l.plot.y0) / kAdvance);
  draw_text_up(c, kPad, (l.plot.y0 + l.plot.y1 + text_width(y_label)) / 2, y_label, kInk);
}

// ----------------------------------------------------------------------------------------------
// PNG: signature, IHDR, one IDAT holding a zlib stream of stored deflate blocks, IEND.

// CRC-32 as PNG uses it (reflected, polynomial 0xEDB88320), a byte at a time from a table.
// A function-local static: built once, at first use, safely even from several threads.
const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  return table;
}

uint32_t crc32(const uint8_t* data, size_t n) {
  const auto& table = crc_table();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// zlib's checksum of the uncompressed bytes.
uint32_t adler32(const std::vector<uint8_t>& data) {
  constexpr uint32_t kMod = 65521;
  uint32_t a = 1, b = 0;
  for (uint8_t byte : data) {
    a = (a + byte) % kMod;
    b = (b + a) % kMod;
  }
  return b << 16 | a;
}

void append_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(v >> shift));
}

// Length, type, data, and the CRC of type and data.
void append_chunk(std::vector<uint8_t>& png, const char* type, const std::vector<uint8_t>& data) {
  append_be32(png, uint32_t(data.size()));
  const size_t start = png.size();
  png.insert(png.end(), type, type + 4);
  png.insert(png.end(), data.begin(), data.end());
  append_be32(png, crc32(&png[start], png.size() - start));
}

// `raw` as a zlib stream whose deflate blocks are all "stored": each a header byte (BFINAL on
// the last, BTYPE 00), LEN and its complement NLEN (little-endian), then up to 65535 bytes.
std::vector<uint8_t> zlib_stored(const std::vector<uint8_t>& raw) {
  std::vector<uint8_t> z = {0x78, 0x01};  // deflate with a 32 KiB window; 0x7801 % 31 == 0
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(raw.size() - pos, 65535);
    const bool last = pos + n == raw.size();
    z.push_back(last ? 1 : 0);
    z.push_back(uint8_t(n));
    z.push_back(uint8_t(n >> 8));
    z.push_back(uint8_t(~n));
    z.push_back(uint8_t(~n >> 8));
    z.insert(z.end(), raw.begin() + std::ptrdiff_t(pos), raw.begin() + std::ptrdiff_t(pos + n));
    pos += n;
  } while (pos < raw.size());
  append_be32(z, adler32(raw));
  return z;
}

std::vector<uint8_t> encode_png(const Canvas& c) {
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

  std::vector<uint8_t> header;
  append_be32(header, uint32_t(c.width()));
  append_be32(header, uint32_t(c.height()));
  // Bit depth 8, colour type 2 (RGB), compression 0, filter method 0, no interlace.
  header.insert(header.end(), {8, 2, 0, 0, 0});
  append_chunk(png, "IHDR", header);

  // Each scanline: filter type 0 (none), then its pixels as they are.
  const size_t row_bytes = size_t(c.width()) * 3;
  std::vector<uint8_t> raw;
  raw.reserve((row_bytes + 1) * size_t(c.height()));
  for (int y = 0; y < c.height(); ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), c.row(y), c.row(y) + row_bytes);
  }
  append_chunk(png, "IDAT", zlib_stored(raw));
  append_chunk(png, "IEND", {});
  return png;
}

}  // namespace

std::vector<uint8_t> render_png(const Chart& chart, int width, int height) {
  if (width < kMinWidth || height < kMinHeight || width > kMaxSide || height > kMaxSide) return {};
  if (!data_problem(chart).empty()) return {};
  const std::optional<Layout> layout = lay_out(chart, width, height);
  if (!layout) return {};
  Canvas canvas(width, height);
  draw_axes(canvas, *layout);
  draw_series(canvas, chart, *layout);
  draw_legend(canvas, chart, *layout);
  draw_labels(canvas, chart, *layout);
  return encode_png(canvas);
}

bool write_png(const std::string& path, const Chart& chart, std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error) *error = "cannot write chart " + path + ": " + why;
    return false;
  };
  const std::vector<uint8_t> png = render_png(chart);
  if (png.empty()) {
    const std::string problem = data_problem(chart);
    return fail(problem.empty() ? "the chart does not fit the image" : problem);
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return fail(std::strerror(errno));
  const bool written = std::fwrite(png.data(), 1, png.size(), f) == png.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !written) {
    const std::string why = std::strerror(written ? errno : write_errno);
    std::remove(path.c_str());  // no half-written PNG left behind
    return fail(why);
  }
  return true;
}

}  // namespace gpufile::cli
