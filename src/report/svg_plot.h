// A small SVG line-chart writer for loss curves (no plotting library needed on a training box).
#pragma once

#include <string>
#include <vector>

namespace fp4 {

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;
  bool markers = false;  // points with circles (e.g. validation), else a polyline
  int color = 0;         // index into the palette; series of one run share a color
  // 0: solid line, filled markers; k > 0: the k-th dash pattern and hollow markers (e.g. one per seed)
  int dash = 0;
};

struct PlotSpec {
  std::string title, x_label, y_label;
  bool log_x = false;
  double y_min = 0, y_max = 0;  // both 0: fit the data (robustly, ignoring the first 5% of x)
  int width = 960, height = 560;
  int legend_width = 250;  // right margin holding the legend (longer labels need more)
};

// Returns the SVG document.
std::string render_svg(const PlotSpec& spec, const std::vector<PlotSeries>& series);

}  // namespace fp4
