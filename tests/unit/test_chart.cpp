// cli/chart: the PNG line chart of `gpufile bench --sweep`. The tests read the charts back with a
// decoder written here for exactly what the chart writes (8-bit RGB, stored deflate blocks,
// filter 0), which checks every CRC and the Adler-32 on the way, then look at the pixels.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli/chart.hpp"

namespace gpufile::cli {
namespace {

// ---------------------------------------------------------------------------------------------
// A decoder for the chart's own PNGs

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
  bool operator<(const Rgb& o) const { return std::tie(r, g, b) < std::tie(o.r, o.g, o.b); }
};

constexpr Rgb kWhite{255, 255, 255};

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // rows top to bottom
  Rgb at(int x, int y) const {
    const uint8_t* p = &rgb[(size_t(y) * size_t(width) + size_t(x)) * 3];
    return {p[0], p[1], p[2]};
  }
};

// Bit by bit, unlike the table the chart uses, so the two do not share a mistake.
uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

uint32_t adler32(const std::vector<uint8_t>& data) {
  uint32_t a = 1, b = 0;
  for (uint8_t v : data) {
    a = (a + v) % 65521;
    b = (b + a) % 65521;
  }
  return b << 16 | a;
}

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | p[1] << 16 | p[2] << 8 | p[3]; }

// The image, or nullopt with a failure recorded (ADD_FAILURE) saying what is wrong.
std::optional<Image> decode(const std::vector<uint8_t>& png) {
  auto bad = [](const std::string& why) -> std::optional<Image> {
    ADD_FAILURE() << "not a valid chart PNG: " << why;
    return std::nullopt;
  };
  const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (png.size() < 8 || !std::equal(signature, signature + 8, png.begin())) return bad("signature");

  Image img;
  std::vector<uint8_t> zlib;
  bool ended = false;
  for (size_t pos = 8; pos < png.size();) {
    if (ended) return bad("bytes after IEND");
    if (png.size() - pos < 12) return bad("truncated chunk");
    const uint32_t len = be32(&png[pos]);
    if (png.size() - pos - 12 < len) return bad("chunk longer than the file");
    const std::string type(png.begin() + long(pos) + 4, png.begin() + long(pos) + 8);
    const uint8_t* data = &png[pos + 8];
    if (crc32(&png[pos + 4], len + 4) != be32(data + len)) return bad("CRC of " + type);
    if (type == "IHDR") {
      if (len != 13) return bad("IHDR length");
      img.width = int(be32(data));
      img.height = int(be32(data + 4));
      if (data[8] != 8 || data[9] != 2 || data[10] || data[11] || data[12])
        return bad("not 8-bit RGB");
    } else if (type == "IDAT") {
      zlib.insert(zlib.end(), data, data + len);
    } else if (type == "IEND") {
      ended = true;
    } else {
      return bad("unexpected chunk " + type);
    }
    pos += 12 + len;
  }
  if (!ended || img.width <= 0 || img.height <= 0) return bad("no IHDR or IEND");

  // zlib header, stored blocks, Adler-32.
  if (zlib.size() < 6 || (zlib[0] & 0x0F) != 8 || (zlib[0] << 8 | zlib[1]) % 31 != 0)
    return bad("zlib header");
  std::vector<uint8_t> raw;
  size_t pos = 2;
  for (bool last = false; !last;) {
    if (zlib.size() - pos < 5) return bad("truncated deflate block");
    if ((zlib[pos] >> 1 & 3) != 0) return bad("a deflate block that is not stored");
    last = zlib[pos] & 1;
    const unsigned n = zlib[pos + 1] | zlib[pos + 2] << 8;
    const unsigned nlen = zlib[pos + 3] | zlib[pos + 4] << 8;
    if ((n ^ 0xFFFF) != nlen) return bad("NLEN is not the complement of LEN");
    pos += 5;
    if (zlib.size() - pos < n) return bad("stored block past the end");
    raw.insert(raw.end(), zlib.begin() + long(pos), zlib.begin() + long(pos + n));
    pos += n;
  }
  if (zlib.size() - pos != 4 || be32(&zlib[pos]) != adler32(raw)) return bad("Adler-32");

  // Scanlines: a filter byte (0, none) then the pixels.
  const size_t row = size_t(img.width) * 3;
  if (raw.size() != (row + 1) * size_t(img.height)) return bad("image data size");
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* line = &raw[size_t(y) * (row + 1)];
    if (line[0] != 0) return bad("filter type other than 0");
    img.rgb.insert(img.rgb.end(), line + 1, line + 1 + row);
  }
  return img;
}

Image render(const Chart& chart, int width = 960, int height = 600) {
  const std::vector<uint8_t> png = render_png(chart, width, height);
  EXPECT_FALSE(png.empty());
  return decode(png).value_or(Image{});
}

// ---------------------------------------------------------------------------------------------
// Finding things in the picture

struct Box {
  int x0 = 0, y0 = 0, x1 = -1, y1 = -1;  // inclusive
  bool contains(int x, int y) const { return x >= x0 && x <= x1 && y >= y0 && y <= y1; }
};

bool dark(Rgb c) { return c.r < 80 && c.g < 80 && c.b < 80; }
// Series colours are saturated; text, axes and grid are greys.
bool colourful(Rgb c) { return std::max({c.r, c.g, c.b}) - std::min({c.r, c.g, c.b}) > 60; }

// The plot area: the y axis is the longest vertical run of dark pixels; the x axis leaves its
// bottom end going right, and the plot ends where that row turns white (series drawn over the
// axis count as part of it).
Box find_plot(const Image& img) {
  Box best;
  for (int x = 0; x < img.width; ++x) {
    for (int y = 0; y < img.height;) {
      int end = y;
      while (end < img.height && dark(img.at(x, end))) ++end;
      if (end - y > best.y1 - best.y0 + 1) best = {x, y, x, end - 1};
      y = end + 1;
    }
  }
  while (best.x1 + 1 < img.width && !(img.at(best.x1 + 1, best.y1) == kWhite)) ++best.x1;
  return best;
}

// Top-left corners of the solid 12x12 boxes of colour right of the plot: the legend, top to
// bottom, with their colours.
std::vector<std::pair<int, Rgb>> legend_boxes(const Image& img, const Box& plot) {
  std::vector<std::pair<int, Rgb>> boxes;
  for (int x = plot.x1 + 1; x + 12 <= img.width; ++x) {
    for (int y = 1; y + 12 <= img.height; ++y) {
      const Rgb c = img.at(x, y);
      if (!colourful(c) || img.at(x - 1, y) == c || img.at(x, y - 1) == c) continue;
      bool solid = true;  // the outer ring, which stays clear of any white marker drawn inside
      for (int i = 0; i < 12 && solid; ++i)
        solid = img.at(x + i, y) == c && img.at(x + i, y + 11) == c && img.at(x, y + i) == c &&
                img.at(x + 11, y + i) == c;
      if (solid) boxes.emplace_back(y, c);
    }
  }
  std::sort(boxes.begin(), boxes.end());
  return boxes;
}

// Pixels of colour `c` inside `box`, edges included.
int count(const Image& img, const Box& box, Rgb c) {
  int n = 0;
  for (int y = box.y0; y <= box.y1; ++y)
    for (int x = box.x0; x <= box.x1; ++x) n += img.at(x, y) == c;
  return n;
}

// The throughput sweep the bench draws: IO sizes 4K..64M, one series per thread count.
Chart sweep(int series, int sizes = 15) {
  Chart chart;
  chart.title = "gpufile bench --sweep: READ, GPUD";
  chart.x_label = "IO size (bytes)";
  chart.y_label = "throughput (GiB/s)";
  chart.log2_x = true;
  for (int s = 0; s < series; ++s) {
    ChartSeries line{std::to_string(s + 1) + " threads", {}};
    for (int e = 12; e < 12 + sizes; ++e)
      line.points.push_back({std::ldexp(1.0, e), (s + 1) * 1.5 * (1 - std::exp(-(e - 11) / 4.0))});
    chart.series.push_back(line);
  }
  return chart;
}

// ---------------------------------------------------------------------------------------------
// The tests

TEST(Chart, DecoderAgreesWithKnownChecksums) {
  const std::string text = "Wikipedia";
  EXPECT_EQ(adler32(std::vector<uint8_t>(text.begin(), text.end())), 0x11E60398u);
  const uint8_t iend[] = {'I', 'E', 'N', 'D'};
  EXPECT_EQ(crc32(iend, 4), 0xAE426082u);
}

TEST(Chart, PngHasTheRequestedSizeAndEndsWithIend) {
  for (auto [w, h] : {std::pair{960, 600}, {200, 150}, {1500, 400}, {333, 777}}) {
    const std::vector<uint8_t> png = render_png(sweep(3), w, h);
    ASSERT_FALSE(png.empty()) << w << "x" << h;
    const std::vector<uint8_t> iend = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
    EXPECT_TRUE(std::equal(iend.begin(), iend.end(), png.end() - 12));
    const std::optional<Image> img = decode(png);
    ASSERT_TRUE(img);
    EXPECT_EQ(img->width, w);
    EXPECT_EQ(img->height, h);
  }
}

TEST(Chart, BackgroundIsWhite) {
  const Image img = render(sweep(2));
  ASSERT_GT(img.width, 0);
  const Box all{0, 0, img.width - 1, img.height - 1};
  for (int x : {all.x0, all.x1})
    for (int y : {all.y0, all.y1}) EXPECT_EQ(img.at(x, y), kWhite) << x << "," << y;
  const int white = count(img, all, kWhite);
  EXPECT_GT(white, img.width * img.height * 8 / 10);
}

TEST(Chart, EachSeriesIsDrawnInsideThePlotInItsLegendColour) {
  const Image img = render(sweep(3));
  const Box plot = find_plot(img);
  ASSERT_GT(plot.x1 - plot.x0, 500);
  ASSERT_GT(plot.y1 - plot.y0, 400);
  const auto boxes = legend_boxes(img, plot);
  ASSERT_EQ(boxes.size(), 3u);
  for (const auto& [y, colour] : boxes) {
    // Fifteen points joined by 2 px lines: a few hundred pixels at least.
    EXPECT_GT(count(img, plot, colour), 300) << "legend row at y=" << y;
    // ...and never outside the plot, apart from the legend box itself.
    const int everywhere = count(img, {0, 0, img.width - 1, img.height - 1}, colour);
    EXPECT_EQ(everywhere, count(img, plot, colour) + 12 * 12);
  }
  EXPECT_NE(boxes[0].second, boxes[1].second);
  EXPECT_NE(boxes[1].second, boxes[2].second);
  EXPECT_NE(boxes[0].second, boxes[2].second);
}

TEST(Chart, LegendSitsRightOfThePlotOneBoxPerSeries) {
  const Image img = render(sweep(5));
  const Box plot = find_plot(img);
  const auto boxes = legend_boxes(img, plot);
  ASSERT_EQ(boxes.size(), 5u);
  for (size_t i = 1; i < boxes.size(); ++i) EXPECT_GT(boxes[i].first, boxes[i - 1].first + 12);
  EXPECT_GE(boxes.front().first, plot.y0);
  EXPECT_LE(boxes.back().first + 11, plot.y1);
}

TEST(Chart, SeriesAtZeroIsDrawnOnTheXAxis) {
  Chart chart = sweep(1);
  for (ChartPoint& p : chart.series[0].points) p.y = 0;
  const Image img = render(chart);
  const Box plot = find_plot(img);
  const auto boxes = legend_boxes(img, plot);
  ASSERT_EQ(boxes.size(), 1u);
  const Rgb colour = boxes[0].second;
  // Along the axis row, nearly all of the plot's width is the series.
  const int on_axis = count(img, {plot.x0, plot.y1, plot.x1, plot.y1}, colour);
  EXPECT_GT(on_axis, (plot.x1 - plot.x0) * 9 / 10);
  // Nothing of it above the markers' reach: a flat line, not drawn somewhere else.
  EXPECT_EQ(count(img, {plot.x0, plot.y0, plot.x1, plot.y1 - 5}, colour), 0);
  // The markers there are clipped to the plot: no half circles hang below the axis.
  EXPECT_EQ(count(img, {plot.x0, plot.y1 + 1, plot.x1, img.height - 1}, colour), 0);
}

TEST(Chart, OnePointAndOneSeriesStillMakeAChart) {
  Chart chart;
  chart.log2_x = true;
  chart.series.push_back({"only", {{65536, 2.5}}});
  const Image img = render(chart, 400, 300);
  const Box plot = find_plot(img);
  const auto boxes = legend_boxes(img, plot);
  ASSERT_EQ(boxes.size(), 1u);
  // One marker, about 7 px across, near the middle of the x axis.
  const int marker = count(img, plot, boxes[0].second);
  EXPECT_GT(marker, 20);
  EXPECT_LT(marker, 60);
}

TEST(Chart, ColoursCycleWithMoreSeriesThanThePalette) {
  const Image img = render(sweep(12, 6));
  const Box plot = find_plot(img);
  const auto boxes = legend_boxes(img, plot);
  ASSERT_EQ(boxes.size(), 12u);
  std::map<Rgb, int> uses;
  for (const auto& [y, colour] : boxes) ++uses[colour];
  EXPECT_EQ(uses.size(), 8u);
  EXPECT_EQ(boxes[8].second, boxes[0].second);
}

TEST(Chart, OddInputsRenderWithoutTrouble) {
  std::vector<Chart> charts;
  Chart c = sweep(2);
  c.series[0].name = std::string(5000, 'x');  // cut in the legend
  c.title = std::string(5000, 'T');
  c.x_label = "\x01\xff\xc3\xa9";  // not ASCII: drawn as '?'
  charts.push_back(c);
  c = sweep(40, 3);  // more rows than the legend has room for
  charts.push_back(c);
  c = Chart{};
  c.series = {{"empty", {}}, {"neg", {{1, -5}, {2, 3}}}, {"dup", {{2, 1}, {2, 1}, {1, 0}}}};
  charts.push_back(c);  // linear x, negative y, unsorted and repeated points
  c.series = {{"huge", {{1e300, 1e300}, {-1e300, 0}}}};
  charts.push_back(c);
  c.series = {{"tiny", {{1e-300, 1e-300}, {2e-300, 3e-300}}}};
  charts.push_back(c);
  c.series = {{"narrow", {{1e15, 1}, {1e15 + 0.125, 2}}}};  // x far beyond 2^53 steps
  charts.push_back(c);
  c.series = {{"max", {{-1.7e308, 1.7e308}, {1.7e308, -1.7e308}}}};  // nice ends overflow
  charts.push_back(c);
  c.log2_x = true;
  c.series = {{"wide", {{1e-300, 1}, {1e300, 2}}}};
  charts.push_back(c);
  c.series = {{"denormal", {{5e-324, 5e-324}, {4.9e-324, 0}}}};
  charts.push_back(c);
  for (size_t i = 0; i < charts.size(); ++i) {
    for (auto [w, h] : {std::pair{960, 600}, {200, 150}}) {
      const std::vector<uint8_t> png = render_png(charts[i], w, h);
      if (png.empty()) continue;  // refusing is allowed; crashing or a broken file is not
      const std::optional<Image> img = decode(png);
      ASSERT_TRUE(img) << "chart " << i;
      EXPECT_EQ(img->width, w);
    }
  }
  EXPECT_FALSE(render_png(charts[0]).empty());
  EXPECT_FALSE(render_png(charts[1]).empty());
  EXPECT_FALSE(render_png(charts[2]).empty());
}

TEST(Chart, UndrawableChartsAreEmpty) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(render_png(Chart{}).empty());
  Chart c;
  c.series = {{"no points", {}}};
  EXPECT_TRUE(render_png(c).empty());
  c.series = {{"nan", {{1, nan}}}};
  EXPECT_TRUE(render_png(c).empty());
  c.series = {{"inf", {{inf, 1}}}};
  EXPECT_TRUE(render_png(c).empty());
  c.log2_x = true;
  c.series = {{"zero x", {{0, 1}, {4096, 2}}}};
  EXPECT_TRUE(render_png(c).empty());
  c.series = {{"negative x", {{-4096, 1}}}};
  EXPECT_TRUE(render_png(c).empty());

  const Chart good = sweep(1);
  EXPECT_FALSE(render_png(good, 200, 150).empty());
  for (auto [w, h] : {std::pair{199, 600}, {960, 149}, {0, 0}, {-960, 600}, {100000, 600}})
    EXPECT_TRUE(render_png(good, w, h).empty()) << w << "x" << h;
}

TEST(Chart, WritePngFailsWithAMessage) {
  std::string error;
  const std::string path = "/nonexistent-gpufile-dir/chart.png";
  EXPECT_FALSE(write_png(path, sweep(1), &error));
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("No such file"), std::string::npos) << error;

  error.clear();
  const std::string tmp = ::testing::TempDir() + "gpufile-chart-undrawable.png";
  EXPECT_FALSE(write_png(tmp, Chart{}, &error));
  EXPECT_NE(error.find("no points"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(tmp));
  EXPECT_FALSE(write_png(path, Chart{}, nullptr));  // no error wanted: still no crash
}

// Leaves a sample chart behind to look at: after the run, open
//   $(TempDir)/gpufile-chart-sample.png   (usually /tmp/gpufile-chart-sample.png)
// in any image viewer, e.g. `xdg-open /tmp/gpufile-chart-sample.png`.
TEST(Chart, WritesASampleChartToLookAt) {
  const std::string path = ::testing::TempDir() + "gpufile-chart-sample.png";
  std::string error;
  ASSERT_TRUE(write_png(path, sweep(4), &error)) << error;
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
  EXPECT_EQ(bytes, render_png(sweep(4)));
  const std::optional<Image> img = decode(bytes);
  ASSERT_TRUE(img);
  EXPECT_EQ(img->width, 960);
  EXPECT_EQ(img->height, 600);
  std::cout << "sample chart: " << path << "\n";
}

}  // namespace
}  // namespace gpufile::cli
