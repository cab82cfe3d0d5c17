// The SVG line charts: dash patterns and markers per series, and a well-formed document on random data.
#include "report/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "report_test_util.h"

namespace fp4 {
namespace {

using fp4::testing::polylines;
using fp4::testing::seed_name;

TEST(SvgPlot, DashIndexGivesDistinctPatternsAndZeroIsSolid) {
  std::vector<PlotSeries> series;
  for (int d = 0; d < 4; ++d) series.push_back({seed_name(d), {0, 1, 2}, {1.0, 0.5, 0.2 * d}, false, 0, d});
  const auto lines = polylines(render_svg(PlotSpec{}, series));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_TRUE(lines[0].dash.empty());
  for (int a = 1; a < 4; ++a) {
    EXPECT_FALSE(lines[a].dash.empty());
    for (int b = a + 1; b < 4; ++b) EXPECT_NE(lines[a].dash, lines[b].dash);
  }
  // Validation points: filled for dash 0, rings otherwise (the plot's and the legend's).
  const std::string points =
      render_svg(PlotSpec{}, {{"a", {0, 1}, {1, 2}, true, 3, 0}, {"b", {0, 1}, {2, 1}, true, 3, 2}});
  size_t filled = 0, rings = 0;
  for (size_t p = points.find("<circle"); p != std::string::npos; p = points.find("<circle", p + 1)) {
    const std::string tag = points.substr(p, points.find("/>", p) - p);
    if (tag.find("fill='white'") != std::string::npos)
      ++rings;
    else if (tag.find("stroke=") == std::string::npos)
      ++filled;
  }
  EXPECT_EQ(filled, 3u);
  EXPECT_EQ(rings, 3u);
}

// A minimal XML check: tags nest and close, attribute values are quoted, text has no raw '<' or a bare '&'.
// Returns "" or what is wrong.
std::string xml_problem(const std::string& doc) {
  std::vector<std::string> open;
  size_t p = 0;
  while (p < doc.size()) {
    if (doc[p] == '&') {
      const size_t semi = doc.find(';', p);
      const std::string entity = doc.substr(p, semi == std::string::npos ? 6 : semi - p + 1);
      if (entity != "&lt;" && entity != "&gt;" && entity != "&amp;") return "bare & at " + std::to_string(p);
      p = semi + 1;
      continue;
    }
    if (doc[p] == '>') return "raw > in text at " + std::to_string(p);
    if (doc[p] != '<') {
      ++p;
      continue;
    }
    // A tag: its name, then name='value' attributes, until > or />.
    const bool closing = p + 1 < doc.size() && doc[p + 1] == '/';
    size_t q = p + (closing ? 2 : 1);
    const size_t name_end = doc.find_first_of(" \n/>", q);
    if (name_end == std::string::npos || name_end == q) return "tag without a name at " + std::to_string(p);
    const std::string name = doc.substr(q, name_end - q);
    q = name_end;
    for (;;) {
      while (q < doc.size() && (doc[q] == ' ' || doc[q] == '\n')) ++q;
      if (q >= doc.size()) return "unterminated <" + name;
      if (doc[q] == '>' || (doc[q] == '/' && q + 1 < doc.size() && doc[q + 1] == '>')) break;
      const size_t eq = doc.find('=', q);
      if (eq == std::string::npos || eq + 1 >= doc.size() || doc[eq + 1] != '\'')
        return "unquoted attribute in <" + name;
      const size_t close = doc.find('\'', eq + 2);
      if (close == std::string::npos) return "unterminated attribute in <" + name;
      const std::string value = doc.substr(eq + 2, close - eq - 2);
      if (value.find_first_of("<>") != std::string::npos) return "< or > in an attribute of <" + name;
      q = close + 1;
    }
    const bool self_closing = doc[q] == '/';
    if (closing) {
      if (open.empty() || open.back() != name) return "</" + name + "> closes nothing open";
      open.pop_back();
    } else if (!self_closing) {
      open.push_back(name);
    }
    p = q + (self_closing ? 2 : 1);
  }
  if (!open.empty()) return "<" + open.back() + "> left open";
  return "";
}

// Every number in the points of the polylines, as (x, y).
std::vector<std::pair<double, double>> polyline_points(const std::string& svg) {
  std::vector<std::pair<double, double>> out;
  for (size_t p = svg.find(" points='"); p != std::string::npos; p = svg.find(" points='", p + 1)) {
    std::istringstream in(svg.substr(p + 9, svg.find('\'', p + 9) - p - 9));
    double x, y;
    char comma;
    while (in >> x >> comma >> y) out.emplace_back(x, y);
  }
  return out;
}

// Random series, empty ones, single points, NaN and infinite values, labels with markup characters and
// both axis modes: a well-formed document with finite coordinates, every line point inside the frame.
TEST(SvgPlot, RandomSeriesGiveAWellFormedDocumentInsideTheFrame) {
  std::mt19937 rng(std::random_device{}());
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::string awkward[] = {"a<b", "x & y", "</svg>", "plain", ""};
  for (int trial = 0; trial < 300; ++trial) {
    PlotSpec spec;
    spec.title = awkward[rng() % 5];
    spec.x_label = awkward[rng() % 5];
    spec.log_x = rng() % 2 == 0;
    if (rng() % 3 == 0) spec.y_min = 1, spec.y_max = 3;  // fixed range: values outside are clamped
    std::vector<PlotSeries> series(rng() % 6);
    std::uniform_real_distribution<double> xs(spec.log_x ? 0.5 : -100, 1e5), ys(-5, 5);
    size_t finite_line_points = 0;
    for (size_t k = 0; k < series.size(); ++k) {
      auto& s = series[k];
      s.label = awkward[rng() % 5];
      s.markers = rng() % 2 == 0;
      s.color = static_cast<int>(rng() % 12);
      s.dash = static_cast<int>(rng() % 6);
      const size_t n = rng() % 4 == 0 ? rng() % 2 : rng() % 40;  // now and then empty or a single point
      for (size_t i = 0; i < n; ++i) {
        s.x.push_back(xs(rng));
        const int kind = static_cast<int>(rng() % 10);
        s.y.push_back(kind == 0 ? nan : kind == 1 ? inf : kind == 2 ? -inf : ys(rng));
        if (!s.markers && std::isfinite(s.y.back())) ++finite_line_points;
      }
    }
    const std::string svg = render_svg(spec, series);
    ASSERT_EQ(xml_problem(svg), "") << "trial " << trial << "\n" << svg;
    EXPECT_EQ(svg.find("nan"), std::string::npos) << svg;
    EXPECT_EQ(svg.find("inf"), std::string::npos) << svg;
    EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
    const auto points = polyline_points(svg);
    EXPECT_EQ(points.size(), finite_line_points);
    // The frame: x from 70 to width - legend_width, y from 40 to height - 50 (render_svg's margins).
    const double right = spec.width - spec.legend_width, bottom = spec.height - 50;
    for (const auto& [x, y] : points) {
      EXPECT_GE(x, 70 - 1e-6);
      EXPECT_LE(x, right + 1e-6);
      EXPECT_GE(y, 40 - 1e-6);
      EXPECT_LE(y, bottom + 1e-6);
    }
    // One legend entry per series, each label escaped.
    size_t legend_texts = 0;
    for (const auto& s : series) legend_texts += s.label == "</svg>";
    size_t escaped = 0;
    for (size_t p = svg.find("&lt;/svg&gt;"); p != std::string::npos; p = svg.find("&lt;/svg&gt;", p + 1))
      ++escaped;
    EXPECT_GE(escaped, legend_texts);
  }
}

}  // namespace
}  // namespace fp4
