#include "report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace fp4 {
namespace {

const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
const char* const kDashes[] = {"6,3", "2,2", "9,3,2,3", "1,4"};

// The stroke-dasharray attribute of a dash index ("" for a solid line).
std::string dash_attr(int dash) {
  if (dash <= 0) return "";
  return std::string(" stroke-dasharray='") + kDashes[(dash - 1) % 4] + "'";
}

// A marker's paint: filled for dash 0, a ring otherwise (so the points of two seeds differ too).
std::string marker_paint(int dash, const char* color) {
  if (dash <= 0) return std::string("fill='") + color + "'";
  return std::string("fill='white' stroke='") + color + "' stroke-width='1.5'";
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else
      o += c;
  }
  return o;
}

// "Nice" tick positions covering [lo, hi].
std::vector<double> ticks(double lo, double hi, int target) {
  const double span = hi - lo;
  if (!(span > 0)) return {lo};
  const double raw = span / target, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  // Multiples of step computed from an integer count, so zero comes out as 0 and not as -1e-17.
  for (double k = std::ceil(lo / step); k * step <= hi + 1e-9 * span; k += 1) t.push_back(k * step + 0.0);
  return t;
}

std::string num(double v) {
  char b[32];
  const double a = std::fabs(v);
  if (a >= 1e9)
    std::snprintf(b, sizeof b, "%.3gG", v / 1e9);
  else if (a >= 1e6)
    std::snprintf(b, sizeof b, "%.3gM", v / 1e6);
  else if (a >= 1e4)
    std::snprintf(b, sizeof b, "%.3gk", v / 1e3);
  else
    std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

}  // namespace

std::string render_svg(const PlotSpec& spec, const std::vector<PlotSeries>& series) {
  double x0 = 1e300, x1 = -1e300;
  for (const auto& s : series)
    for (double x : s.x) x0 = std::min(x0, x), x1 = std::max(x1, x);
  if (x0 > x1) x0 = 0, x1 = 1;
  if (spec.log_x) x0 = std::max(x0, 1.0);
  double y0 = spec.y_min, y1 = spec.y_max;
  if (y0 == 0 && y1 == 0) {  // robust fit: skip the first 5% of the x range (the initial loss drop)
    y0 = 1e300, y1 = -1e300;
    const double cut = x0 + 0.05 * (x1 - x0);
    for (const auto& s : series)
      for (size_t i = 0; i < s.y.size(); ++i)
        if (s.x[i] >= cut && std::isfinite(s.y[i])) y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
    if (y0 > y1) y0 = 0, y1 = 1;
    const double pad = 0.05 * (y1 - y0 + 1e-12);
    y0 -= pad, y1 += pad;
  }
  const double L = 70, R = spec.legend_width, T = 40, B = 50;
  const double W = spec.width - L - R, H = spec.height - T - B;
  auto fx = [&](double x) {
    const double t = spec.log_x
                         ? (std::log(std::max(x, x0)) - std::log(x0)) / (std::log(x1) - std::log(x0) + 1e-300)
                         : (x - x0) / (x1 - x0 + 1e-300);
    return L + W * t;
  };
  auto fy = [&](double y) { return T + H * (1.0 - (std::clamp(y, y0, y1) - y0) / (y1 - y0 + 1e-300)); };

  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << spec.width << "' height='" << spec.height
    << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
  o << "<text x='" << spec.width / 2 << "' y='22' text-anchor='middle' font-size='15'>" << esc(spec.title)
    << "</text>\n";
  for (double t : ticks(y0, y1, 6))
    o << "<line x1='" << L << "' x2='" << L + W << "' y1='" << fy(t) << "' y2='" << fy(t)
      << "' stroke='#ddd'/><text x='" << L - 6 << "' y='" << fy(t) + 4 << "' text-anchor='end'>" << num(t)
      << "</text>\n";
  for (double t : ticks(x0, x1, 6))
    o << "<line y1='" << T << "' y2='" << T + H << "' x1='" << fx(t) << "' x2='" << fx(t)
      << "' stroke='#eee'/><text x='" << fx(t) << "' y='" << T + H + 18 << "' text-anchor='middle'>" << num(t)
      << "</text>\n";
  o << "<rect x='" << L << "' y='" << T << "' width='" << W << "' height='" << H
    << "' fill='none' stroke='#333'/>\n";
  o << "<text x='" << L + W / 2 << "' y='" << spec.height - 10 << "' text-anchor='middle'>"
    << esc(spec.x_label) << "</text>\n<text transform='translate(16," << T + H / 2
    << ") rotate(-90)' text-anchor='middle'>" << esc(spec.y_label) << "</text>\n";
  int legend = 0;
  for (const auto& s : series) {
    const char* color = kPalette[s.color % 8];
    if (s.markers) {
      for (size_t i = 0; i < s.x.size(); ++i)
        if (std::isfinite(s.y[i]))
          o << "<circle cx='" << fx(s.x[i]) << "' cy='" << fy(s.y[i]) << "' r='3.5' "
            << marker_paint(s.dash, color) << "/>";
      o << "\n";
    } else {
      o << "<polyline fill='none' stroke='" << color << "' stroke-width='1.5'" << dash_attr(s.dash)
        << " points='";
      for (size_t i = 0; i < s.x.size(); ++i)
        if (std::isfinite(s.y[i])) o << fx(s.x[i]) << "," << fy(s.y[i]) << " ";
      o << "'/>\n";
    }
    const double ly = T + 14 + 18 * legend++;
    o << (s.markers ? "<circle cx='" + std::to_string(L + W + 22) + "' cy='" + std::to_string(ly - 4) +
                          "' r='3.5' " + marker_paint(s.dash, color) + "/>"
                    : "<line x1='" + std::to_string(L + W + 12) + "' x2='" + std::to_string(L + W + 32) +
                          "' y1='" + std::to_string(ly - 4) + "' y2='" + std::to_string(ly - 4) +
                          "' stroke='" + color + "' stroke-width='2'" + dash_attr(s.dash) + "/>")
      << "<text x='" << L + W + 38 << "' y='" << ly << "'>" << esc(s.label) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace fp4
