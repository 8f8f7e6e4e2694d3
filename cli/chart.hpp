// A line chart rendered to PNG with no library: `gpufile bench --sweep` draws its results
// (throughput against IO size, one line per thread count) without asking users to install a
// plotting stack on the machine being measured.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpufile::cli {

struct ChartPoint {
  double x = 0;
  double y = 0;
};

struct ChartSeries {
  std::string name;  // shown in the legend
  std::vector<ChartPoint> points;
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log2_x = false;  // x axis in powers of two (IO sizes); ticks labelled 4K, 64K, 1M...
  std::vector<ChartSeries> series;
};

// The chart as the bytes of a PNG file (8-bit RGB). Empty when the chart cannot be drawn
// (no points, non-finite values, x <= 0 on a log axis, size too small).
std::vector<uint8_t> render_png(const Chart& chart, int width = 960, int height = 600);

// render_png() written to `path`; false with *error set when drawing or writing fails.
bool write_png(const std::string& path, const Chart& chart, std::string* error);

}  // namespace gpufile::cli
